"""GC's pure parts: the locator scan, sweep and balance plans, settings, index parsing."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import sqlalchemy as sa

from warehouse import catalog
from warehouse.errors import UsageError
from warehouse.gc import (
    Copy,
    GcAborted,
    block_md5s,
    job_roots,
    load_settings,
    parse_duration,
    plan_balance,
    plan_sweep,
    save_settings,
)
from warehouse.gc.keep import parse_index
from warehouse.manifest import Manifest
from warehouse.remote.probe import Service, probe_order

NOW = 1_700_000_000.0
TTL = 3600.0
OLD = int((NOW - 2 * TTL) * 1e9)
NEW = int((NOW - 10) * 1e9)


def md5(i: int | str) -> str:
    return hashlib.md5(str(i).encode()).hexdigest()


def test_scan_finds_locators_and_never_file_names() -> None:
    a, b, c = md5(1), md5(2), md5(3)
    text = (
        f". {a}+10+K03@x {b}+5 0:15:{c}+5\n"  # a file named like a locator
        f"./{c}+7 {b}+5 0:5:x\n"  # a directory named like one (not the file's name)
        f"./d d41d8cd98f00b204e9800998ecf8427e+0 0:0:\\056\n"
    ).encode()
    assert block_md5s([text]) == {a, b}
    # The same answer as parsing the manifest.
    assert block_md5s([text]) == {loc.md5 for loc in Manifest.parse(text).blocks()} - {
        "d41d8cd98f00b204e9800998ecf8427e"
    }


def test_sweep_trashes_only_old_unmarked_copies() -> None:
    idx = {
        "s1": [Copy(md5(1), 1, OLD), Copy(md5(2), 1, OLD), Copy(md5(3), 1, NEW)],
        "s2": [Copy(md5(1), 1, OLD), Copy(md5(4), 1, OLD)],
    }
    plan = plan_sweep({md5(1)}, idx, NOW, TTL)
    assert [c.md5 for c in plan.trash["s1"]] == [md5(2)]
    assert [c.md5 for c in plan.trash["s2"]] == [md5(4)]
    assert (plan.kept, plan.young, plan.trashed) == (2, 1, 2)
    assert plan.trash["s1"][0].mtime_ns == OLD  # carried to keepd's mtime guard


SERVICES = [Service(f"keep-{i}", f"http://k{i}") for i in range(4)]


def test_balance_pulls_to_next_servers_in_probe_order() -> None:
    block = md5("b")
    order = probe_order(block, SERVICES)
    idx: dict[str, list[Copy]] = {s.id: [] for s in SERVICES}
    idx[order[2].id] = [Copy(block, 7, OLD)]
    plan = plan_balance({block}, idx, SERVICES, 2, NOW, TTL)
    assert plan.under == [block]
    assert list(plan.pull) == [order[0].id]  # the best-ranked server lacking it
    (entry,) = plan.pull[order[0].id]
    assert entry.key == f"{block}+7" and entry.sources == (order[2].url,)
    assert plan.trashed == 0


def test_balance_trashes_extras_only_with_wanted_copies_confirmed() -> None:
    block = md5("x")
    order = probe_order(block, SERVICES)
    idx = {s.id: [Copy(block, 3, OLD)] for s in SERVICES}
    idx[order[3].id] = [Copy(block, 3, NEW)]  # a fresh copy (a pull in flight) is kept
    plan = plan_balance({block}, idx, SERVICES, 2, NOW, TTL)
    assert plan.pulled == 0
    assert {sid for sid, cs in plan.trash.items() if cs} == {order[2].id}
    # One copy only: pulled, never trashed, even if another server lists extras.
    one = {order[1].id: [Copy(block, 3, OLD)]}
    plan = plan_balance({block}, one, SERVICES, 2, NOW, TTL)
    assert plan.trashed == 0 and plan.pulled == 1


def test_balance_reports_missing_and_ignores_garbage() -> None:
    idx = {SERVICES[0].id: [Copy(md5("junk"), 1, OLD)]}
    plan = plan_balance({md5("gone")}, idx, SERVICES, 2, NOW, TTL)
    assert plan.missing == [md5("gone")]
    assert plan.pulled == 0 and plan.trashed == 0


def test_parse_index_needs_the_final_empty_line() -> None:
    good = f"{md5(1)}+3 123\n{md5(2)}+0 9\n\n"
    assert parse_index(good, "u") == [Copy(md5(1), 3, 123), Copy(md5(2), 0, 9)]
    assert parse_index("\n", "u") == []
    with pytest.raises(GcAborted, match="incomplete"):
        parse_index(good[:-1], "u")
    with pytest.raises(GcAborted, match="bad line 1"):
        parse_index("nonsense\n\n", "u")


def test_durations_and_settings(tmp_path: Path) -> None:
    assert parse_duration("90") == 90
    assert parse_duration("15m") == 900
    assert parse_duration("2d") == 2 * 86400
    with pytest.raises(UsageError):
        parse_duration("soon")
    # Not finite, or past any deadline a trash file name or JSON can hold:
    # these once reached the catalog and then broke every gc with a traceback.
    for bad in ("inf", "-inf", "nan", "1e300", "99999999999999999999d"):
        with pytest.raises(UsageError):
            parse_duration(bad)
    assert parse_duration("1000w") == 1000 * 7 * 86400
    engine = catalog.open_engine(f"sqlite:///{tmp_path / 'c.db'}")
    catalog.upgrade(engine)
    assert load_settings(engine).history_retention == 30 * 86400
    s = save_settings(engine, {"signature_ttl": 5.0, "job_retention": 7.0})
    assert (s.signature_ttl, s.job_retention) == (5.0, 7.0)
    assert load_settings(engine).signature_ttl == 5.0
    with pytest.raises(UsageError, match="no GC setting"):
        save_settings(engine, {"ttl": 1.0})
    for bad in (float("inf"), float("nan"), 1e300, -1.0):
        with pytest.raises(UsageError, match="trash_lifetime must be"):
            save_settings(engine, {"trash_lifetime": bad})
    assert load_settings(engine).trash_lifetime == 14 * 86400
    engine.dispose()


def test_job_roots_tolerate_absent_and_partial_tables(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'j.db'}")
    assert job_roots(engine, 0.0) == (set(), [])
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE jobs (id INTEGER PRIMARY KEY, state TEXT, input_pdh TEXT, "
            "output_pdh TEXT, finished_at REAL)"
        )
        conn.exec_driver_sql(
            "INSERT INTO jobs VALUES (1, 'running', 'in1', NULL, NULL), "
            "(2, 'complete', 'in2', 'out2', 100.0), (3, 'complete', 'in3', 'out3', 5.0)"
        )
        conn.exec_driver_sql("CREATE TABLE steps (job INTEGER, number INTEGER, output TEXT)")
        conn.exec_driver_sql(f"INSERT INTO steps VALUES (1, 0, '. {md5(9)}+4 0:4:f\n')")
    pdhs, fragments = job_roots(engine, 50.0)
    assert pdhs == {"in1", "in2", "out2"}
    assert block_md5s(fragments) == {md5(9)}
    engine.dispose()
