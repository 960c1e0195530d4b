"""What the collection writer asks of a resume cache (``warehouse.putcache``)."""

from __future__ import annotations

from collections.abc import (
    Collection,
    Iterable,
    Mapping,
)
from typing import Protocol

from warehouse.collection.scan import DirNode
from warehouse.collection.scratch import SpilledHits
from warehouse.manifest.entries import FileEntry


class CachedFile(Protocol):
    """A file the resume cache answers for: where its bytes are, and its MD5."""

    @property
    def entry(self) -> FileEntry: ...

    @property
    def md5(self) -> str: ...


class FileCache(Protocol):
    """What the writer asks of the resume cache, a directory at a time."""

    def hits(self, node: DirNode) -> Mapping[str, CachedFile] | SpilledHits | None:
        """The files of ``node`` (by name) the cache answers for; None: it
        does not look at this directory (nothing to learn from it either).
        Of a directory of more files than are held, in a scratch file in
        name order (``SpilledHits``), unless there are none."""

    def learn(
        self,
        node: DirNode,
        written: Mapping[str, FileEntry],
        md5s: Mapping[str, str],
        changed: Collection[str],
    ) -> None:
        """What the put read of a directory ``hits`` looked at (by path)."""

    def learn_read(
        self,
        node: DirNode,
        entries: Iterable[FileEntry | None],
        md5s: Iterable[str | None],
        changed: Collection[str],
    ) -> None:
        """``learn`` of a directory given a file at a time: its entries and
        MD5s in the order of its files, None for a file ``hits`` answered
        for (not read)."""

    def close(self) -> None:
        """The put failed: close the scratch files; what it learned is not saved."""
