"""A put holds no per-file state to its end: its manifest text and listing
are the same as before, bytes for bytes; a put killed halfway leaves
nothing recorded and no scratch file; a listing too big for one value is
kept in parts and read whole.

(Memory itself is measured by tests/test_scale_memory.py.)
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import sqlalchemy as sa

from conftest import wh_process
from warehouse import catalog
from warehouse.blocks.locator import Locator
from warehouse.catalog.records import get_listing, record_listing, record_listing_parts
from warehouse.collection.records import listing_of
from warehouse.collection.scan import Filter, LazyTree, scan_paths
from warehouse.collection.spool import Spool
from warehouse.collection.writer import write_tree
from warehouse.embedded import EmbeddedWarehouse
from warehouse.manifest import Manifest, Segment, Stream
from warehouse.putcache import RACY_NS, PutCache

# Names that sort one way as paths and another as streams ("a", "a.b",
# "a/b", "a b", "a-b"), escapes, empty directories, empty files, UTF-8,
# and a directory whose files the resume cache answers for ("big").
_FILES: dict[str, bytes | None] = {
    "a/b/f1": b"one\n",
    "a/b.c": b"x",
    "a/b/c/d/deep": b"deep\n" * 3,
    "a.b/f": b"ab\n",
    "a b/sp ace": b"space",
    "a/b/": None,
    "a-b/": None,
    "a/b/e/": None,
    "back\\slash": b"bs",
    "tab\tname": b"t",
    "new\nline": b"nl",
    "\u00fc/\u00e9": "utf8 \u00e9".encode(),
    "z/empty": b"",
    "z/also empty": b"",
    "colon:name": b"c",
    "A": b"upper",
    "_": b"under",
    "a0": b"0",
    "big/one": bytes(range(256)) * 160,
    "big/two": b"\x01" * 50_000,
}

# What `wh put` stored for this tree before it spooled (when it held the
# whole manifest and digest table to the end), byte for byte.
PDH = "69cc9e2921b363aba915929b7d0537cd+675"
TEXT = b"".join(
    [
        b". e659cbbd8e594c992e56cdb6e9a6af54+17 0:5:A 5:5:_ 10:1:a0 11:2:back\\134slash"
        b" 13:1:colon\\072name 14:2:new\\012line 16:1:tab\\011name\n",
        b"./a 9dd4e461268c8034f5c8564e155c67a6+1 0:1:b.c\n",
        b"./a/b 5bbf5a52328e7439ae6e719dfe712200+4 0:4:f1\n",
        b"./a/b/c/d 714b7e685512d3fb065a3dd42a13b1e4+15 0:15:deep\n",
        b"./a/b/e d41d8cd98f00b204e9800998ecf8427e+0 0:0:\\056\n",
        b"./a\\040b ff2364a0be3d20e46cc69efb36afe9a5+5 0:5:sp\\040ace\n",
        b"./a-b d41d8cd98f00b204e9800998ecf8427e+0 0:0:\\056\n",
        b"./a.b daa8075d6ac5ff8d0c6d4650adb4ef29+3 0:3:f\n",
        b"./big 9dedd5f2146f866083710be88aac9ee6+90960 0:40960:one 40960:50000:two\n",
        b"./z d41d8cd98f00b204e9800998ecf8427e+0 0:0:also\\040empty 0:0:empty\n",
        b"./\xc3\xbc 9e158001bfbb625559acba519c8bb883+7 0:7:\xc3\xa9\n",
    ]
)
LISTING = dict(
    [
        ("A", "0122b4c2c01ee1c698ecc309d2b8eb5a"),
        ("_", "388fa2509025674d7dbf4715a4a9783e"),
        ("a0", "cfcd208495d565ef66e7dff9f98764da"),
        ("back\\slash", "7c9df801238abe28cae2675fd3166a1a"),
        ("colon:name", "4a8a08f09d37b73795649038408b5f33"),
        ("new\nline", "1a13105b7e4eb5fb2e7c9515ac06aa48"),
        ("tab\tname", "e358efa489f58062f10dd7316b65649e"),
        ("a/b.c", "9dd4e461268c8034f5c8564e155c67a6"),
        ("a/b/f1", "5bbf5a52328e7439ae6e719dfe712200"),
        ("a/b/c/d/deep", "714b7e685512d3fb065a3dd42a13b1e4"),
        ("a b/sp ace", "ff2364a0be3d20e46cc69efb36afe9a5"),
        ("a.b/f", "daa8075d6ac5ff8d0c6d4650adb4ef29"),
        ("big/one", "9a36eacb09f8e98e103e9ee897f8e31c"),
        ("big/two", "9a7ab32b64564f854cd25b19ade788ce"),
        ("z/also empty", "d41d8cd98f00b204e9800998ecf8427e"),
        ("z/empty", "d41d8cd98f00b204e9800998ecf8427e"),
        ("ü/é", "9e158001bfbb625559acba519c8bb883"),
    ]
)


def _make(root: Path) -> Path:
    for rel, data in _FILES.items():
        p = root / rel
        if data is None:
            p.mkdir(parents=True, exist_ok=True)
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def test_a_tree_of_awkward_names_is_stored_as_before(tmp_path: Path) -> None:
    src = _make(tmp_path / "src")
    with EmbeddedWarehouse(tmp_path / "wh") as wh:
        result = wh.put(src)
        assert result.pdh == PDH
        assert wh.manifest_text(PDH) == TEXT
        text = listing_of(wh.engine, PDH, wh.user)
        assert text is not None and json.loads(text) == LISTING
        assert list(json.loads(text)) == list(LISTING), "in manifest order"
        # Asked for, the manifest and digests are read back from the catalog.
        assert result.write.manifest.portable_text().encode() == TEXT
        assert dict(result.write.file_md5s) == LISTING
        assert result.write.size == sum(len(d) for d in _FILES.values() if d)
        assert result.write.file_count == len(LISTING)
        # Through the resume cache: the second put reads nothing of "big"
        # (once the files are older than a clock tick may hide a change in).
        newest = max(max(p.stat().st_mtime_ns, p.stat().st_ctime_ns) for p in src.rglob("*"))
        while time.time_ns() <= newest + RACY_NS:
            time.sleep(0.05)
        with PutCache("test", tmp_path / "cache") as cache:
            assert wh.put(src, cache=cache).pdh == PDH
            again = wh.put(src, cache=cache)
        assert again.pdh == PDH and again.cached is not None and again.cached.files == 2
        assert listing_of(wh.engine, PDH, wh.user) == text
        # Without a spool (as a put through a controller): the same manifest.
        kept = write_tree(wh.store, [src])
        assert kept.manifest.portable_text().encode() == TEXT
        assert dict(kept.file_md5s) == LISTING


def test_the_spool_takes_the_pdh_as_it_goes(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        assert spool.pdh == "d41d8cd98f00b204e9800998ecf8427e+0"
        assert spool.listing() == "{}"
        loc = Locator.parse("acbd18db4cc2f85cedef654fccc4a4d8+3")
        stream = Stream("./d", (loc,), (Segment(0, 3, "f\u00e9"),))
        spool.add(stream, "d", ["f\u00e9"], bytes(range(16)))
        assert spool.pdh == Manifest((stream,)).pdh
        assert spool.text() == Manifest((stream,)).portable_text().encode()
        assert json.loads(spool.listing()) == {"d/f\u00e9": bytes(range(16)).hex()}
        # Pieces split between characters: each decodes on its own.
        assert "".join(spool.listing_pieces(3)) == spool.listing()
    assert os.listdir(tmp_path) == [], "unnamed: nothing left once closed"


def test_a_listing_in_parts_reads_whole(catalog_engine: sa.Engine) -> None:
    engine = catalog_engine
    pdh = "acbd18db4cc2f85cedef654fccc4a4d8+3"
    catalog.add_collection(engine, pdh, "", 0, 0, "alice")
    whole = json.dumps({f"f{i}": "0" * 32 for i in range(100)}, separators=(",", ":"))
    pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]
    record_listing_parts(engine, pdh, "alice", lambda: pieces)
    assert get_listing(engine, pdh, "alice") == whole
    assert get_listing(engine, pdh, "bob") is None
    # Replaced by a listing kept whole (as every put recorded before
    # parts): its parts go, and it reads as it was written.
    one = '{"g":"' + "1" * 32 + '"}'
    record_listing(engine, pdh, "alice", one)
    assert get_listing(engine, pdh, "alice") == one
    record_listing(engine, pdh, "alice", "{}")
    assert get_listing(engine, pdh, "alice") == "{}"


def test_a_put_killed_before_recording_leaves_nothing(home: Path, tmp_path: Path) -> None:
    src = _make(tmp_path / "src")
    killed = wh_process(
        "put", "--no-progress", str(src), home=home, env={"WH_FAULT_POINT": "put-recording"}
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # Every block is stored and the collection is not recorded; the spool
    # (unnamed scratch files) went with the process.
    assert os.listdir(home / "tmp") == []
    with EmbeddedWarehouse(home) as wh:
        assert catalog.list_collections(wh.engine) == []
    done = wh_process("put", "--no-progress", str(src), home=home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == PDH
    assert os.listdir(home / "tmp") == []


def test_a_special_file_deep_in_the_tree_stops_the_put_with_nothing_recorded(
    home: Path, tmp_path: Path
) -> None:
    # Found when the walk reaches its directory, after others were stored.
    src = _make(tmp_path / "src")
    os.mkfifo(src / "z" / "fifo")
    done = wh_process("put", "--no-progress", str(src), home=home)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("Error: cannot store special file"), done.stderr
    assert "Traceback" not in done.stderr
    assert os.listdir(home / "tmp") == []
    with EmbeddedWarehouse(home) as wh:
        assert catalog.list_collections(wh.engine) == []


def test_the_lazy_walk_yields_what_the_whole_scan_holds(tmp_path: Path) -> None:
    src = _make(tmp_path / "src")
    whole = [(d.rel, list(d.files), d.is_empty) for d in scan_paths([src]).walk()]
    lazy = [(d.rel, list(d.files), d.is_empty) for d in LazyTree([src]).walk()]
    assert lazy == whole
    assert not LazyTree([src]).is_empty and LazyTree([src / "a-b"]).is_empty
    tree = LazyTree([src / "a", src / "A", src / "z"])
    several = [(d.rel, list(d.files)) for d in scan_paths([src / "a", src / "A", src / "z"]).walk()]
    assert [(d.rel, list(d.files)) for d in tree.walk()] == several
    assert tree.file_count == 6 and tree.total_size == sum(
        len(_FILES[p] or b"") for p in ("A", "a/b/f1", "a/b.c", "a/b/c/d/deep")
    )
    # --exclude and --skip-unreadable alike: the put's walk counts what it
    # left out, the counting walk does not count it again.
    keep = Filter(exclude=["*.c", "e/"])
    tree = LazyTree([src], keep)
    assert tree.file_count == len(LISTING) - 1
    walked = [d.rel for d in tree.walk()]
    assert "a/b/e" not in walked and keep.excluded == 2


def test_a_step_reads_a_listing_kept_in_parts(tmp_path: Path) -> None:
    """A step's warehouse reads the catalog with sqlite3, not SQLAlchemy: it
    joins a listing's parts as the catalog does (it found "{}" and hashed
    every file it read instead)."""
    from warehouse.jobs.stepside import StepWarehouse

    src = _make(tmp_path / "src")
    with EmbeddedWarehouse(tmp_path / "home") as wh:
        pdh = wh.put([src]).pdh
        whole = get_listing(wh.engine, pdh, wh.user)
        assert whole is not None and len(whole) > 100
        record_listing_parts(wh.engine, pdh, wh.user, lambda: [whole[:50], whole[50:]])
        expected = wh._collection(pdh)
    assert expected[1] is not None and len(expected[1]) > 10
    with StepWarehouse(tmp_path / "home") as step_wh:
        assert step_wh._collection(pdh) == expected
