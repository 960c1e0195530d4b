"""A stored listing is read in step with the manifest, not as a table.

``listing_text`` writes the files in manifest order; ``OrderedListing``
finds each file at or after the previous one, and falls back to a table
only for a listing stored in another order or layout.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import sqlalchemy as sa

from conftest import make_tree
from warehouse import catalog
from warehouse.catalog.records import get_listing_in_parts, record_listing, record_listing_parts
from warehouse.collection.extract import extract
from warehouse.collection.listings import OrderedListing, listing_text
from warehouse.collection.records import load_normal_text
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


def _parts(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def test_a_listing_in_parts_is_scanned_forward_a_part_at_a_time() -> None:
    text = json.dumps({n: _md5(n) for n in NAMES}, ensure_ascii=False, separators=(",", ":"))
    # Cut everywhere: inside a name, an escape, a digest, between entries.
    for size in range(1, len(text) + 1):
        first, *rest = _parts(text, size)
        parts = iter(rest)
        listing = OrderedListing(first, parts, lambda: None)
        for name in NAMES:
            assert listing.get(name) == _md5(name), size
        assert listing._table is None
        assert next(parts, None) is None
        # Skipping files reads on too; what is held is what is left of a part.
        first, *rest = _parts(text, size)
        listing = OrderedListing(first, rest, lambda: None)
        assert [listing.get(n) for n in NAMES[1::3]] == [_md5(n) for n in NAMES[1::3]]
        assert listing._table is None
        assert len(listing._text) < 2 * size + 120


def test_a_listing_in_parts_in_another_order_is_read_whole_for_its_table() -> None:
    backwards = {n: _md5(n) for n in reversed(NAMES)}
    text = json.dumps(backwards, ensure_ascii=False, separators=(",", ":"))
    asked: list[int] = []

    def whole() -> str:
        asked.append(1)
        return text

    first, *rest = _parts(text, 10)
    listing = OrderedListing(first, rest, whole)
    assert [listing.get(n) for n in NAMES] == [_md5(n) for n in NAMES]
    assert listing._table is not None
    assert asked == [1]


def test_a_get_reads_the_listing_parts_from_the_catalog_as_it_goes(
    catalog_engine: sa.Engine,
) -> None:
    engine = catalog_engine
    pdh = "acbd18db4cc2f85cedef654fccc4a4d8+3"
    catalog.add_collection(engine, pdh, "", 0, 0, "alice")
    names = [f"f{i:03d}" for i in range(100)]
    digests = {n: hashlib.md5(n.encode()).hexdigest() for n in names}
    whole = json.dumps(digests, separators=(",", ":"))
    record_listing_parts(engine, pdh, "alice", lambda: _parts(whole, 100))
    assert get_listing_in_parts(engine, pdh, "bob") is None
    found = get_listing_in_parts(engine, pdh, "alice")
    assert found is not None
    first, rest = found
    assert first == whole[:100]
    assert "".join((first, *rest)) == whole

    # Recorded again while a get reads it (the same user's put of the same
    # files with other claims): the parts stop, and the rest is read whole
    # as it is now, never a part of one listing joined to another's.
    found = get_listing_in_parts(engine, pdh, "alice")
    assert found is not None
    first, rest = found
    listing = OrderedListing(first, rest, lambda: catalog.records.get_listing(engine, pdh, "alice"))
    assert listing.get(names[0]) == digests[names[0]]
    other = {n: "0" * 32 for n in names}
    record_listing_parts(
        engine, pdh, "alice", lambda: _parts(json.dumps(other, separators=(",", ":")), 100)
    )
    assert [listing.get(n) for n in names[50:]] == [other[n] for n in names[50:]]

    # A listing kept whole comes whole, with no parts after it.
    record_listing(engine, pdh, "alice", whole)
    found = get_listing_in_parts(engine, pdh, "alice")
    assert found is not None
    assert found[0] == whole
    assert list(found[1]) == []


def test_a_get_of_a_listing_in_parts_lists_every_recorded_digest(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for d in range(30):
        (src / f"d{d:02d}").mkdir(parents=True)
        for f in range(100):
            (src / f"d{d:02d}" / f"f\\{f:03d}").write_bytes(b"%d %d\n" % (d, f))
    with EmbeddedWarehouse(tmp_path / "wh") as wh:
        pdh = wh.put([src]).pdh
        listing = catalog.records.get_listing(wh.engine, pdh, wh.user)
        assert listing is not None
        real = json.loads(listing)
        # Kept in parts, as a put of many more files keeps it; other digests
        # than the bytes' (a claim), so that each listed one is seen to come
        # from the parts, in manifest order, not from hashing.
        claims = {p: hashlib.md5(p.encode()).hexdigest() for p in real}
        text = listing_text(wh.manifest(pdh), claims)
        assert text is not None
        record_listing_parts(wh.engine, pdh, wh.user, lambda: _parts(text, 997))
        stored = load_normal_text(wh.store, wh.engine, pdh, wh.user)
        assert stored is not None and stored[1] is not None
        got = {f.path: f.md5 for f in extract(wh.reader(pdh, one_pass=True), None)}
        again = {f.path: f.md5 for f in extract(wh.reader(pdh, one_pass=True), None, rehash=True)}
        assert got == claims
        assert again == real
        assert len(got) == 3000
        assert list(got) == list(real)  # manifest order


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


def test_save_manifest_records_a_big_listing_in_parts_in_manifest_order(tmp_path: Path) -> None:
    """A listing handed to ``save_manifest`` (a step's output, a library
    caller) is recorded a part (1 MiB) at a time as a put's is, so a get
    reads it a part at a time too; the same text, and the same rows, as
    when it was recorded whole."""
    from warehouse.catalog.schema import collection_listing_parts, collection_listings
    from warehouse.catalog.values import IN_PARTS
    from warehouse.collection.listings import listing_pieces
    from warehouse.collection.records import LISTING_PIECE
    from warehouse.manifest import Manifest

    files, per_dir = 24_000, 1_000
    data = bytes(range(256)) * (per_dir // 256 + 1)
    with EmbeddedWarehouse(tmp_path / "wh") as wh:
        block = wh.store.put(data[:per_dir]).locator
        wh.store.flush()
        lines = []
        for d in range(files // per_dir):
            names = " ".join(f"{i}:1:{'n' * 40}{d:02d}-{i:04d}" for i in range(per_dir))
            lines.append(f"./d{d:02d} {block.without_hints()} {names}\n")
        manifest = Manifest.parse("".join(lines).encode())
        paths = list(manifest.files())
        claims = {p: hashlib.md5(p.encode()).hexdigest() for p in reversed(paths)}
        pdh = wh.save_manifest(manifest, claims).pdh

        whole = json.dumps({p: claims[p] for p in paths}, separators=(",", ":"))
        assert len(whole) > 2 * LISTING_PIECE
        assert listing_text(manifest, claims) == whole
        assert "".join(listing_pieces(manifest, claims, LISTING_PIECE)) == whole
        with wh.engine.connect() as conn:
            row = conn.execute(sa.select(collection_listings.c.file_md5s)).scalar()
            parts = conn.execute(
                sa.select(collection_listing_parts.c.text).order_by(collection_listing_parts.c.part)
            ).scalars()
            texts = list(parts)
        assert row == IN_PARTS
        assert len(texts) >= 2
        assert all(len(t) < LISTING_PIECE + 200_000 for t in texts)
        assert "".join(texts) == whole == catalog.records.get_listing(wh.engine, pdh, wh.user)

        # A get reads every digest from the parts, in step (no table).
        reader = wh.reader(pdh, one_pass=True)
        assert isinstance(reader.file_md5s, OrderedListing)
        got = {f.path: f.md5 for f in extract(reader, None)}
        assert reader.file_md5s._table is None
        assert got == claims and list(got) == paths
        again = {f.path: f.md5 for f in extract(wh.reader(pdh, one_pass=True), None, rehash=True)}
        assert again == {
            p: hashlib.md5(data[i % per_dir : i % per_dir + 1]).hexdigest()
            for i, p in enumerate(paths)
        }

        # Not a listing of exactly these files: kept by nobody, and the one
        # recorded before stands (its parts too), as when it was made whole.
        some = paths[-1]
        for bad in (
            {p: m for p, m in claims.items() if p != some},
            claims | {"not/a/file": "0" * 32},
            claims | {some: "F" * 32},
        ):
            wh.save_manifest(manifest, bad)
            assert catalog.records.get_listing(wh.engine, pdh, wh.user) == whole

        # A small listing is still one value.
        small = Manifest.parse(lines[0].encode())
        small_pdh = wh.save_manifest(small, {p: claims[p] for p in small.files()}).pdh
        found = get_listing_in_parts(wh.engine, small_pdh, wh.user)
        assert found is not None and list(found[1]) == []
        assert json.loads(found[0]) == {p: claims[p] for p in small.files()}
