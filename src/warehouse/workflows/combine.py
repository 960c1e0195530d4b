"""Combined collections: several collections under one root, from manifest text only.

Part ``(dir, manifest)`` puts each of the part's files (and empty
directories) under ``./dir``; no block is read or copied. The result is
normalized, so the same parts in the same directories give the same PDH.
"""

from __future__ import annotations

from collections.abc import Sequence

from warehouse.errors import UsageError
from warehouse.manifest import Manifest
from warehouse.manifest.entries import FileEntry

__all__ = ["combine"]


def combine(parts: Sequence[tuple[str, Manifest]]) -> Manifest:
    files: list[FileEntry] = []
    empty: list[str] = []
    seen: dict[str, str] = {}
    for d, manifest in parts:
        d = d.strip("/")
        part_files = manifest.files()
        if not part_files and not manifest.empty_directories():
            empty.append(d)  # an empty part still shows as its directory
        for path, entry in part_files.items():
            target = f"{d}/{path}"
            if target in seen:
                raise UsageError(f"combined input: {target!r} comes from two parts")
            seen[target] = d
            files.append(FileEntry(target, entry.size, entry.pieces))
        empty.extend(f"{d}/{e}" for e in manifest.empty_directories())
    for d, _ in parts:
        for path in seen:
            if path == d.strip("/"):
                raise UsageError(f"combined input: {d!r} is both a file and a directory")
    return Manifest.from_files(files, empty)
