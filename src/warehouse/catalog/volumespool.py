"""The spool of volume usage (docs/usage.md, "The spool"): a process that
asked its volume anything leaves its counts as one small file under the
home, never touching the catalog; a process that writes the catalog anyway,
or reads usage, folds the files into ``volume_usage``
(``volumeusage.fold_spool``). No database library here: a read or a step
closes without loading one.

A record is a file ``<id>.rec`` holding one JSON line, written under a
temporary name and renamed into place, so a reader sees it whole or not at
all. Its id is the row's ``record`` (unique), so it is folded once.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from warehouse.blocks.volumecounts import Taken

__all__ = ["SpoolRecord", "read_spool", "spool_dir", "spool_taken", "unlink_records"]

_SUFFIX = ".rec"
# A temporary file this old was left by a process killed while writing it.
_STALE_SECONDS = 24 * 3600
# A record's line is some 250 bytes, up to 6.5 KB with a volume name of
# 1,024 characters each written as \uXXXX; a longer file is not one.
_RECORD_BYTES = 16384
# What a row holds: 64-bit integers, a volume name of up to 1024 characters.
_INT_END = 2**63
_VOLUME_CHARS = 1024


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    record: str  # 32 hex digits
    volume: str
    at: float
    taken: Taken
    path: Path


def spool_dir(home: Path) -> Path:
    """Where a home's records are: inside the home (private, 0700)."""
    return home / "usage-spool"


def spool_taken(home: Path, volume: str, taken: Taken, at: float | None = None) -> str:
    """Leave ``taken`` for ``volume`` as one record; its id."""
    where = spool_dir(home)
    with contextlib.suppress(FileExistsError):
        where.mkdir(mode=0o700)
    record = os.urandom(16).hex()  # 32 hex digits, as a uuid4's, without its import
    line = json.dumps(
        {
            "record": record,
            "volume": volume,
            "at": time.time() if at is None else at,
            "gets": taken.gets,
            "puts": taken.puts,
            "lists": taken.lists,
            "deletes": taken.deletes,
            "added_bytes": taken.added_bytes,
        }
    )
    tmp = where / f".{record}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
    # Not fsynced, as the catalog's usage rows were not: a record may be
    # lost with the last moments before a power cut, never seen half written.
    os.replace(tmp, where / f"{record}{_SUFFIX}")
    return record


def _parse(path: Path) -> SpoolRecord | None:
    try:
        with path.open("rb") as f:
            text = f.read(_RECORD_BYTES + 1)
        if len(text) > _RECORD_BYTES:
            return None  # no record of ours is this long
        d = json.loads(text)
        counts = [int(d[k]) for k in ("gets", "puts", "lists", "deletes")]
        added = int(d["added_bytes"])
        record, volume, at = str(d["record"]), str(d["volume"]), float(d["at"])
        # Values a row cannot hold would fail the whole fold, every time:
        # such a record is not one of ours.
        if not all(0 <= n < _INT_END for n in counts) or not -_INT_END < added < _INT_END:
            return None
        if not math.isfinite(at) or len(volume) > _VOLUME_CHARS:
            return None
        if len(record) != 32 or f"{record}{_SUFFIX}" != path.name:
            return None
        gets, puts, lists, deletes = counts
        return SpoolRecord(record, volume, at, Taken(gets, puts, lists, deletes, added), path)
    except FileNotFoundError:
        return None  # folded and removed by another fold meanwhile
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not one of ours (a directory, unreadable, not JSON): left alone


def read_spool(home: Path) -> list[SpoolRecord]:
    """The records waiting, oldest first; stale temporary files are removed."""
    where = spool_dir(home)
    try:
        names = os.listdir(where)
    except FileNotFoundError:
        return []
    found: list[SpoolRecord] = []
    now = time.time()
    for name in names:
        path = where / name
        if name.endswith(_SUFFIX):
            rec = _parse(path)
            if rec is not None:
                found.append(rec)
        elif name.endswith(".tmp"):
            with contextlib.suppress(FileNotFoundError):
                if now - path.stat().st_mtime > _STALE_SECONDS:
                    path.unlink()
    found.sort(key=lambda r: (r.at, r.record))
    return found


def unlink_records(records: list[SpoolRecord]) -> None:
    """Remove records folded (by this fold or another)."""
    for r in records:
        with contextlib.suppress(FileNotFoundError):
            r.path.unlink()
