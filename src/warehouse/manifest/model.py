"""The :class:`Manifest`: a collection's files as text over content-addressed blocks."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Set
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

from warehouse.blocks.locator import EMPTY_LOCATOR, Locator
from warehouse.manifest.entries import FileEntry, Stream, format_stream
from warehouse.manifest.layout import (
    directories_of,
    empty_directories_of,
    file_entries,
    marked_directories,
)
from warehouse.manifest.normalize import normalized_streams
from warehouse.manifest.parse import Text, parse_streams

__all__ = ["Manifest", "normalize"]


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest. Two manifests are equal when their streams are.

    Derived values (files, PDH, …) are computed once and cached; the
    dataclass is frozen, so they cannot go stale.
    """

    streams: tuple[Stream, ...]

    @classmethod
    def parse(cls, text: Text) -> Manifest:
        """Parse manifest text strictly; raise ManifestError naming line and token."""
        return cls(parse_streams(text))

    @classmethod
    def from_files(cls, files: Iterable[FileEntry], empty_dirs: Iterable[str] = ()) -> Manifest:
        """The normalized manifest holding ``files`` and the empty ``empty_dirs``."""
        return cls(normalized_streams(files, empty_dirs))

    def format(self) -> str:
        """The manifest text, hints included."""
        return "".join([format_stream(stream, hints=True) for stream in self.streams])

    def portable_text(self) -> str:
        """The manifest text with every locator hint stripped."""
        return self._portable

    @cached_property
    def _portable(self) -> str:
        return "".join([format_stream(stream, hints=False) for stream in self.streams])

    @cached_property
    def pdh(self) -> str:
        """Portable data hash: ``md5hex(portable text) + "+" + its length in bytes``."""
        data = self._portable.encode("utf-8")
        if not data:
            return str(EMPTY_LOCATOR)
        return f"{hashlib.md5(data).hexdigest()}+{len(data)}"

    @cached_property
    def _files(self) -> dict[str, FileEntry]:
        return file_entries(self.streams)

    @cached_property
    def _directories(self) -> set[str]:
        return directories_of(self._files, marked_directories(self.streams))

    def files(self) -> dict[str, FileEntry]:
        """Every file by root-relative path, in order of first appearance."""
        return dict(self._files)

    def files_view(self) -> Mapping[str, FileEntry]:
        """``files()`` as a read-only view: no copy of a million entries."""
        return MappingProxyType(self._files)

    def file_count(self) -> int:
        """How many files (``len(files())`` without copying them)."""
        if "_paths" not in self.__dict__ and self.__dict__.get("_normalized") is self:
            # Counted, not kept: a set of every path is what a put of many
            # files would otherwise hold while it records them.
            return sum(1 for _ in self.file_paths_in_order())
        return len(self._paths)

    def file_paths(self) -> Set[str]:
        """The paths of every file, as a set (no file table built for it)."""
        return self._paths

    @cached_property
    def _paths(self) -> Set[str]:
        if "_files" in self.__dict__:
            return self._files.keys()
        # A file is named in one segment or more: the names, without the pieces.
        return frozenset(path for stream in self.streams for path in _segment_paths(stream))

    def file_paths_in_order(self) -> Iterator[str]:
        """Every file's path once, in the order of ``files()``, without
        making its entry."""
        if "_files" in self.__dict__:
            return iter(self._files)
        if self.__dict__.get("_normalized") is self:
            # Normalized, a file's segments are side by side in its own
            # directory's stream: dropping repeats needs no table of paths.
            return _unrepeated(p for stream in self.streams for p in _segment_paths(stream))
        return iter(dict.fromkeys(p for stream in self.streams for p in _segment_paths(stream)))

    def has_file(self, path: str) -> bool:
        return path in self._files

    def directories(self) -> list[str]:
        """Every directory that exists (the root excluded), sorted."""
        return sorted(self._directories)

    def empty_directories(self) -> list[str]:
        """Directories that hold nothing at all, sorted."""
        return empty_directories_of(self._files, self._directories)

    def blocks(self) -> list[Locator]:
        """Distinct stored blocks in first-use order (by key, first hints kept).

        The empty block is left out: it is never stored and always readable.
        """
        seen: set[str] = set()
        found: list[Locator] = []
        for stream in self.streams:
            for locator in stream.locators:
                key = locator.key
                if key not in seen and not locator.is_empty:
                    seen.add(key)
                    found.append(locator)
        return found

    @cached_property
    def _normalized(self) -> Manifest:
        streams = normalized_streams(self._files.values(), self.empty_directories())
        if streams == self.streams:
            return self  # already normalized: one copy of everything, not two
        normal = Manifest(streams)
        # Normalizing keeps every file as it is: the entries need not be
        # computed again from the new streams (half the time of a big put),
        # only put in the new order.
        files = self._files
        normal.__dict__["_files"] = {
            path: files[path] for stream in streams for path in _segment_paths(stream)
        }
        normal.__dict__["_normalized"] = normal
        return normal

    def normalized(self) -> Manifest:
        """The normalized form: same files, same bytes, canonical text."""
        return self._normalized

    @cached_property
    def size(self) -> int:
        """Total bytes of all files (the sum of the segments: a file's size is
        the sum of its own)."""
        return sum(seg.length for stream in self.streams for seg in stream.segments)


def _unrepeated(paths: Iterator[str]) -> Iterator[str]:
    last = None
    for path in paths:
        if path != last:
            yield path
            last = path


def _segment_paths(stream: Stream) -> Iterator[str]:
    """The root-relative path of every file segment of ``stream``, in order."""
    prefix = "" if stream.name == "." else stream.name[2:] + "/"
    for segment in stream.segments:
        if not segment.is_directory_marker:
            yield prefix + segment.name


def normalize(manifest: Manifest) -> Manifest:
    """The normalized form of ``manifest`` (same as ``manifest.normalized()``)."""
    return manifest.normalized()
