"""Manifests: the text that lists a collection's files over its blocks."""

from warehouse.manifest.entries import FileEntry, FilePiece, Segment, Stream
from warehouse.manifest.escape import escape_name, unescape_name
from warehouse.manifest.md5sum import md5sum_line
from warehouse.manifest.model import Manifest, normalize
from warehouse.manifest.parse import ManifestError

__all__ = [
    "FileEntry",
    "FilePiece",
    "Manifest",
    "ManifestError",
    "Segment",
    "Stream",
    "escape_name",
    "md5sum_line",
    "normalize",
    "unescape_name",
]
