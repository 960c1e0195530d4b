"""Names moved by many ``wh`` processes at once through a controller (SQLite and PostgreSQL)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

from cluster import WH_BIN, KeepPool, controller
from warehouse.remote.warehouse import RemoteWarehouse

WRITERS = 20


def _start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [WH_BIN, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _collections(wh: RemoteWarehouse, root: Path, count: int) -> list[str]:
    pdhs = []
    for i in range(count):
        d = root / f"c{i}"
        d.mkdir()
        (d / "f").write_text(f"{i}\n")
        pdhs.append(wh.put([d]).pdh)
    return pdhs


def test_twenty_processes_with_one_expectation_through_a_controller(
    tmp_path: Path, catalog_url: str, keep_servers: KeepPool
) -> None:
    with controller(catalog_url, keep_servers) as ctl:
        token = ctl.user("alice")
        env = {**os.environ, "WH_URL": ctl.url, "WH_TOKEN": token, "WH_HOME": str(tmp_path / "h")}
        with RemoteWarehouse(ctl.url, token) as wh:
            first, *others = _collections(wh, tmp_path, WRITERS + 1)
            wh.set_name("hot", first, expect=None)
            procs = [_start(env, "name", "set", "hot", p, "--expect", first) for p in others]
            done = [(p.wait(), *p.communicate()) for p in procs]
            won = [i for i, (code, _, _) in enumerate(done) if code == 0]
            assert len(won) == 1, done
            # Every loser is a conflict (exit 3) with one Error line naming the winner.
            for code, out, err in (d for i, d in enumerate(done) if i not in won):
                assert code == 3, (out, err)
                assert err.startswith("Error: ") and err.count("\n") == 1, err
                assert others[won[0]] in err
            log = wh.name_log("hot")
            assert [c.version for c in log] == [1, 2]
            assert [c.new_pdh for c in log] == [first, others[won[0]]]
            assert wh.get_name("hot").pdh == others[won[0]]


def test_a_chain_of_swaps_from_many_processes_leaves_no_gap(
    tmp_path: Path, catalog_url: str, keep_servers: KeepPool
) -> None:
    """Each process moves the name from the PDH it last saw, retrying on conflict:
    every version is recorded once, each change's old PDH is the one before's new."""
    with controller(catalog_url, keep_servers) as ctl:
        token = ctl.user("alice")
        env = {**os.environ, "WH_URL": ctl.url, "WH_TOKEN": token, "WH_HOME": str(tmp_path / "h")}
        with RemoteWarehouse(ctl.url, token) as wh:
            first, *others = _collections(wh, tmp_path, 5)
            wh.set_name("chain", first, expect=None)
        script = (
            "import subprocess, sys\n"
            "wh, pdh = sys.argv[1], sys.argv[2]\n"
            "while True:\n"
            "    now = subprocess.run([wh, 'name', 'get', 'chain'], capture_output=True,"
            " text=True, check=True).stdout.strip()\n"
            "    r = subprocess.run([wh, 'name', 'set', 'chain', pdh, '--expect', now],"
            " capture_output=True, text=True)\n"
            "    if r.returncode == 0:\n"
            "        break\n"
            "    assert r.returncode == 3, r.stderr\n"
        )
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, WH_BIN, p],
                env=env,
                stderr=subprocess.PIPE,
                text=True,
            )
            for p in others
        ]
        errors = [(p.wait(), p.communicate()[1]) for p in procs]
        assert all(code == 0 for code, _ in errors), errors
        with RemoteWarehouse(ctl.url, token) as wh:
            log = wh.name_log("chain")
        assert [c.version for c in log] == list(range(1, len(others) + 2))
        assert sorted(c.new_pdh or "" for c in log[1:]) == sorted(others)
        for before, after in itertools.pairwise(log):
            assert after.old_pdh == before.new_pdh
