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
        shuffled = dict(reversed(result.write.file_md5s.items()))
        stored = listing_text(manifest, shuffled)
        assert stored is not None
        assert list(json.loads(stored)) == list(manifest.files())
        reader = wh.reader(result.pdh, one_pass=True)
        assert isinstance(reader.file_md5s, OrderedListing)
        listed = extract(reader, None)
        assert reader.file_md5s._table is None, "read in step, no table"
        assert {f.path: f.md5 for f in listed} == result.write.file_md5s
