"""A large collection's keys for the S3 gateway, from its outline
(docs/s3-gateway.md, "Large collections").

The collection's text is copied to an unnamed scratch file and gone
through once for its outline (``manifest/outline.py``: its directories and
where each one's stream lies, nothing per file). A listing page then walks
the directories in key order and reads only the streams of the directories
it passes through; a GetObject reads its key's directory. A directory of
more than ``PAGED_FROM`` files is read in pages of its stream
(``manifest/pages.py``: a sparse index made in one pass), so a page of keys
after a continuation token costs a bisect of the index and a page or two
parsed; a smaller one is parsed whole. Directories' files kept are among
the last used within ``FILES_HELD`` entries, so a collection of a million
files costs its directories and the pages in use, not its files, even all
in one directory.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Iterator

from warehouse.collection.storedtext import StoredText
from warehouse.manifest import FileEntry
from warehouse.manifest.outline import DIRECTORY_BYTES
from warehouse.manifest.pages import PAGE, DirFiles, Files, PagedFiles
from warehouse.mount._tree import PAGED_FROM, Collection

__all__ = ["FILES_HELD", "OutlinedContents"]

# Files of parsed directories kept (about 400 bytes each); a directory in
# pages counts its index and the pages it may keep.
FILES_HELD = 20_000
_FILE_BYTES = 400
# Files a listing asks of a directory at once: a page of a large one, so
# that a listing reads no page past the key it stops at.
_BATCH = PAGE


class OutlinedContents:
    """A collection's files in key order, read from its outline. Its ETags
    use no listing (one would be held whole): ``md5s`` is empty."""

    def __init__(self, pdh: str, text: bytes | StoredText) -> None:
        self.collection = Collection(pdh, text)
        self.outline = self.collection.outline
        self.md5s: dict[str, str] = {}
        self.cost = self.outline.directories * DIRECTORY_BYTES + FILES_HELD * _FILE_BYTES
        self._lock = threading.Lock()
        self._files: OrderedDict[str, DirFiles] = OrderedDict()
        self._held = 0
        # A directory's subdirectories as their keys sort ("name/"), by directory.
        self._subkeys: dict[str, tuple[list[str], list[str]]] = {}

    def close(self) -> None:
        self.collection.close()

    def files(self, directory: str) -> DirFiles:
        """The files of ``directory`` (its own stream), parsed, in pages or kept."""
        with self._lock:
            found = self._files.get(directory)
            if found is not None:
                self._files.move_to_end(directory)
                return found
        made = self._made(directory)
        with self._lock:
            if directory not in self._files:
                self._files[directory] = made
                self._held += made.weight
                while self._held > FILES_HELD and len(self._files) > 1:
                    _, dropped = self._files.popitem(last=False)
                    self._held -= dropped.weight
        return made

    def _made(self, directory: str) -> DirFiles:
        span = self.outline.stream_span(directory)
        if span is None:
            return Files([], {})
        if self.collection.own_files(directory) > PAGED_FROM:
            paged = PagedFiles.of_stream(directory, self.collection.read, span)
            if paged is not None:  # None: not in name order, parsed whole
                return paged
        return self.collection.files(directory)

    def entry(self, key: str) -> FileEntry | None:
        directory, _, name = key.rpartition("/")
        # The outline takes "/a/" as "a": a key with an empty part is no file.
        if not name or key.startswith("/") or directory != directory.strip("/"):
            return None
        if not self.outline.is_dir(directory):
            return None
        found = self.files(directory).find(name)
        return None if found is None else found[1]

    def _subdirectories(self, directory: str) -> tuple[list[str], list[str]]:
        """(keys "name/" sorted, the subdirectories' paths in that order)."""
        found = self._subkeys.get(directory)
        if found is None:
            cut = len(directory) + 1 if directory else 0
            pairs = sorted((d[cut:] + "/", d) for d in self.outline.subdirectories(directory))
            found = ([k for k, _ in pairs], [d for _, d in pairs])
            self._subkeys[directory] = found
        return found

    def keys_from(self, least: str, roll_from: int | None = None) -> Iterator[str]:
        """The keys not less than ``least``, in key (code point) order. With
        ``roll_from`` (a listing with delimiter "/" after a prefix of that
        length), a directory whose every key is rolled up into one common
        prefix is given as "path/" alone, its streams not read."""
        return self._walk("", least, roll_from)

    def _walk(self, directory: str, least: str, roll_from: int | None) -> Iterator[str]:
        base = directory + "/" if directory else ""
        if least <= base:
            rel = ""
        elif least.startswith(base):
            rel = least[len(base) :]
        else:
            return  # every key here is less than ``least``
        names = self._names_from(directory, rel)
        name = next(names, None)
        subkeys, subdirs = self._subdirectories(directory)
        j = bisect.bisect_left(subkeys, rel)
        if j > 0 and rel.startswith(subkeys[j - 1]):
            j -= 1  # ``least`` falls inside that subdirectory
        # A file's name holds no "/", so it sorts against a subdirectory's
        # keys as against "name/": the two sorted runs merge.
        while name is not None or j < len(subkeys):
            if name is not None and (j >= len(subkeys) or name < subkeys[j]):
                yield base + name
                name = next(names, None)
                continue
            sub = subdirs[j]
            j += 1
            if not self.outline.count(sub):
                continue  # empty directories only: no key
            if roll_from is not None and len(sub) >= roll_from and least <= sub + "/":
                yield sub + "/"
            else:
                yield from self._walk(sub, least, roll_from)

    def _names_from(self, directory: str, least: str) -> Iterator[str]:
        """The names of ``directory``'s own files not less than ``least``,
        in order, a batch at a time (a page of a large one)."""
        if self.outline.stream_span(directory) is None:
            return
        files = self.files(directory)
        place = files.place_of(least)
        while batch := files.run(place, _BATCH):
            place += len(batch)
            for name, _ in batch:
                yield name
