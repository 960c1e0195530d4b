"""One collection as the mount holds it: its outline, and its text held or
in a scratch copy, read by byte range (``_tree.py`` asks)."""

from __future__ import annotations

import threading

from warehouse.collection.storedtext import StoredText
from warehouse.errors import WarehouseError
from warehouse.manifest import Manifest
from warehouse.manifest.outline import Outline
from warehouse.manifest.pages import Files

__all__ = ["Collection", "Dropped"]

# A text this short is held in memory rather than read back from its scratch copy.
_TEXT_HELD = 1 << 20


class Dropped(WarehouseError):
    """The collection's text was closed (dropped from the tree): ask the tree again."""


class Collection:
    """One collection's outline and its text (held, or a scratch copy)."""

    def __init__(self, pdh: str, text: bytes | StoredText) -> None:
        self.pdh = pdh
        if isinstance(text, StoredText):
            self.outline = Outline.of_pieces(text.pieces(1 << 20))
            if text.size <= _TEXT_HELD:
                held = b"".join(text.pieces(_TEXT_HELD))
                text.close()
                text = held
        else:
            self.outline = Outline(text)
        self.text: bytes | StoredText = text
        self._guard = threading.Lock()
        self._reading = 0
        self._closed = False
        # Directories numbered in text order: the same numbers each time the
        # outline is made again from the same text (they are in inodes).
        self.dirs = list(self.outline.sizes)
        self.dir_index = {d: i for i, d in enumerate(self.dirs)}

    def read(self, start: int, end: int) -> bytes:
        """The text's bytes from ``start`` to ``end``; Dropped once closed.
        A read under way holds off the close (a large directory's pages are
        read from the text while the collection may be dropped)."""
        text = self.text
        if not isinstance(text, StoredText):
            return text[start:end]
        with self._guard:
            if self._closed:
                raise Dropped(self.pdh)
            self._reading += 1
        try:
            return b"".join(text.pieces(1 << 20, start, end))
        finally:
            self._read_done()

    def _read_done(self) -> None:
        with self._guard:
            self._reading -= 1
            if self._closed and not self._reading and isinstance(self.text, StoredText):
                self.text.close()

    def stream(self, directory: str) -> bytes | None:
        """The text of directory ``directory``'s own stream (None: it has no file)."""
        span = self.outline.stream_span(directory)
        if span is None:
            return None
        return self.read(*span)

    def own_files(self, directory: str) -> int:
        """How many files ``directory`` holds itself (not in its subdirectories)."""
        outline = self.outline
        below = sum(outline.count(d) for d in outline.subdirectories(directory))
        return outline.count(directory) - below

    def files(self, directory: str) -> Files:
        """The files of directory ``directory`` (not its subdirectories)."""
        line = self.stream(directory)
        if line is None:
            return Files([], {})
        cut = len(directory) + 1 if directory else 0
        entries = {p[cut:]: e for p, e in Manifest.parse(line + b"\n").files_view().items()}
        # Normalized text lists a stream's files in name order already.
        return Files(sorted(entries), entries)

    def close(self) -> None:
        with self._guard:
            self._closed = True
            if self._reading or not isinstance(self.text, StoredText):
                return
        self.text.close()
