"""`wh put --manifest FILE` of text in normalized form is read a line at a
time into a put's spool and recorded from there (through a controller: the
streamed POST /api/v1/collections/text), never held whole; other text is
parsed whole as before. Either way the collection is recorded exactly as
the whole-text path records it: same PDH, same stored bytes, same rows."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from cluster import (
    Controller,
    ctl_fixture,
    pool_fixture,
)
from conftest import Runner, make_tree
from warehouse.catalog.schema import (
    block_writes,
    collection_listing_parts,
    collection_listings,
    collections,
)
from warehouse.collection.records import load_manifest_text
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError, UsageError, WarehouseError
from warehouse.manifest import Manifest
from warehouse.remote.warehouse import RemoteWarehouse

# Small, so that a small tree's manifest is over the bound a whole one has.
MAX_MANIFEST = 4 << 10
LIMIT = 1 << 30


pool = pool_fixture("module")
ctl = ctl_fixture(max_manifest=MAX_MANIFEST)


def _tree(root: Path) -> Path:
    make_tree(root)
    for d in range(30):
        (root / f"dir-{d:02d}").mkdir()
        for f in range(10):
            (root / f"dir-{d:02d}" / f"file-{f}.txt").write_bytes(b"%d %d\n" % (d, f))
    return root


def _moved(text: str) -> str:
    """The same files under a directory ``x``: another collection of the
    same blocks, still in normalized form."""
    out = []
    for line in text.splitlines(keepends=True):
        name, rest = line.split(" ", 1)
        out.append(("./x" if name == "." else "./x/" + name[2:]) + " " + rest)
    return "".join(out)


def _unnormalized(text: str) -> str:
    """The same collection written out of normalized order: last stream first."""
    lines = text.splitlines(keepends=True)
    return "".join([lines[-1], *lines[:-1]])


def _rows(engine: sa.Engine, pdh: str) -> tuple[object, ...]:
    """The collection's row, and how many listing and block write rows there are."""
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(
                collections.c.manifest_blocks, collections.c.size, collections.c.file_count
            ).where(collections.c.pdh == pdh)
        ).one()
        counts = [
            conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
            for t in (collection_listings, collection_listing_parts, block_writes)
        ]
    return tuple(row), counts


def test_normalized_text_is_recorded_as_the_whole_text_path_records_it(tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    homes = tmp_path / "a", tmp_path / "b"
    for h in homes:
        with EmbeddedWarehouse(h, user="alice") as wh:
            pdh = wh.put(src).pdh
            text = _moved(wh.manifest_text(pdh).decode())  # type: ignore[union-attr]
    before = {}
    for h in homes:
        with EmbeddedWarehouse(h, user="alice") as wh:
            before[h] = _rows(wh.engine, pdh)[1]
    with EmbeddedWarehouse(homes[0], user="alice") as wh:
        whole = wh.put_manifest_text(text.encode())
        whole_rows = _rows(wh.engine, whole.pdh)
        whole_text = load_manifest_text(wh.store, wh.engine, whole.pdh)
    with EmbeddedWarehouse(homes[1], user="alice") as wh:
        streamed = wh.put_manifest_file(io.BytesIO(text.encode()), LIMIT)
        rows = _rows(wh.engine, streamed.pdh)
        assert load_manifest_text(wh.store, wh.engine, streamed.pdh) == whole_text
    assert (streamed.pdh, streamed.size, streamed.file_count) == (
        whole.pdh,
        whole.size,
        whole.file_count,
    )
    assert streamed.pdh == Manifest.parse(text).normalized().pdh
    assert rows == whole_rows
    # No listing and no block writes recorded by either (as before).
    assert rows[1] == before[homes[1]] == before[homes[0]]


@pytest.mark.parametrize("shape", [_unnormalized, lambda t: t.rstrip("\n")])
def test_other_text_takes_the_whole_text_path(tmp_path: Path, shape: object) -> None:
    src = _tree(tmp_path / "src")
    with EmbeddedWarehouse(tmp_path / "h", user="alice") as wh:
        pdh = wh.put(src).pdh
        text = wh.manifest_text(pdh).decode()  # type: ignore[union-attr]
        other = shape(_moved(text))  # type: ignore[operator]
        if not other.endswith("\n"):
            # The fault is told as a whole parse tells it: nothing recorded.
            with pytest.raises(UsageError, match="newline"):
                wh.put_manifest_file(io.BytesIO(other.encode()), LIMIT)
            return
        record = wh.put_manifest_file(io.BytesIO(other.encode()), LIMIT)
        assert record.pdh == Manifest.parse(other).normalized().pdh
        assert record.pdh == wh.put_manifest_text(_moved(text).encode()).pdh


def test_a_missing_block_or_text_over_the_limit_records_nothing(tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    with EmbeddedWarehouse(tmp_path / "h", user="alice") as wh:
        pdh = wh.put(src).pdh
        text = wh.manifest_text(pdh)
        assert text is not None
        before = _rows(wh.engine, pdh)[1]
        missing = text.replace(text.split(b" ")[1][:32], b"0" * 32, 1)
        with pytest.raises(NotFoundError, match="of the manifest is not stored"):
            wh.put_manifest_file(io.BytesIO(_moved(missing.decode()).encode()), LIMIT)
        with pytest.raises(UsageError, match="manifest is over 100 bytes"):
            wh.put_manifest_file(io.BytesIO(_moved(text.decode()).encode()), 100)
        with pytest.raises(UsageError, match="manifest is over 100 bytes"):
            wh.put_manifest_file(io.BytesIO(_unnormalized(text.decode()).encode()), 100)
        assert _rows(wh.engine, pdh)[1] == before
        with wh.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(collections)).scalar() == 1


def test_through_a_controller_normalized_text_is_streamed_past_the_whole_bound(
    tmp_path: Path, ctl: Controller
) -> None:
    src = _tree(tmp_path / "src")
    token = ctl.user("alice")
    with RemoteWarehouse(ctl.url, token) as remote:
        pdh = remote.put(src).pdh
        signed = remote.stored_text(pdh)
        assert signed is not None
        text = _moved(signed.read().decode())
        signed.close()
        assert len(text) > MAX_MANIFEST  # POST /collections would refuse it whole
        before = _rows(ctl.state.engine, pdh)[1]
        record = remote.put_manifest_file(io.BytesIO(text.encode()), LIMIT)
        assert record.pdh == Manifest.parse(text).normalized().pdh
        assert _rows(ctl.state.engine, record.pdh)[1] == before  # no listing, no writes
        assert remote.manifest(record.pdh).normalized().pdh == record.pdh
    with EmbeddedWarehouse(tmp_path / "h", user="alice") as local:
        local.put(src)
        same = local.put_manifest_text(_moved(local.manifest_text(pdh).decode()).encode())  # type: ignore[union-attr]
        assert same.pdh == record.pdh
        assert _rows(local.engine, same.pdh)[0] == _rows(ctl.state.engine, record.pdh)[0]


def test_through_a_controller_a_block_not_signed_is_refused(
    tmp_path: Path, ctl: Controller
) -> None:
    src = _tree(tmp_path / "src")
    with RemoteWarehouse(ctl.url, ctl.user("alice")) as remote:
        pdh = remote.put(src).pdh
        signed = remote.stored_text(pdh)
        assert signed is not None
        text = _moved(signed.read().decode())
        signed.close()
        unsigned = re.sub(r"\+A[0-9a-f]+@[0-9a-f]+", "", text, count=1)
        assert unsigned != text
        before = _rows(ctl.state.engine, pdh)[1]
        with pytest.raises(
            WarehouseError, match=r"manifest line 1: block [0-9a-f]{32}\+\d+ is not signed"
        ):
            remote.put_manifest_file(io.BytesIO(unsigned.encode()), LIMIT)
        assert _rows(ctl.state.engine, pdh)[1] == before
        with ctl.state.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(collections)).scalar() == 1


def test_the_cli_reads_a_file_or_standard_input(tmp_path: Path, home: Path) -> None:
    run = Runner()
    src = _tree(tmp_path / "src")
    pdh = run("put", str(src)).stdout.strip()
    text = _moved(run("manifest", pdh).stdout)
    path = tmp_path / "m.txt"
    path.write_text(text)
    by_file = run("put", "--manifest", str(path), "--name", "moved").stdout.strip()
    by_stdin = run("put", "--manifest", "-", input=text.encode()).stdout.strip()
    assert by_file == by_stdin == Manifest.parse(text).normalized().pdh
    back = tmp_path / "back"
    run("get", "moved", str(back))
    assert (back / "x" / "hello.txt").read_bytes() == b"hello\n"


def test_empty_text_is_the_empty_collection_either_way(tmp_path: Path, ctl: Controller) -> None:
    with EmbeddedWarehouse(tmp_path / "a", user="alice") as wh:
        streamed = wh.put_manifest_file(io.BytesIO(b""), LIMIT)
        rows = _rows(wh.engine, streamed.pdh)
    with EmbeddedWarehouse(tmp_path / "b", user="alice") as wh:
        whole = wh.put_manifest_text(b"")
        assert _rows(wh.engine, whole.pdh) == rows
    with RemoteWarehouse(ctl.url, ctl.user("alice")) as remote:
        sent = remote.put_manifest_file(io.BytesIO(b""), LIMIT)
    assert streamed.pdh == whole.pdh == sent.pdh == Manifest.parse("").pdh
    assert _rows(ctl.state.engine, sent.pdh) == rows


def test_a_warehouse_without_a_spool_reads_the_text_whole(tmp_path: Path) -> None:
    from warehouse import catalog
    from warehouse.jobs.controllerhost import CatalogWarehouse

    src = _tree(tmp_path / "src")
    with EmbeddedWarehouse(tmp_path / "h", user="alice") as wh:
        pdh = wh.put(src).pdh
        text = _moved(wh.manifest_text(pdh).decode()).encode()  # type: ignore[union-attr]
        hosted = CatalogWarehouse(wh.engine, lambda: wh.store, "alice")
        with pytest.raises(UsageError, match=f"manifest is over {len(text) - 1} bytes"):
            hosted.put_manifest_file(io.BytesIO(text), len(text) - 1)
        record = hosted.put_manifest_file(io.BytesIO(text), len(text), name="moved")
        assert record.pdh == Manifest.parse(text).normalized().pdh
        assert catalog.get_name(wh.engine, "moved").pdh == record.pdh
