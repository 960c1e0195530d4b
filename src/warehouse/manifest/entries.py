"""The values a manifest is made of: streams and segments, files and pieces.

These types trust their arguments; :meth:`Manifest.parse` and
:meth:`Manifest.from_files` are where input is checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from warehouse.blocks.locator import Locator
from warehouse.manifest.escape import escape_name

__all__ = ["FileEntry", "FilePiece", "Segment", "Stream", "format_stream"]


@dataclass(frozen=True, slots=True)
class Segment:
    """``length`` bytes at ``position`` in the stream's data belong to ``name``.

    ``name`` is unescaped and relative to the stream; it may contain ``/``.
    A last component of ``.`` (with length 0) marks an existing directory.
    """

    position: int
    length: int
    name: str

    @property
    def is_directory_marker(self) -> bool:
        return self.name == "." or self.name.endswith("/.")


@dataclass(frozen=True, slots=True)
class Stream:
    """One manifest line: a directory name, its blocks, and its segments."""

    name: str
    locators: tuple[Locator, ...]
    segments: tuple[Segment, ...]

    @property
    def size(self) -> int:
        """Bytes in the concatenation of this stream's blocks."""
        return sum(locator.size for locator in self.locators)

    def format(self) -> str:
        """The stream as one escaped manifest line ending in ``\\n``."""
        return format_stream(self, hints=True)


def _escape_segment_name(name: str) -> str:
    # A bare "." would read back fine, but the marker is conventionally
    # written escaped, and other writers expect exactly that.
    if name == ".":
        return "\\056"
    if name.endswith("/."):
        return escape_name(name[:-1]) + "\\056"
    return escape_name(name)


def format_stream(stream: Stream, *, hints: bool) -> str:
    """Format ``stream``; with ``hints=False`` every locator loses its hints."""
    parts = [escape_name(stream.name)]
    if hints:
        parts.extend(str(locator) for locator in stream.locators)
    else:
        parts.extend(locator.key for locator in stream.locators)
    escape = _escape_segment_name
    parts.extend(f"{seg.position}:{seg.length}:{escape(seg.name)}" for seg in stream.segments)
    return " ".join(parts) + "\n"


@dataclass(frozen=True, slots=True)
class FilePiece:
    """``length`` bytes of a file, found at ``offset`` inside one block."""

    locator: Locator
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class FileEntry:
    """A file of a collection and where its bytes are, piece by piece.

    ``path`` is relative to the collection root (``a/b/c.txt``, no ``./``);
    an empty file has no pieces.
    """

    path: str
    size: int
    pieces: tuple[FilePiece, ...]
