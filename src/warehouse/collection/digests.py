"""The MD5 of every file a put read, by its path in the collection.

A put without a spool holds one for every file until the collection is
recorded: 16 bytes a file in one array, found through each directory's
list of names (which the scanned tree holds anyway), where a dict of hex
strings by path took about 170 bytes a file. With a spool, a directory's
table lives until its stream is written; a directory of more files than a
put holds keeps it in a scratch file instead (``directory_digests``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from itertools import pairwise

from warehouse.collection.scratch import SpilledDigests

__all__ = ["Digests", "FileDigests", "digest_table", "directory_digests"]

_SIZE = 16  # an MD5


# One directory's files' MD5s as the writer fills them: held (16 bytes a
# file), or, for a directory of more files than are held, in a scratch file.
Digests = bytearray | SpilledDigests


def digest_table(count: int) -> bytearray:
    """Room for ``count`` files' MD5s (16 bytes each), as the writer fills them."""
    return bytearray(_SIZE * count)


def directory_digests(count: int, spilled: bool) -> Digests:
    """Room for the MD5s of a directory of ``count`` files; in a scratch file
    if its files are (``spilled``), so that it does not grow with them."""
    return SpilledDigests(count) if spilled else digest_table(count)


class FileDigests(Mapping[str, str]):
    """Path -> MD5 (hex) of the files of a tree, filled in by the writer.

    Each directory's files are numbered from the index ``add_directory``
    returns, in the order of its names (sorted, as the scan keeps them).
    A file whose digest was never set is not listed.
    """

    def __init__(self, count: int = 0) -> None:
        self._md5s = bytearray(_SIZE * count)
        self._set = bytearray(count)  # 1 once a file's digest is in
        self._dirs: dict[str, tuple[Sequence[str], int]] = {}
        self._next = 0

    def add_directory(
        self, rel: str, names: Sequence[str], md5s: bytes | bytearray | None = None
    ) -> int:
        """Number ``names`` (the files of ``rel``, in sorted order); the first's index.

        ``md5s``: their digests already (16 bytes each, in that order); the
        table grows to take them.
        """
        if any(a >= b for a, b in pairwise(names)):
            raise ValueError(f"the names of {rel!r} are not sorted")
        start = self._next
        if md5s is not None:
            if len(md5s) != _SIZE * len(names):
                raise ValueError(f"not one digest for each file of {rel!r}")
            del self._md5s[_SIZE * start :], self._set[start:]
            self._md5s += md5s
            self._set += b"\x01" * len(names)
        elif start + len(names) > len(self._set):
            raise ValueError("more files than the digests were made for")
        self._dirs[rel] = (names, start)
        self._next += len(names)
        return start

    def set(self, index: int, digest: bytes) -> None:
        """File ``index``'s MD5 (raw, 16 bytes). Threads may set different files at once."""
        self._md5s[index * _SIZE : (index + 1) * _SIZE] = digest
        self._set[index] = 1

    def _index(self, path: str) -> int | None:
        rel, _, name = path.rpartition("/")
        found = self._dirs.get(rel)
        if found is None:
            return None
        names, start = found
        i = bisect_left(names, name)
        if i == len(names) or names[i] != name or not self._set[start + i]:
            return None
        return start + i

    def __getitem__(self, path: str) -> str:
        i = self._index(path) if isinstance(path, str) else None
        if i is None:
            raise KeyError(path)
        return self._md5s[i * _SIZE : (i + 1) * _SIZE].hex()

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and self._index(path) is not None

    def __iter__(self) -> Iterator[str]:
        for rel, (names, start) in self._dirs.items():
            for i, name in enumerate(names):
                if self._set[start + i]:
                    yield f"{rel}/{name}" if rel else name

    def __len__(self) -> int:
        return self._set.count(1)
