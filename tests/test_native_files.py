"""Whole small files written a batch at a time by the native library.

Each file has its name only once whole, the name must be free (or, when
replacing, whatever holds it is replaced itself, never followed), and the
first file that cannot be written stops the batch with nothing of it left.
Both ways of making a file are checked: unnamed and linked in, and (as
where the file system does not offer that) named and renamed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from warehouse.collection.destination import Destination
from warehouse.native import files

# Where a C compiler is, the install builds the library (hatch_build.py), so
# its tests run and fail if it was not built; they skip only where none is.
COMPILER = shutil.which(os.environ.get("CC", "cc").split()[0]) is not None
pytestmark = pytest.mark.skipif(
    not COMPILER and not files.available(),
    reason="no C compiler here, so the install built no native file library",
)


def test_the_library_is_built_where_a_compiler_is() -> None:
    assert files.available(), "the native file library was not built: reinstall (make install)"


@pytest.fixture(params=["unnamed", "named"])
def dest(request: pytest.FixtureRequest, tmp_path: Path) -> Destination:
    d = Destination(tmp_path / "out")
    if request.param == "named":
        d._named = True
    return d


def _listed(root: Path) -> dict[str, bytes | str]:
    """Each entry under ``root``: a file's bytes, or where a link points."""
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = os.readlink(path)
        elif path.is_file():
            out[rel] = path.read_bytes()
    return out


def test_files_are_written_whole_in_order(dest: Destination, tmp_path: Path) -> None:
    batch = [("a", b"one\n"), ("empty", b""), ("big", os.urandom(3 << 20)), ("b c", b"two")]
    assert dest.put_files(("sub",), batch, replace=False) == 4
    dest.close(failed=False)
    assert _listed(tmp_path / "out") == {f"sub/{n}": d for n, d in batch}
    # The mode a file made from Python gets: 0o666 less the umask.
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "out" / "sub" / "a").stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_taken_name_stops_the_batch_and_nothing_is_followed(
    dest: Destination, tmp_path: Path
) -> None:
    out = tmp_path / "out" / "d"
    out.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    (out / "c").symlink_to(elsewhere)  # a dangling link where c goes
    batch = [("a", b"1"), ("b", b"2"), ("c", b"3"), ("e", b"4")]
    assert dest.put_files(("d",), batch, replace=False) == 2
    assert _listed(out) == {"a": b"1", "b": b"2", "c": str(elsewhere)}
    assert not elsewhere.exists()

    # Replacing: the link itself is replaced by the file.
    assert dest.put_files(("d",), batch[2:], replace=True) == 2
    dest.close(failed=False)
    assert _listed(out) == {"a": b"1", "b": b"2", "c": b"3", "e": b"4"}
    assert not elsewhere.exists()


def test_a_directory_under_the_name_stops_the_batch(dest: Destination, tmp_path: Path) -> None:
    (tmp_path / "out" / "x").mkdir(parents=True)
    for replace in (False, True):
        assert dest.put_files((), [("w", b"w"), ("x", b"x")], replace=replace) == 1
    dest.close(failed=False)
    assert sorted(os.listdir(tmp_path / "out")) == ["w", "x"]
    assert (tmp_path / "out" / "x").is_dir()


def test_without_the_library_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "_lib", [None])
    dest = Destination(tmp_path / "out")
    assert dest.put_files((), [("a", b"1")], replace=False) == 0
    dest.close(failed=False)
    assert os.listdir(tmp_path / "out") == []
