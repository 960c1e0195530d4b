"""A stored listing is read in step with the manifest, not as a table.

``listing_text`` writes the files in manifest order; ``OrderedListing``
finds each file at or after the previous one, and falls back to a table
only for a listing stored in another order or layout.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from conftest import make_tree
from warehouse.collection.extract import extract
from warehouse.collection.listings import OrderedListing, listing_text
from warehouse.embedded import EmbeddedWarehouse

NAMES = ["a", 'q"uote', "back\\slash", "ünï ☃", "tab\tnl\n", "\x01", "z/deep", "𝄞"]


def _md5(name: str) -> str:
    return hashlib.md5(name.encode("utf-8", "surrogatepass")).hexdigest()


def test_an_ordered_listing_is_scanned_forward_without_a_table() -> None:
    text = json.dumps({n: _md5(n) for n in NAMES}, ensure_ascii=False, separators=(",", ":"))
    listing = OrderedListing(text)
    for name in NAMES:
        assert listing.get(name) == _md5(name)
    assert listing._table is None
    # Skipping files (a sub-path get) goes forward too.
    listing = OrderedListing(text)
    assert [listing.get(n) for n in NAMES[2::3]] == [_md5(n) for n in NAMES[2::3]]
    assert listing._table is None


def test_a_listing_in_another_order_or_layout_is_answered_from_a_table() -> None:
    backwards = {n: _md5(n) for n in reversed(NAMES)}
    for text in (
        json.dumps(backwards, ensure_ascii=False, separators=(",", ":")),
        json.dumps(dict(reversed(backwards.items()))),  # escaped, spaced
        "{}",
    ):
        listing = OrderedListing(text)
        expected = json.loads(text)
        assert [listing.get(n) for n in NAMES] == [expected.get(n) for n in NAMES]
    listing = OrderedListing(json.dumps(backwards, ensure_ascii=False, separators=(",", ":")))
    assert listing.get(NAMES[0]) == _md5(NAMES[0])  # found ahead: the last one
    assert listing._table is None
    assert listing.get(NAMES[1]) == _md5(NAMES[1])  # behind: now a table
    assert listing._table is not None


def test_a_put_stores_its_listing_in_manifest_order_and_a_get_reads_it_so(
    tmp_path: Path,
) -> None:
    src = make_tree(tmp_path / "src")
    with EmbeddedWarehouse(tmp_path / "wh") as wh:
        result = wh.put([src])
        manifest = wh.manifest(result.pdh)
        # Given in any order, it is stored in the manifest's.
        shuffled = dict(reversed(list(result.write.file_md5s.items())))
        stored = listing_text(manifest, shuffled)
        assert stored is not None
        assert list(json.loads(stored)) == list(manifest.files())
        reader = wh.reader(result.pdh, one_pass=True)
        assert isinstance(reader.file_md5s, OrderedListing)
        listed = extract(reader, None)
        assert reader.file_md5s._table is None, "read in step, no table"
        assert {f.path: f.md5 for f in listed} == result.write.file_md5s


def test_the_stored_listing_is_the_json_of_the_files_in_manifest_order_or_none() -> None:
    from warehouse.manifest import Manifest

    empty = "d41d8cd98f00b204e9800998ecf8427e+0"
    escaped = ["".join(f"\\{ord(c):03o}" if c in "\\ " or c < " " else c for c in n) for n in NAMES]
    text = "".join(f"./d{i} {empty} 0:0:{n}\n" for i, n in enumerate(escaped))
    manifest = Manifest.parse(text.encode()).normalized()
    bare = Manifest(manifest.streams)  # known normalized, as a put's own manifest is
    bare.__dict__["_normalized"] = bare
    md5s = {p: _md5(p) for p in reversed(list(manifest.files()))}
    want = json.dumps(
        {p: md5s[p] for p in manifest.files()}, ensure_ascii=False, separators=(",", ":")
    )
    assert listing_text(bare, md5s) == listing_text(manifest, md5s) == want
    some = next(iter(md5s))
    assert listing_text(bare, {p: m for p, m in md5s.items() if p != some}) is None
    assert listing_text(bare, md5s | {"not/a/file": _md5("x")}) is None
    assert listing_text(bare, md5s | {some: "F" * 32}) is None
    assert listing_text(bare, None) is None
