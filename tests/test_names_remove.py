"""``wh name rm`` and ``wh name writers``, embedded and through a controller on
SQLite and PostgreSQL: removal is a compare-and-swap kept in the history, and
only the owner (or an admin) says who else may change a name."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from cluster import Controller, KeepPool, controller
from postgres import fresh_schema, wait_until_blocked
from warehouse import catalog
from warehouse.catalog.schema import name_writers
from warehouse.cli import cli
from warehouse.errors import ConflictError, ForbiddenError
from warehouse.gc.roots import find_roots


@dataclass
class Env:
    kind: str
    env: dict[str, str]
    ctl: Controller | None = None
    tokens: dict[str, str] = field(default_factory=dict)

    def wh(self, *args: str, code: int = 0, user: str = "alice") -> str:
        """`wh ARGS` as ``user``, run through click in this process (a
        process each, about 40 of them a test, cost most of its time); an
        exception escaping the command fails the test."""
        env = dict(self.env)
        if self.ctl is not None:
            env["WH_TOKEN"] = self.tokens[user]
        else:
            env["WH_USER"] = user
        out = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
        assert out.exit_code == code, (args, out.exit_code, out.stdout, out.stderr)
        if code:
            # Bad input and refusals: one Error line, no traceback.
            assert out.stderr.startswith("Error: ") and out.stderr.count("\n") == 1, out.stderr
            return out.stderr
        return out.stdout


@pytest.fixture(params=["embedded", "controller-sqlite", "controller-postgresql"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    home = {"WH_HOME": str(tmp_path / "home"), "WH_URL": "", "WH_DB_URL": ""}
    if request.param == "embedded":
        yield Env("embedded", home)
        return
    pool: KeepPool = request.getfixturevalue("keep_servers")
    if request.param == "controller-sqlite":
        with controller(tmp_path / "catalog.db", pool) as ctl:
            yield _remote(ctl, home)
        return
    admin: sa.Engine = request.getfixturevalue("pg_admin")
    with fresh_schema(admin) as url, controller(url, pool) as ctl:
        yield _remote(ctl, home)


def _remote(ctl: Controller, home: dict[str, str]) -> Env:
    tokens = {u: ctl.user(u) for u in ("alice", "bob", "carol")}
    tokens["root"] = ctl.admin_token
    return Env("controller", {**home, "WH_URL": ctl.url}, ctl, tokens)


def _pdh(env: Env, root: Path, text: str) -> str:
    d = root / text
    d.mkdir()
    (d / "f").write_text(text)
    return env.wh("put", str(d)).strip()


def test_rm_is_a_compare_and_swap_kept_in_the_log(env: Env, tmp_path: Path) -> None:
    first, other = _pdh(env, tmp_path, "first"), _pdh(env, tmp_path, "other")
    env.wh("name", "set", "run", first)
    # No --expect, a wrong one, a bad one, a bad name: refused, nothing changes.
    assert "give --expect PDH" in env.wh("name", "rm", "run", code=2)
    err = env.wh("name", "rm", "run", "--expect", other, code=3)
    assert err == f"Error: name 'run' holds {first}, not {other} (use --expect {first})\n"
    env.wh("name", "rm", "run", "--expect", "zz", code=2)
    assert env.wh("name", "rm", "r?n", "--expect", first, code=2).startswith("Error: bad name")
    assert env.wh("name", "rm", "nosuch", "--expect", first, code=4) == "Error: no name 'nosuch'\n"
    assert env.wh("name", "get", "run").strip() == first

    removed = json.loads(env.wh("name", "rm", "run", "--expect", first, "--json"))
    assert removed["version"] == 2 and removed["old_pdh"] == first, removed
    assert removed["new_pdh"] is None and removed["by"] == "alice", removed
    env.wh("name", "get", "run", code=4)
    assert json.loads(env.wh("name", "ls", "--json")) == []
    # Removed already (another user's removal won): a conflict, as for set.
    err = env.wh("name", "rm", "run", "--expect", first, code=3)
    assert err == f"Error: name 'run' holds nothing, not {first}\n"
    log = json.loads(env.wh("name", "log", "run", "--json"))
    assert [(c["version"], c["old_pdh"], c["new_pdh"]) for c in log] == [
        (1, None, first),
        (2, first, None),
    ]
    # Named again, its versions go on from the removal.
    assert env.wh("name", "set", "run", other).split()[-1] == "3"
    log = json.loads(env.wh("name", "log", "run", "--json"))
    assert [c["version"] for c in log] == [1, 2, 3] and log[-1]["old_pdh"] is None
    # The collection stays stored: it can be named again.
    env.wh("name", "set", "back", first)


def test_writers_are_listed_added_and_removed(env: Env, tmp_path: Path) -> None:
    first, other = _pdh(env, tmp_path, "first"), _pdh(env, tmp_path, "other")
    env.wh("name", "set", "shared", first)
    assert env.wh("name", "writers", "shared") == ""
    assert env.wh("name", "writers", "shared", "--add", "bob", "--add", "carol") == "bob\ncarol\n"
    assert env.wh("name", "writers", "shared", "--add", "bob") == "bob\ncarol\n"  # twice: once
    out = json.loads(env.wh("name", "writers", "shared", "--remove", "carol", "--json"))
    assert out == {"name": "shared", "owner": "alice", "writers": ["bob"]}
    err = env.wh("name", "writers", "shared", "--remove", "carol", code=4)
    assert err == "Error: user 'carol' is not a writer of name 'shared'\n"
    env.wh("name", "writers", "shared", "--add", "x", "--remove", "x", code=2)
    env.wh("name", "writers", "nosuch", code=4)
    env.wh("name", "writers", "nosuch", "--add", "bob", code=4)
    assert env.wh("name", "writers", "a//b", code=2).startswith("Error: bad name 'a//b'")
    # A user name that cannot be one is bad input, embedded or not (through a
    # controller '..', '.', 'a/b' and '' reached other routes, or none).
    for bad in ("bad user", "..", ".", "a/b", "", "x?y"):
        for option in ("--add", "--remove"):
            err = env.wh("name", "writers", "shared", option, bad, code=2)
            assert err.startswith(f"Error: bad user name {bad!r}: use letters"), err
    assert env.wh("name", "writers", "shared") == "bob\n"
    # One user who is no writer, or one bad name, and nothing is changed.
    err = env.wh("name", "writers", "shared", "--add", "carol", "--remove", "dan", code=4)
    assert err == "Error: user 'dan' is not a writer of name 'shared'\n"
    env.wh("name", "writers", "shared", "--remove", "bob", "--add", "a/b", code=2)
    assert env.wh("name", "writers", "shared") == "bob\n"
    # The same user twice is once.
    assert env.wh("name", "writers", "shared", "--remove", "bob", "--remove", "bob") == ""
    env.wh("name", "writers", "shared", "--add", "bob", "--add", "bob")
    # A name removed loses its writers: whoever names it again owns it alone.
    env.wh("name", "rm", "shared", "--expect", first)
    env.wh("name", "set", "shared", other)
    assert env.wh("name", "writers", "shared") == ""


def test_who_may_move_remove_and_give_writers(env: Env, tmp_path: Path) -> None:
    if env.ctl is None:
        pytest.skip("users and admins are a controller's")
    first, other = _pdh(env, tmp_path, "first"), _pdh(env, tmp_path, "other")
    env.wh("name", "set", "n", first)
    # Bob is no writer: he may neither move, remove, nor make himself one.
    env.wh("name", "set", "n", other, "--expect", first, user="bob", code=6)
    env.wh("name", "rm", "n", "--expect", first, user="bob", code=6)
    env.wh("name", "writers", "n", "--add", "bob", user="bob", code=6)
    assert env.wh("name", "writers", "n", user="bob") == ""  # reading is anyone's
    env.wh("name", "writers", "n", "--add", "bob")
    # A writer may move the name, not remove it (naming it again would make
    # him its owner) nor change who else may.
    env.wh("name", "writers", "n", "--add", "carol", user="bob", code=6)
    env.wh("name", "writers", "n", "--remove", "bob", user="bob", code=6)
    env.wh("name", "set", "n", other, "--expect", first, user="bob")
    err = env.wh("name", "rm", "n", "--expect", other, user="bob", code=6)
    assert err == "Error: only the owner of 'n' may remove it\n"
    assert env.wh("name", "writers", "n") == "bob\n"
    env.wh("name", "writers", "n", "--remove", "bob")
    env.wh("name", "rm", "n", "--expect", other, user="bob", code=6)
    assert env.wh("name", "get", "n").strip() == other
    # An admin may do anything; the log says who did it.
    env.wh("name", "writers", "n", "--add", "carol", user="root")
    env.wh("name", "rm", "n", "--expect", other, user="carol", code=6)
    env.wh("name", "rm", "n", "--expect", other, user="root")
    log = json.loads(env.wh("name", "log", "n", "--json"))
    assert [(c["by"], c["new_pdh"]) for c in log] == [
        ("alice", first),
        ("bob", other),
        ("root", None),
    ]
    env.wh("name", "set", "m", first, user="carol")
    env.wh("name", "rm", "m", "--expect", first, user="root")


def test_a_removed_name_keeps_its_blocks_for_the_history_retention(
    catalog_engine: sa.Engine,
) -> None:
    """GC keeps what a name held within the history retention, removed or not;
    after it, a collection nothing else keeps is no root."""
    pdh = "d41d8cd98f00b204e9800998ecf8427e+0"
    catalog.add_collection(catalog_engine, pdh, "", 0, 0, "alice")
    catalog.set_name(catalog_engine, "n", pdh, expect=None, user="alice")
    change = catalog.remove_name(catalog_engine, "n", expect=pdh, user="alice")
    day = 86400.0
    roots = find_roots(catalog_engine, change.at + 1, history=day, jobs=day, ttl=0)
    assert pdh in roots.pdhs
    roots = find_roots(catalog_engine, change.at + 2 * day, history=day, jobs=day, ttl=0)
    assert pdh not in roots.pdhs


def test_removals_and_swaps_racing_leave_one_winner(catalog_engine: sa.Engine) -> None:
    """Removals and swaps with one expectation, at once: one wins, the others
    conflict, and the history has no gap; creators racing after a removal
    likewise (on PostgreSQL both insert, and the key refuses the second)."""
    pdhs = [f"{i:032x}+{i}" for i in range(1, 12)]
    for pdh in pdhs:
        catalog.add_collection(catalog_engine, pdh, "", 0, 0, "alice")
    first, others = pdhs[0], pdhs[1:]
    catalog.set_name(catalog_engine, "hot", first, expect=None, user="alice")

    def attempt(i: int) -> str:
        barrier.wait()
        try:
            if i % 2:
                catalog.remove_name(catalog_engine, "hot", expect=first, user="alice")
                return "removed"
            catalog.set_name(catalog_engine, "hot", others[i], expect=first, user="alice")
            return others[i]
        except ConflictError:
            return "conflict"

    barrier = threading.Barrier(10)
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(attempt, range(10)))
    won = [r for r in results if r != "conflict"]
    assert len(won) == 1, results
    log = catalog.name_log(catalog_engine, "hot")
    assert [(c.version, c.old_pdh) for c in log] == [(1, None), (2, first)]
    if won[0] == "removed":
        assert log[-1].new_pdh is None
    else:
        assert log[-1].new_pdh == won[0]
        catalog.remove_name(catalog_engine, "hot", expect=won[0], user="alice")

    def create(i: int) -> bool:
        barrier.wait()
        try:
            catalog.set_name(catalog_engine, "hot", others[i], expect=None, user="bob", create=True)
        except ConflictError:
            return False
        return True

    with ThreadPoolExecutor(10) as pool:
        created = list(pool.map(create, range(10)))
    assert created.count(True) == 1, created
    log = catalog.name_log(catalog_engine, "hot")
    assert [c.version for c in log] == list(range(1, len(log) + 1))
    assert log[-1].old_pdh is None and log[-1].new_pdh == others[created.index(True)]
    assert catalog.get_name(catalog_engine, "hot").owner == "bob"


def test_a_writer_added_while_the_name_is_removed_goes_with_it(pg_admin: sa.Engine) -> None:
    """PostgreSQL: the owner adding a writer while the name is removed. The
    removal must take that writer too, or whoever names it again finds a
    writer they never chose. A transaction holding bob's row (uncommitted)
    stops the addition after its owner check, until the removal has run."""
    pdh = "d41d8cd98f00b204e9800998ecf8427e+0"
    with fresh_schema(pg_admin) as url:
        engine = catalog.open_engine(url)
        try:
            catalog.upgrade(engine)
            catalog.add_collection(engine, pdh, "", 0, 0, "alice")
            catalog.set_name(engine, "n", pdh, expect=None, user="alice")
            with ThreadPoolExecutor(2) as pool, engine.connect() as holder:
                holder.execute(name_writers.insert().values(name="n", user="bob"))
                added = pool.submit(catalog.add_writer, engine, "n", "bob", user="alice")
                wait_until_blocked(engine, holder)
                removed = pool.submit(catalog.remove_name, engine, "n", expect=pdh, user="alice")
                # The removal either ends, or waits for the addition (which waits for us).
                pid = holder.exec_driver_sql("SELECT pg_backend_pid()").scalar()
                behind = sa.text(
                    "SELECT count(*) FROM pg_stat_activity a, pg_stat_activity b"
                    " WHERE :pid = ANY(pg_blocking_pids(b.pid))"
                    " AND b.pid = ANY(pg_blocking_pids(a.pid))"
                )
                with engine.connect() as conn:
                    while not removed.done() and not conn.execute(behind, {"pid": pid}).scalar():
                        conn.rollback()  # a fresh snapshot of pg_stat_activity
                        time.sleep(0.01)
                holder.rollback()
                added.result()
                assert removed.result().new_pdh is None
            with engine.connect() as conn:
                left = conn.execute(sa.select(name_writers).where(name_writers.c.name == "n"))
                assert left.all() == []
            catalog.set_name(engine, "n", pdh, expect=None, user="carol")
            assert catalog.list_writers(engine, "n") == []
        finally:
            engine.dispose()


def test_a_name_made_again_has_no_writers_left_from_before(catalog_engine: sa.Engine) -> None:
    """A catalog may hold writers of a removed name (a removal raced with their
    addition before this was fixed): whoever names it again owns it alone."""
    pdh = "d41d8cd98f00b204e9800998ecf8427e+0"
    catalog.add_collection(catalog_engine, pdh, "", 0, 0, "alice")
    with catalog_engine.begin() as conn:
        conn.execute(name_writers.insert().values(name="n", user="bob"))
    catalog.set_name(catalog_engine, "n", pdh, expect=None, user="carol")
    assert catalog.list_writers(catalog_engine, "n") == []
    with pytest.raises(ForbiddenError):
        catalog.remove_name(catalog_engine, "n", expect=pdh, user="bob")
