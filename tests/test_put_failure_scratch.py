"""A put stopped by an error closes its scratch files (and the files it read
ahead) before the error leaves it: none waits for the cycle collector,
which may run late or never (it is off here)."""

from __future__ import annotations

import gc
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memory_helpers import open_under
from warehouse.collection.scan import DirNode, LazyTree, scan_paths
from warehouse.collection.scratch import HELD_ENTRIES_VAR
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError, UsageError, WarehouseError
from warehouse.putcache import PutCache


@pytest.fixture
def no_collector() -> Iterator[None]:
    was = gc.isenabled()
    gc.collect()  # what earlier tests left for it, not counted here
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _tree(src: Path, size: int) -> Path:
    """Three directories of 300 files of ``size`` bytes or less each:
    spilled past 50 entries held."""
    for d in ("a", "b", "c"):
        (src / d).mkdir(parents=True)
        for i in range(300):
            (src / d / f"f{i:04d}").write_bytes((b"%d\n" % i).rjust(size, b"."))
    return src


def _removed_after_the_scan(src: Path) -> DirNode:
    """Scanned whole, then the last file of the last directory removed: the
    put fails reading it, its earlier directories packed and in flight."""
    tree = scan_paths([src])
    (src / "c" / "f0299").unlink()
    return tree


def _fifo_in_a_later_directory(src: Path) -> DirNode:
    """A FIFO in the last directory: the walk fails on it as the files of
    the one before are read."""
    os.mkfifo(src / "c" / "fifo")
    return LazyTree([src])


def _fifo_as_the_read_ahead_starts(src: Path) -> DirNode:
    """A directory of ten files walked first, then one with a FIFO: the
    put fails as its read-ahead starts, the ten files open, before any
    directory is packed."""
    (src / "0").mkdir()
    for i in range(10):
        (src / "0" / f"g{i}").write_bytes(b"%d\n" % i)
    (src / "1").mkdir()
    os.mkfifo(src / "1" / "fifo")
    return LazyTree([src])


def _fifo_in_a_spilled_directory(src: Path) -> DirNode:
    """A FIFO among the files of a spilled directory: its scan fails."""
    os.mkfifo(src / "b" / "zz fifo")
    return LazyTree([src])


@pytest.mark.parametrize(
    ("make", "error", "cached"),
    [
        (_removed_after_the_scan, NotFoundError, False),
        (_fifo_in_a_later_directory, UsageError, False),
        (_fifo_in_a_spilled_directory, UsageError, False),
        (_fifo_as_the_read_ahead_starts, UsageError, False),
        # Files the resume cache looks at (32 KiB and more): its session's too.
        (_removed_after_the_scan, NotFoundError, True),
        (_fifo_in_a_later_directory, UsageError, True),
        (_fifo_as_the_read_ahead_starts, UsageError, True),
    ],
)
def test_a_failed_put_closes_its_scratch_files_before_it_raises(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_collector: None,
    make: Callable[[Path], DirNode],
    error: type[WarehouseError],
    cached: bool,
) -> None:
    scratch = tmp_path / "scratch"  # the system's temporary directory, here
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv(HELD_ENTRIES_VAR, "50")
    src = _tree(tmp_path / "src", 40_000 if cached else 4)
    with (
        EmbeddedWarehouse(tmp_path / "home") as wh,
        PutCache("t", tmp_path / "cache") as cache,
    ):
        roots = (scratch, tmp_path / "home" / "tmp", src)
        tree = make(src)
        before = open_under(*roots)  # a tree scanned whole holds its own
        with pytest.raises(error) as raised:
            wh.put(tree, cache=cache if cached else None)
        # The error, its traceback and every frame of it still held.
        assert raised.value.__traceback__ is not None
        assert open_under(*roots) - before == set()
        del raised, tree
        assert open_under(*roots) == set()
