"""GC, fsck and balance on the embedded warehouse: a real volume and SQLite catalog."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import Runner
from warehouse.blocks.locator import Locator
from warehouse.blocks.volume import LocalVolume
from warehouse.embedded import EmbeddedWarehouse
from warehouse.gc import GcAborted, save_settings
from warehouse.gc.local import local_fsck, local_gc
from warehouse.putcache import RACY_NS


def tree(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir(parents=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root


def age(wh: EmbeddedWarehouse, md5: str, seconds: float) -> None:
    path = wh.volume.path_for(md5)
    t = time.time() - seconds
    os.utime(path, (t, t))


def blocks_of(wh: EmbeddedWarehouse, pdh: str) -> set[str]:
    return {loc.md5 for loc in wh.manifest(pdh).blocks()}


def test_gc_trashes_old_garbage_keeps_named_and_young(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    named = wh.put([tree(tmp_path / "n", {"a": b"named" * 100})], name="keep").pdh
    unnamed = wh.put([tree(tmp_path / "u", {"b": b"unnamed" * 100})]).pdh
    (junk,) = blocks_of(wh, unnamed)
    young = wh.store.put(os.urandom(100)).locator.md5
    wh.store.flush()
    save_settings(wh.engine, {"signature_ttl": 60.0, "trash_lifetime": 30.0})
    for md5 in blocks_of(wh, named) | {junk}:
        age(wh, md5, 120)
    # The unnamed collection is recent, so still a root: nothing goes yet.
    first = local_gc(wh.engine, wh.volume)
    assert first.trashed == 0 and first.young == 1
    assert wh.volume.stat(young) is not None
    later = time.time() + 120  # now its record is older than the TTL too
    report = local_gc(wh.engine, wh.volume, now=later)
    assert report.trashed >= 1 and wh.volume.stat(junk) is None
    assert all(wh.volume.stat(m) is not None for m in blocks_of(wh, named))
    trash = list(wh.volume.root.glob(f"{junk[:3]}/{junk}.trash.*"))
    assert trash, "trashed, not yet removed"
    assert local_gc(wh.engine, wh.volume, now=later + 31).emptied >= 1
    assert not list(wh.volume.root.glob(f"{junk[:3]}/{junk}.trash.*"))
    assert wh.reader("keep").read_file("a") == b"named" * 100


def test_guards_empty_catalog_and_nothing_marked(wh: EmbeddedWarehouse, tmp_path: Path) -> None:
    stray = wh.store.put(b"stray block").locator.md5
    wh.store.flush()
    save_settings(wh.engine, {"signature_ttl": 0.0})
    with pytest.raises(GcAborted, match="no collections"):
        local_gc(wh.engine, wh.volume)
    wh.put([tree(tmp_path / "e", {})], name="empty")  # only the empty block: nothing to mark
    with pytest.raises(GcAborted, match="no block is referenced"):
        local_gc(wh.engine, wh.volume)
    assert wh.volume.stat(stray) is not None


def test_unreadable_root_aborts_gc_and_shows_in_fsck(wh: EmbeddedWarehouse, tmp_path: Path) -> None:
    pdh = wh.put([tree(tmp_path / "t", {"f": b"data" * 50})], name="t").pdh
    stray = wh.store.put(b"garbage").locator.md5
    wh.store.flush()
    save_settings(wh.engine, {"signature_ttl": 0.0})
    manifest_block = Locator.parse(pdh).md5  # stored under its own PDH
    wh.volume.path_for(manifest_block).unlink()
    with pytest.raises(GcAborted, match=re.escape(f"root collection {pdh}")):
        local_gc(wh.engine, wh.volume)
    assert wh.volume.stat(stray) is not None
    report = local_fsck(wh.engine, wh.volume)
    assert report.unreadable == [pdh]
    assert report.missing == [manifest_block]
    assert report.collections == {manifest_block: [pdh]}


def test_fsck_reports_missing_and_corrupt_blocks_with_collections(
    wh: EmbeddedWarehouse, tmp_path: Path, run: Runner
) -> None:
    one = wh.put([tree(tmp_path / "1", {"x": b"one" * 1000})], name="one").pdh
    two = wh.put([tree(tmp_path / "2", {"y": b"two" * 1000})], name="two").pdh
    # One volume, counted in English.
    assert run("fsck").output.rstrip().endswith(", clean (1 server)")
    (bx,) = blocks_of(wh, one)
    (by,) = blocks_of(wh, two)
    wh.volume.path_for(bx).unlink()
    wh.volume.path_for(by).write_bytes(b"tampered" * 375)
    result = run("fsck", code=5)
    assert f"missing {bx} in {one}" in result.output
    assert f"corrupt {by} on local in {two}" in result.output
    assert f"{by}: no good copy is left; put the same data again" in result.output
    # The corrupt copy was moved aside by the run that found it: now missing.
    out = json.loads(run("fsck", "--json", code=5).output)
    assert out["missing"] == sorted([bx, by]) and out["corrupt"] == []
    assert out["checked"] >= 2


def test_cli_dry_run_json_balance_and_settings(
    wh: EmbeddedWarehouse, tmp_path: Path, run: Runner
) -> None:
    wh.put([tree(tmp_path / "k", {"k": b"kept"})], name="k")
    junk = wh.store.put(b"junk junk").locator
    wh.store.flush()
    assert "signature_ttl\t1209600s" in run("gc", "settings").output
    run("gc", "settings", "signature_ttl=0", "history_retention=1h")
    assert "history_retention\t3600s" in run("gc", "settings").output
    dry = run("gc", "--dry-run").output
    assert f"would trash {junk} on local" in dry
    assert wh.volume.stat(junk.md5) is not None
    out = json.loads(run("gc", "--json").output)
    assert out["trashed"] == 1 and out["marked"] == 2 and not out["dry_run"]
    assert wh.volume.stat(junk.md5) is None
    assert "nothing to balance" in run("balance").output
    run("gc", "settings", "ttl=3", code=2)
    # An endless trash lifetime once was stored, and the next trash raised
    # OverflowError naming its deadline.
    for bad in ("trash_lifetime=inf", "trash_lifetime=nan", "history_retention=1e300"):
        assert run("gc", "settings", bad, code=2).stderr.startswith("Error: ")
    assert "trash_lifetime\t1209600s" in run("gc", "settings").output


def test_a_collection_put_again_is_a_root_for_the_ttl_again(
    run: Runner, tmp_path: Path, home: Path
) -> None:
    # Put, left unnamed past the TTL, then put again: that put is a recording
    # like any other, and the collection may be named within the TTL. Once,
    # its record kept its first time, so the next gc trashed its block (the
    # put cache had not rewritten it) and naming it was refused as collected.
    src = tree(tmp_path / "d", {"a": os.urandom(100_000)})  # large enough to be cached
    while time.time_ns() <= (src / "a").stat().st_ctime_ns + RACY_NS:
        time.sleep(0.05)  # else the first put would read it but not remember it
    run("put", str(tree(tmp_path / "k", {"k": b"kept"})), "--name", "kept")
    run("gc", "settings", "signature_ttl=1", "history_retention=0")
    pdh = run("put", str(src)).output.strip()
    time.sleep(1.5)  # past the TTL: garbage now (a longer stall changes nothing)
    before = time.time()
    again = json.loads(run("put", str(src), "--json").output)
    assert again["pdh"] == pdh and again["cached_files"] == 1
    # GC's clock is the moment the second put began: the first put is then
    # past the TTL, and the second put within it however long the machine
    # stalls between that put and this run.
    with EmbeddedWarehouse(home) as wh:
        report = local_gc(wh.engine, wh.volume, now=before)
    assert report.trashed == 0 and report.collected == 0, report
    run("name", "set", "later", pdh)
    assert "clean" in run("fsck").output


def test_two_gc_runs_trashing_the_same_blocks_both_finish(tmp_path: Path) -> None:
    # Two `wh gc` on one embedded warehouse (no lock between processes): the
    # copy one trashes between the other's stat and rename once ended the
    # other with "Error: …: No such file or directory".
    vol = LocalVolume(tmp_path / "v")
    blocks = []
    for _ in range(300):
        data = os.urandom(64)
        md5 = hashlib.md5(data).hexdigest()
        vol.put(md5, data)
        st = vol.stat(md5)
        assert st is not None
        blocks.append((md5, st.mtime_ns))

    def sweep() -> int:
        return sum(vol.trash(md5, if_mtime_ns=mtime) for md5, mtime in blocks)

    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda _: sweep(), range(4)))
    assert sum(done) == len(blocks)  # each copy trashed once, by one of them
    assert not list(vol.index())


def test_fsck_reports_an_unreadable_copy_and_goes_on(
    wh: EmbeddedWarehouse, tmp_path: Path, run: Runner
) -> None:
    # A copy that cannot be read (here a directory in its place; on a disk,
    # EIO) once stopped fsck with "Error: PATH: Is a directory", exit 1.
    one = wh.put([tree(tmp_path / "1", {"x": b"one" * 1000})], name="one").pdh
    two = wh.put([tree(tmp_path / "2", {"y": b"two" * 1000})], name="two").pdh
    (bx,) = blocks_of(wh, one)
    path = wh.volume.path_for(bx)
    path.unlink()
    path.mkdir()
    result = run("fsck", code=5)
    assert f"corrupt {bx} on local in {one}" in result.output
    assert two not in result.output  # its blocks were read and are good
