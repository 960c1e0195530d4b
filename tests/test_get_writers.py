"""`wh get` writes small files from several threads and lists them in order.

Small files go to a pool of writers in batches; bigger ones are written by
the reading thread in turn. Whatever wrote a file, the listing comes in
manifest order, every byte is the stored one and no temporary name is left.
A get of a whole collection goes through its stored text stream by stream,
without the table of every file; it must write exactly what a get through
the parsed manifest writes.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from conftest import make_tree
from warehouse import WarehouseError
from warehouse.collection.extract import ExtractedFile, extract
from warehouse.embedded import EmbeddedWarehouse

pytestmark = pytest.mark.usefixtures("small_file_writes")


def _tree(root: Path) -> dict[str, bytes]:
    """Three directories of small files (some empty), two files of more than
    a MiB between them, and a directory of one big file only."""
    rng = random.Random(7)
    files: dict[str, bytes] = {}
    for d in ("a", "b/c", "d"):
        for i in range(400):
            size = 0 if i % 9 == 0 else rng.randint(1, 6000)
            files[f"{d}/f{i:04d}"] = rng.randbytes(size)
    files["b/c/f0200-big"] = rng.randbytes(3 << 19)
    files["d/f0100-big"] = rng.randbytes(3 << 20)
    files["e/only-big"] = rng.randbytes((1 << 20) + 1)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def _written(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("writers", [0, 1, 4])
def test_files_are_written_whole_and_listed_in_manifest_order(
    wh: EmbeddedWarehouse, tmp_path: Path, writers: int
) -> None:
    files = _tree(tmp_path / "src")
    pdh = wh.put([tmp_path / "src"]).pdh
    order = list(wh.manifest(pdh).files())
    listed: list[ExtractedFile] = []
    out = tmp_path / "out"
    extract(wh.reader(pdh, one_pass=True), out, on_file=listed.append, writers=writers)
    assert [f.path for f in listed] == order
    for f in listed:
        assert f.md5 == hashlib.md5(files[f.path]).hexdigest(), f.path
        assert f.size == len(files[f.path])
    assert _written(out) == files  # no temporary name left, nothing else either


def test_a_writer_that_fails_stops_the_get_and_leaves_no_partial_file(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    files = _tree(tmp_path / "src")
    pdh = wh.put([tmp_path / "src"]).pdh
    out = tmp_path / "out"
    listed: list[ExtractedFile] = []
    seen = 0

    def block_d(n: int) -> None:
        # After the checks, while the files of a/ are read: a file where
        # directory d/ goes, so a writer fails on the first file of d/.
        nonlocal seen
        seen += n
        if seen > 100_000 and not (out / "d").exists():
            (out / "d").write_bytes(b"in the way")

    with pytest.raises(WarehouseError, match="not a directory"):
        extract(wh.reader(pdh, one_pass=True), out, progress=block_d, on_file=listed.append)
    written = _written(out)
    assert written.pop("d") == b"in the way"
    # Every file listed is written whole, every file written is listed, and
    # every file before d/ was written (they were handed out before it).
    assert {f.path for f in listed} == set(written)
    assert all(written[rel] == files[rel] for rel in written)
    assert {rel for rel in files if rel < "d/"} <= set(written)
    assert not any(".wh-" in rel for rel in written)


def test_a_get_from_the_stored_text_writes_what_the_parsed_manifest_does(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    src = make_tree(tmp_path / "src")
    (src / "z" / "empty at the end").mkdir(parents=True)
    pdh = wh.put([src]).pdh
    streamed = wh.reader(pdh, one_pass=True)
    assert streamed.normal_text is not None
    by_text = extract(streamed, tmp_path / "one")
    assert "manifest" not in streamed.__dict__  # no table of every file was built
    by_table = extract(wh.reader(pdh), tmp_path / "two")
    assert by_text == by_table
    for root in (tmp_path / "one", tmp_path / "two"):
        found = {str(p.relative_to(root)) for p in root.rglob("*")}
        assert found == {str(p.relative_to(src)) for p in src.rglob("*")}
    assert _written(tmp_path / "one") == _written(src)
    # Again over it: refused without force, then replaced with it.
    with pytest.raises(WarehouseError, match="already exist"):
        extract(wh.reader(pdh, one_pass=True), tmp_path / "one")
    (tmp_path / "one" / "hello.txt").write_bytes(b"changed\n")
    assert extract(wh.reader(pdh, one_pass=True), tmp_path / "one", force=True) == by_table
    assert _written(tmp_path / "one") == _written(src)  # and no temporary name left


def test_a_name_taken_while_the_get_runs_stops_it_there(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    """A file that appears under a name after the checks is never replaced:
    the files before it are written and listed, it and those after are not,
    and the error names it."""
    src = tmp_path / "src" / "z"
    src.mkdir(parents=True)
    for i in range(10):
        (src / f"f{i}").write_bytes(b"%d\n" % i)
    pdh = wh.put([tmp_path / "src"]).pdh
    out = tmp_path / "out"
    listed: list[ExtractedFile] = []

    def take_f5(_: int) -> None:
        # After the checks, before any file is handed to a writer.
        if not (out / "z" / "f5").exists():
            (out / "z").mkdir(parents=True, exist_ok=True)
            (out / "z" / "f5").write_bytes(b"someone else's")

    with pytest.raises(WarehouseError, match=r"z/f5 appeared while the get ran"):
        extract(wh.reader(pdh, one_pass=True), out, progress=take_f5, on_file=listed.append)
    assert [f.path for f in listed] == [f"z/f{i}" for i in range(5)]
    assert _written(out) == {
        **{f"z/f{i}": b"%d\n" % i for i in range(5)},
        "z/f5": b"someone else's",
    }
