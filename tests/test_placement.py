"""The placement decision, a pure function (docs/clusters.md, "Placement")."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from cluster import controller, keep_pool
from conftest import Runner
from warehouse.blocks import Locator
from warehouse.clusters.placement import (
    HostMap,
    block_servers,
    bytes_by_host,
    local_fraction,
    parse_host_map,
    preferred_workers,
)
from warehouse.errors import UsageError
from warehouse.remote.probe import Service, probe_order

KEEP = {"http://k1:1": "h1", "http://k2:2": "h2"}
WORKERS = {"tcp://w1:1": "h1", "tcp://w2:2": "h2", "tcp://w3:3": "h2"}


def loc(i: int, size: int) -> Locator:
    return Locator(hashlib.md5(str(i).encode()).hexdigest(), size)


def test_the_host_with_most_input_bytes_and_workers_wins() -> None:
    held = bytes_by_host([(loc(1, 100), ["http://k1:1"]), (loc(2, 300), ["http://k2:2/"])], KEEP)
    assert held == {"h1": 100, "h2": 300}
    assert preferred_workers(held, WORKERS) == ("tcp://w2:2", "tcp://w3:3")
    assert local_fraction(held, 400, "h2") == 0.75
    assert local_fraction(held, 400, "h1") == 0.25
    assert local_fraction(held, 400, "elsewhere") == 0.0
    assert local_fraction(held, 400, None) is None
    assert local_fraction(held, 0, "h1") is None


def test_a_block_counts_once_per_host_and_unknown_servers_not_at_all() -> None:
    both = {"http://k1:1": "h1", "http://k1b:1": "h1"}
    held = bytes_by_host([(loc(1, 50), ["http://k1:1", "http://k1b:1", "http://x:9"])], both)
    assert held == {"h1": 50}


def test_no_labels_or_no_workers_beside_the_data_means_no_preference() -> None:
    held = bytes_by_host([(loc(1, 100), ["http://k1:1"])], {})
    assert held == {} and preferred_workers(held, WORKERS) == ()
    held = bytes_by_host([(loc(1, 100), ["http://k1:1"])], KEEP)
    assert preferred_workers(held, {"tcp://w2:2": "h2"}) == ()
    assert preferred_workers(held, {}) == ()
    assert not HostMap().active and not HostMap(KEEP, {}).active and HostMap(KEEP, WORKERS).active


def test_ties_go_to_the_first_label_so_the_choice_is_stable() -> None:
    held = {"h2": 10, "h1": 10}
    assert preferred_workers(held, WORKERS) == ("tcp://w1:1",)


def test_block_servers_are_the_first_copies_of_the_probe_order() -> None:
    services = [Service(f"id{i}", f"http://k{i}:1") for i in range(5)]
    md5 = loc(7, 1).md5
    assert block_servers(md5, services, 2) == probe_order(md5, services)[:2]
    assert len(block_servers(md5, services, 0)) == 1


def test_the_host_map_file() -> None:
    text = '[keep]\n"http://k1:1/" = "h1"\n[workers]\n"tcp://w1:1" = "h1"\n0 = "h2"\n'
    parsed = parse_host_map(text)
    assert parsed.keep == {"http://k1:1": "h1"}
    assert parsed.workers == {"tcp://w1:1": "h1", "0": "h2"}
    for bad, said in [
        ("[keep\n", "not TOML"),
        ("[racks]\n", "unknown table"),
        ('[keep]\n"u" = "a b"\n', "host label"),
        ('[keep]\n"u" = 3\n', "host label"),
        ("keep = 3\n", "must be a table"),
    ]:
        with pytest.raises(UsageError, match=said):
            parse_host_map(bad)


def _stream_tree(root: Path, count: int, size: int) -> int:
    rng = random.Random(5)
    for i in range(count):
        (root / f"s{i:02d}").mkdir(parents=True)
        (root / f"s{i:02d}" / "data").write_bytes(rng.randbytes(size))
    return count * size


@pytest.mark.slow
@pytest.mark.timeout(300)  # two controllers, 2 x 21 steps on a real Dask cluster
def test_steps_run_beside_their_input_and_say_so(
    tmp_path: Path, dask_cluster: str, run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    total = _stream_tree(tmp_path / "in", 20, 100_000)
    jobs: dict[bool, dict[str, Any]] = {}
    with keep_pool(tmp_path / "keep", 2) as pool:
        # One machine, two "hosts": each keep server and each worker labelled.
        hosts = HostMap(
            {pool.servers[0].url: "h1", pool.servers[1].url: "h2"}, {"0": "h1", "1": "h2"}
        )
        for labelled in (True, False):
            db = tmp_path / f"controller-{labelled}.db"
            with controller(db, pool, replication=1, host_map=hosts if labelled else None) as c:
                c.state.start_jobs(c.url, tmp_path / f"jobs-{labelled}", f"dask:{dask_cluster}")
                monkeypatch.setenv("WH_URL", c.url)
                monkeypatch.setenv("WH_TOKEN", c.user("alice"))
                monkeypatch.setenv("WH_REPLICATION", "1")  # each block on one host only
                pdh = run("put", str(tmp_path / "in")).output.strip().splitlines()[-1]
                job = run("job", "submit", "builtin:copy", "--input", pdh, "--wait", "--json")
                out = job.output
                record = json.loads(out[out.index("{") : out.rindex("}") + 1])
                shown = run("job", "show", str(record["id"]), "--json").output
                jobs[labelled] = json.loads(shown[shown.index("{") : shown.rindex("}") + 1])
                jobs[labelled]["text"] = run("job", "show", str(record["id"])).output
    placed, plain = jobs[True], jobs[False]
    assert placed["state"] == plain["state"] == "complete"
    assert placed["output_pdh"] == plain["output_pdh"]
    assert placed["input_bytes"] == total
    assert placed["local_bytes"] >= 0.9 * total, placed
    assert placed["local_fraction"] >= 0.9 and "local:" in placed["text"]
    # Without labels nothing changes, and nothing is claimed.
    assert (plain["input_bytes"], plain["local_bytes"], plain["local_fraction"]) == (0, 0, None)
    assert "local:" not in plain["text"]
