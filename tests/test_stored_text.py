"""A get reads its stored manifest into a scratch file a piece at a time
(docs/storage.md, "Collections"): every block is verified before any of it
is used, the text is checked against the PDH, and it parses exactly as the
same text held whole does, faults included."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import Runner, make_tree
from installations import Installation
from warehouse import catalog
from warehouse.blocks.volume import LocalVolume
from warehouse.collection import storedtext
from warehouse.collection.records import load_stored_text
from warehouse.collection.storedtext import StoredText
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import CorruptDataError
from warehouse.interface import Warehouse
from warehouse.manifest.parse import ManifestError, iter_raw_streams


def _stored(data: bytes, tmp_path: Path) -> StoredText:
    text = StoredText(tmp_path)
    # Written in uneven pieces, as blocks come.
    for i in range(0, len(data), 5):
        text.write(data[i : i + 5])
    return text.done()


def _lines(data: bytes) -> list[str]:
    return [line.decode() for line in data.split(b"\n")[:-1]]


@pytest.mark.parametrize("piece", [1, 3, 7, 64, 1 << 20])
def test_lines_are_the_texts_whatever_the_pieces(
    tmp_path: Path, piece: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines cut across pieces, longer than many pieces, multi-byte
    characters split between two, an empty line: all come back whole."""
    monkeypatch.setattr(storedtext, "_PIECE", piece)
    data = "a\nÜbergrößé 日本\n\n" + "x" * 100 + "\nz\n"
    raw = data.encode()
    with _stored(raw, tmp_path) as text:
        assert text.size == len(raw) and text.ends_with_newline()
        assert text.pdh == f"{hashlib.md5(raw).hexdigest()}+{len(raw)}"
        assert list(text.lines()) == _lines(raw)
        assert text.read() == raw
        # Two readers at once, one stopped halfway, do not disturb each other.
        first = text.lines()
        assert next(first) == "a"
        assert list(text.lines()) == _lines(raw)
        assert list(first) == _lines(raw)[1:]


def _fault(text: bytes | StoredText) -> str:
    with pytest.raises(ManifestError) as caught:
        for _ in iter_raw_streams(text):
            pass
    return str(caught.value)


def test_faults_are_reported_as_for_the_text_held_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storedtext, "_PIECE", 16)
    block = "9dd4e461268c8034f5c8564e155c67a6+1"
    good = f". {block} 0:1:a\n./d {block} 0:1:b\n".encode()
    for bad in (
        good + f"./e {block} 0:1:\xff\n".encode("latin-1"),  # not UTF-8, line 3
        good[:-1],  # no newline at the end
        good + f"./a {block} 0:1:c\n".encode(),  # "a" a file and a directory
        good + b"./f garbage\n",
    ):
        with _stored(bad, tmp_path) as text:
            assert _fault(text) == _fault(bad)


def _block_path(home: Path, md5: str) -> Path:
    return home / "blocks" / md5[:3] / md5


def test_a_damaged_manifest_block_is_refused_and_nothing_written(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    """Refused with the errors a get gave when it read the text whole: the
    damaged copy is moved aside, and after that its block is missing."""
    pdh = run("put", str(make_tree(tmp_path / "src"))).stdout.strip()
    md5 = pdh.split("+")[0]  # one block: the portable text, whose MD5 is the PDH's
    path = _block_path(home, md5)
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    out = tmp_path / "out"
    failed = run("get", pdh, str(out), code=5)
    assert failed.stdout == ""
    assert failed.stderr.splitlines() == [
        f"Error: block {md5} on {home / 'blocks'} is corrupt (its MD5 differs) and was moved aside"
    ]
    assert not out.exists()
    again = run("get", "--no-write", pdh, code=5)
    assert again.stdout == ""
    assert again.stderr.startswith(f"Error: a block of the manifest of {pdh} is missing: ")
    assert not list(home.joinpath("tmp").iterdir())  # no scratch file left behind


def test_a_manifest_of_several_blocks_is_verified_block_by_block(tmp_path: Path) -> None:
    """Recorded as many small blocks: read whole, the same as one; a block
    damaged in the middle is refused; a text that is not the PDH's is not
    taken for the stored text (None: the caller parses it the long way)."""
    with EmbeddedWarehouse(tmp_path / "home", user="alice") as wh:
        pdh = wh.put([make_tree(tmp_path / "src")]).pdh
        text = wh.manifest_text(pdh)
        assert text is not None and len(text) > 300
        pieces = [text[i : i + 100] for i in range(0, len(text), 100)]
        locators = [wh.store.put(p).locator for p in pieces]
        wh.store.flush()
        many = f"{hashlib.md5(text).hexdigest()}+{len(text)}"
        assert many == pdh
        # The same collection recorded again with its text in many blocks.
        with wh.engine.begin() as conn:
            from warehouse.catalog.schema import collections

            conn.execute(
                collections.update()
                .where(collections.c.pdh == pdh)
                .values(manifest_blocks=" ".join(str(loc) for loc in locators))
            )
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        stored = load_stored_text(wh.store, wh.engine, pdh, scratch)
        assert stored is not None
        with stored:
            assert stored.read() == text
        got = {f.path: f.md5 for f in wh.get(pdh, None)}
        assert len(got) == len(wh.manifest(pdh).files_view())

    middle = locators[len(locators) // 2]
    path = _block_path(tmp_path / "home", middle.md5)
    path.write_bytes(b"?" + path.read_bytes()[1:])
    # A warehouse opened anew: its RAM cache does not hold the block.
    with EmbeddedWarehouse(tmp_path / "home", user="alice") as wh:
        with pytest.raises(CorruptDataError, match=f"block {middle.md5} .* is corrupt"):
            load_stored_text(wh.store, wh.engine, pdh, scratch)
        assert os.listdir(scratch) == []
        wh.store.put(pieces[len(pieces) // 2])  # repaired
        wh.store.flush()

        # The blocks of another text under this PDH: not the stored text.
        other = wh.store.put(text.replace(b"hello.txt", b"hallo.txt")).locator
        wh.store.flush()
        with wh.engine.begin() as conn:
            conn.execute(
                collections.update()
                .where(collections.c.pdh == pdh)
                .values(manifest_blocks=str(other))
            )
        assert load_stored_text(wh.store, wh.engine, pdh, scratch) is None
        assert catalog.get_collection(wh.engine, pdh).manifest_blocks == str(other)


def test_a_block_longer_than_any_is_refused(tmp_path: Path) -> None:
    volume = LocalVolume(tmp_path / "vol")
    md5 = "0" * 32
    path = volume.path_for(md5)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate((64 << 20) + 1)
    copied: list[int] = []
    with pytest.raises(CorruptDataError, match="longer than any block"):
        volume.copy_to(md5, lambda data: copied.append(len(data)))


def _table_listing(wh: Warehouse, key: str, long: bool, as_json: bool) -> str:
    """What `wh ls` printed from the whole file table (the reference)."""
    from warehouse.cli.browse import _shown
    from warehouse.collection.extract import select
    from warehouse.keys import parse_key

    k = parse_key(key)
    chosen, dirs = select(wh.reader(k), k.path)
    if as_json:
        items = [{"path": p, "size": e.size} for p, e in chosen]
        items += [{"path": d + "/", "size": 0} for d in dirs]
        return json.dumps(items, indent=2, sort_keys=True) + "\n"
    lines = [f"{e.size:>14}  {_shown(p)}" if long else _shown(p) for p, e in chosen]
    lines += [f"{'-':>14}  {_shown(d)}/" if long else f"{_shown(d)}/" for d in dirs]
    return "".join(line + "\n" for line in lines)


def test_ls_of_a_sub_path_and_json_stream_what_the_table_gave(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    src = make_tree(tmp_path / "src")
    (src / "sub" / "deeper" / "\\lead").write_bytes(b"")
    (src / "sub" / "empty inside").mkdir()
    pdh = run("put", str(src)).stdout.strip()
    keys = [pdh, *(f"{pdh}/{sub}" for sub in ("sub", "sub/deeper", "sub/", "empty dir"))]
    keys += [f"{pdh}/sub/colon:name", f"{pdh}/hello.txt", f"{pdh}/empty dir/inner empty"]
    with EmbeddedWarehouse(home, user="alice") as wh:
        for key in keys:
            for flags in ((), ("-l",), ("--json",)):
                want = _table_listing(wh, key, "-l" in flags, "--json" in flags)
                assert run("ls", *flags, key).stdout == want, (key, flags)
    for flags in ((), ("--json",)):
        missing = run("ls", *flags, f"{pdh}/sub/nothing", code=4)
        assert missing.stdout == ""
        assert missing.stderr == (
            f"Error: no file or directory 'sub/nothing' in collection {pdh}\n"
        )
    assert not list(home.joinpath("tmp").iterdir())


def test_a_get_through_a_controller_reads_text_and_listing_in_pieces(
    installation: Installation, run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both answers go to scratch files and are read back in small pieces:
    lines and listing entries cut across them (non-ASCII names too) still
    give every file its recorded digest, in manifest order."""
    from warehouse.remote import warehouse as remote

    monkeypatch.setattr(storedtext, "_PIECE", 61)
    monkeypatch.setattr(remote, "_LISTING_PART", 97)
    read = remote.RemoteWarehouse._collection_text
    texts: list[object] = []

    def seen(self: remote.RemoteWarehouse, pdh: str) -> object:
        got = read(self, pdh)
        texts.append(got)
        return got

    monkeypatch.setattr(remote.RemoteWarehouse, "_collection_text", seen)
    src = tmp_path / "src"
    for d in range(3):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(40):
            (src / f"d{d}" / f"Übergrößé {i:03d}").write_bytes(b"%d %d\n" % (d, i))
    pdh = run("put", str(src)).stdout.strip()
    want = [
        f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.relative_to(src)}"
        for p in sorted(src.rglob("*"))
        if p.is_file()
    ]
    assert run("get", "--no-write", pdh).stdout.splitlines() == want
    assert run("get", "--no-write", "--rehash", pdh).stdout.splitlines() == want
    out = tmp_path / "out"
    assert run("get", pdh, str(out)).stdout.splitlines() == want
    assert (out / "d2" / "Übergrößé 039").read_bytes() == b"2 39\n"
    assert run("ls", f"{pdh}/d1").stdout.splitlines() == [f"Übergrößé {i:03d}" for i in range(40)]
    if installation.kind == "remote":  # the text and listing were read as sent
        assert len(texts) == 3 and all(isinstance(t, tuple) and t[1] is not None for t in texts)


def test_ls_and_manifest_through_a_controller_stream_what_the_table_gave(
    installation: Installation, run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wh ls` (whole, sub-paths, -l, --json) lists from the text it is
    sent, in a scratch file, a stream at a time, as an embedded one does:
    the same lines as from the parsed file table; `wh manifest` prints
    the text as before."""
    import warehouse
    from warehouse.remote import warehouse as remote

    monkeypatch.setattr(storedtext, "_PIECE", 61)  # lines cut across pieces
    texts: list[object] = []
    read = remote.RemoteWarehouse.stored_text

    def seen(self: remote.RemoteWarehouse, key: str) -> object:
        got = read(self, key)
        texts.append(got)
        return got

    monkeypatch.setattr(remote.RemoteWarehouse, "stored_text", seen)
    src = make_tree(tmp_path / "src")
    (src / "sub" / "deeper" / "\\lead").write_bytes(b"")
    (src / "sub" / "empty inside").mkdir()
    (src / "sub" / "Übergrößé ☃").write_bytes(b"x" * 70)
    pdh = run("put", str(src)).stdout.strip()
    keys = [pdh, *(f"{pdh}/{sub}" for sub in ("sub", "sub/deeper", "sub/", "empty dir"))]
    keys += [f"{pdh}/sub/colon:name", f"{pdh}/hello.txt", f"{pdh}/empty dir/inner empty"]
    with warehouse.open() as wh:
        for key in keys:
            for flags in ((), ("-l",), ("--json",)):
                want = _table_listing(wh, key, "-l" in flags, "--json" in flags)
                assert run("ls", *flags, key).stdout == want, (key, flags)
        assert run("manifest", pdh).stdout == wh.manifest(pdh).format()
    missing = run("ls", f"{pdh}/sub/nothing", code=4)
    assert missing.stderr == f"Error: no file or directory 'sub/nothing' in collection {pdh}\n"
    if installation.kind == "remote":  # each listing was made from the text as sent
        assert len(texts) == 3 * len(keys) + 2
        assert all(isinstance(t, StoredText) for t in texts)


def test_a_full_scratch_directory_falls_back_to_the_systems(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    """The warehouse's scratch directory full: a get, ls and manifest copy
    the text to the system's, as when that directory cannot be written (the
    text held whole, as before, needed no scratch file at all)."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3000):  # a manifest of some 100 KB, more than the disk below
        (src / f"file-with-a-long-name-{i:05d}").write_text(str(i))
    pdh = run("put", str(src)).stdout.strip()
    want = run("get", "--no-write", pdh).stdout
    listed = run("ls", f"{pdh}/").stdout
    text = run("manifest", pdh).stdout
    scratch = home / "tmp"
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(scratch)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a small file system here")
    try:
        assert run("get", "--no-write", pdh).stdout == want
        assert run("ls", f"{pdh}/").stdout == listed
        assert run("manifest", pdh).stdout == text
        out = tmp_path / "out"
        assert run("get", pdh, str(out)).stdout == want
        assert len(os.listdir(out)) == 3000
        assert os.listdir(scratch) == []
    finally:
        subprocess.run(["umount", "-l", str(scratch)], check=True)
