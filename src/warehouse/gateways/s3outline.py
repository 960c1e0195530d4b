"""A large collection's keys for the S3 gateway, from its outline
(docs/s3-gateway.md, "Large collections").

The collection's text is copied to an unnamed scratch file and gone
through once for its outline (``manifest/outline.py``: its directories and
where each one's stream lies, nothing per file). A listing page then walks
the directories in key order and parses only the streams of the directories
it passes through; a GetObject parses its key's directory. Directories'
files parsed are kept among the last used within ``FILES_HELD`` files, so a
collection of a million files costs its directories and the directories in
use, not its files.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Iterator

from warehouse.collection.storedtext import StoredText
from warehouse.manifest import FileEntry
from warehouse.manifest.outline import DIRECTORY_BYTES
from warehouse.mount._tree import Collection, Files

__all__ = ["FILES_HELD", "OutlinedContents"]

# Files of parsed directories kept (about 400 bytes each); one directory of
# more files than this is parsed whole while it is used.
FILES_HELD = 20_000
_FILE_BYTES = 400


class OutlinedContents:
    """A collection's files in key order, read from its outline. Its ETags
    use no listing (one would be held whole): ``md5s`` is empty."""

    def __init__(self, pdh: str, text: bytes | StoredText) -> None:
        self.collection = Collection(pdh, text)
        self.outline = self.collection.outline
        self.md5s: dict[str, str] = {}
        self.cost = self.outline.directories * DIRECTORY_BYTES + FILES_HELD * _FILE_BYTES
        self._lock = threading.Lock()
        self._files: OrderedDict[str, Files] = OrderedDict()
        self._held = 0
        # A directory's subdirectories as their keys sort ("name/"), by directory.
        self._subkeys: dict[str, tuple[list[str], list[str]]] = {}

    def close(self) -> None:
        self.collection.close()

    def files(self, directory: str) -> Files:
        """The files of ``directory`` (its own stream), parsed or kept."""
        with self._lock:
            found = self._files.get(directory)
            if found is not None:
                self._files.move_to_end(directory)
                return found
        made = self.collection.files(directory)
        with self._lock:
            if directory not in self._files:
                self._files[directory] = made
                self._held += len(made.names)
                while self._held > FILES_HELD and len(self._files) > 1:
                    _, dropped = self._files.popitem(last=False)
                    self._held -= len(dropped.names)
        return made

    def entry(self, key: str) -> FileEntry | None:
        directory, _, name = key.rpartition("/")
        # The outline takes "/a/" as "a": a key with an empty part is no file.
        if not name or key.startswith("/") or directory != directory.strip("/"):
            return None
        if not self.outline.is_dir(directory):
            return None
        return self.files(directory).entries.get(name)

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
        files = self.files(directory) if self.outline.stream_span(directory) else None
        names = files.names if files is not None else []
        subkeys, subdirs = self._subdirectories(directory)
        i = bisect.bisect_left(names, rel)
        j = bisect.bisect_left(subkeys, rel)
        if j > 0 and rel.startswith(subkeys[j - 1]):
            j -= 1  # ``least`` falls inside that subdirectory
        # A file's name holds no "/", so it sorts against a subdirectory's
        # keys as against "name/": the two sorted lists merge.
        while i < len(names) or j < len(subkeys):
            if j >= len(subkeys) or (i < len(names) and names[i] < subkeys[j]):
                yield base + names[i]
                i += 1
                continue
            sub = subdirs[j]
            j += 1
            if not self.outline.count(sub):
                continue  # empty directories only: no key
            if roll_from is not None and len(sub) >= roll_from and least <= sub + "/":
                yield sub + "/"
            else:
                yield from self._walk(sub, least, roll_from)
