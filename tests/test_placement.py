"""The placement decision, a pure function (docs/clusters.md, "Placement")."""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import controller, keep_pool
from conftest import Runner
from jobs_helpers import local_dask
from warehouse import catalog
from warehouse.blocks import Locator
from warehouse.clusters.placement import (
    HostMap,
    block_servers,
    bytes_by_host,
    local_fraction,
    parse_host_map,
    preferred_workers,
    slurm_nodes,
    slurm_unpin,
)
from warehouse.errors import UsageError
from warehouse.jobs import slurmexec
from warehouse.jobs.executors import Finished, Launch
from warehouse.jobs.model import Resources
from warehouse.remote.probe import Service, hinted_copies, own_host_first, probe_order

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


def test_slurm_nodes_only_where_the_data_is_and_cpus_are_idle() -> None:
    nodes = {"n1": "h1", "n2": "h2", "n3": "h2"}
    held = {"h1": 100, "h2": 300}
    assert slurm_nodes(held, nodes, {"n1": 4, "n2": 1, "n3": 2}, 1) == ("n3", "n2")  # idlest
    assert slurm_nodes(held, nodes, {"n1": 4, "n2": 1, "n3": 2}, 2) == ("n3",)
    # Busy or down (absent from the idle table): no node asked for, Slurm places it.
    assert slurm_nodes(held, nodes, {"n1": 4, "n2": 0}, 1) == ()
    assert slurm_nodes(held, nodes, {}, 1) == ()
    assert slurm_nodes({"elsewhere": 5}, nodes, {"n1": 4}, 1) == ()
    assert slurm_nodes(held, {}, {"n1": 4}, 1) == ()


def test_pinned_slurm_jobs_still_waiting_are_unpinned_after_the_grace() -> None:
    pinned = {"10": 100.0, "11": 100.0, "12": 104.0, "13": 100.0}
    states = {"10": "PENDING", "11": "RUNNING", "12": "PENDING"}  # 13: unknown
    assert slurm_unpin(pinned, states, 105.0, 5.0) == ["10"]
    assert slurm_unpin(pinned, states, 109.0, 5.0) == ["10", "12"]
    assert slurm_unpin({}, states, 109.0, 5.0) == []


def test_a_read_goes_first_to_a_copy_on_its_own_host() -> None:
    a, b = Service("a", "http://a", "h1"), Service("b", "http://b", "h2")
    c = Service("c", "http://c")
    order = [a, b, c]
    assert own_host_first(order, 2, "h2") == [b, a, c]
    assert own_host_first(order, 2, "h1") == order
    # Only the servers holding copies count: c would be, but holds none.
    c2 = Service("c", "http://c", "h3")
    assert own_host_first([a, b, c2], 2, "h3") == [a, b, c2]
    assert own_host_first([a, b, c2], 3, "h3") == [c2, a, b]
    assert own_host_first(order, 2, "") == order  # no label: the probe order
    assert hinted_copies("03@east", "east") == 2
    assert hinted_copies("01@east", "west") is None
    assert hinted_copies("@east", "east") is None and hinted_copies(None, "east") is None
    assert hinted_copies("zz@east", "east") is None


def _stream_tree(root: Path, count: int, size: int) -> int:
    rng = random.Random(5)
    for i in range(count):
        (root / f"s{i:02d}").mkdir(parents=True)
        (root / f"s{i:02d}" / "data").write_bytes(rng.randbytes(size))
    return count * size


@pytest.fixture
def dask_unstolen() -> Iterator[str]:
    """A real Dask cluster of 2 workers that does not steal work. A step's
    host is a preference (``allow_other_workers``), which Dask's work
    stealing overrides when the preferred worker is busier than another:
    under a loaded machine, how often it does is the machine's doing, not
    the placement's, which is what is tested here."""
    import dask

    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        yield from local_dask(2)


@pytest.mark.slow
@pytest.mark.timeout(300)  # two controllers, 2 x 21 steps on a real Dask cluster
def test_steps_run_beside_their_input_and_say_so(
    tmp_path: Path, dask_unstolen: str, run: Runner, monkeypatch: pytest.MonkeyPatch
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
                c.state.start_jobs(c.url, tmp_path / f"jobs-{labelled}", f"dask:{dask_unstolen}")
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


def _reads(log: Path, blocks: set[str]) -> set[str]:
    """The blocks of ``blocks`` read (GET, 200) from the server that wrote this log."""
    found = re.findall(r" GET /([0-9a-f]{32})\S* 200 ", log.read_text())
    return {md5 for md5 in found if md5 in blocks}


def _placed_streams(root: Path, services: list[Service], size: int) -> dict[str, list[str]]:
    """Streams whose block's two copies are, in probe order: on h1's server first
    ("first"), on it second ("second": only a read steered to the own host goes
    there first), or not on it ("none")."""
    rng = random.Random(7)
    want = {"first": 3, "second": 3, "none": 2}
    made: dict[str, list[str]] = {k: [] for k in want}
    while any(len(made[k]) < n for k, n in want.items()):
        data = rng.randbytes(size)
        md5 = hashlib.md5(data).hexdigest()
        ids = [x.id for x in block_servers(md5, services, 2)]
        kind = (
            "first" if ids[0] == services[0].id else "second" if services[0].id in ids else "none"
        )
        if len(made[kind]) < want[kind]:
            i = sum(len(v) for v in made.values())
            (root / f"s{i:02d}").mkdir(parents=True)
            (root / f"s{i:02d}" / "data").write_bytes(data)
            made[kind].append(md5)
    return made


def _slurm_jobs(where: Path) -> dict[str, dict[str, str]]:
    """Slurm's record of our jobs (still known for MinJobAge), by job name."""
    out = subprocess.run(
        ["scontrol", "show", "job", "-o"], capture_output=True, text=True, check=True
    ).stdout
    jobs = {}
    for line in out.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if fields.get("WorkDir", "").startswith(str(where)):
            jobs[fields["JobName"]] = fields
    return jobs


@pytest.mark.slow
@pytest.mark.timeout(300)  # 9 steps on the real one-node Slurm
def test_slurm_steps_prefer_the_node_beside_their_input_and_read_its_copy(
    tmp_path: Path, slurm_cluster: str, run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pinned batch is never unpinned here: what Slurm recorded stays as submitted.
    monkeypatch.setattr(slurmexec, "PIN_GRACE", 3600.0)
    node = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    size = 50_000
    logs = [tmp_path / f"access-{i}.log" for i in range(3)]
    with keep_pool(tmp_path / "keep", 0) as pool:
        for i, log in enumerate(logs):  # each server logs its requests to its own file
            pool.options = ("--access-log", str(log))
            pool.add(i)
        # One machine, three "hosts"; the Slurm node is on h1 with the first keep server.
        urls = [k.url for k in pool.servers]
        hosts = HostMap({u: f"h{i + 1}" for i, u in enumerate(urls)}, {node: "h1"})
        with controller(tmp_path / "controller.db", pool, replication=2, host_map=hosts) as c:
            c.state.start_jobs(c.url, tmp_path / "jobs", "slurm")
            registered = {s.url: s.id for s in catalog.list_keep_services(c.state.engine)}
            services = [Service(registered[u], u) for u in urls]
            streams = _placed_streams(tmp_path / "in", services, size)
            monkeypatch.setenv("WH_URL", c.url)
            monkeypatch.setenv("WH_TOKEN", c.user("alice"))
            # Not $WH_REPLICATION: steps would inherit it.
            put = run("put", "--replication", "2", str(tmp_path / "in"))
            pdh = put.output.strip().splitlines()[-1]
            submitted = run("job", "submit", "builtin:copy", "--input", pdh, "--wait", "--json")
            out = submitted.output
            record = json.loads(out[out.index("{") : out.rindex("}") + 1])
            shown = run("job", "show", str(record["id"]), "--json").output
            job = json.loads(shown[shown.index("{") : shown.rindex("}") + 1])
            text = run("job", "show", str(record["id"])).output
            slurm = _slurm_jobs(tmp_path / "jobs")
    assert job["state"] == "complete"
    order = [*streams["first"], *streams["second"], *streams["none"]]
    on_h1 = set(streams["first"] + streams["second"])
    # Only batches of steps reading a stream with a copy on h1 ask for the node
    # (when its CPUs are idle at submission: at least the first such batch).
    pinned = {name for name, f in slurm.items() if f.get("ReqNodeList") == node}
    assert pinned, slurm
    for name in pinned:
        assert order[int(name.rsplit("-", 1)[1]) - 1] in on_h1, name  # step i + 1: stream i
    # Every step ran on the node (h1): the local share is that of streams on h1.
    assert (job["input_bytes"], job["local_bytes"]) == (len(order) * size, len(on_h1) * size)
    assert job["local_fraction"] == 0.75 and "local:    75%" in text, text
    # Each block with a copy on h1 was read there, even where h1's server is
    # second in the probe order; the others in probe order, from h2 or h3.
    reads = [_reads(log, set(order)) for log in logs]
    assert reads[0] == on_h1, reads
    assert reads[1] | reads[2] == set(streams["none"]), reads


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_slurm_batch_waiting_for_its_node_is_unpinned(tmp_path: Path, slurm_cluster: str) -> None:
    node, cpus = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %c"], capture_output=True, text=True, check=True
    ).stdout.split()[:2]
    ex = slurmexec.SlurmExecutor(owner=str(tmp_path), worker_hosts={node: "h1"}, pin_grace=0.5)
    blocker = ""
    try:
        # The node busy with all its CPUs: a batch asking for it waits.
        blocker = subprocess.run(
            ["sbatch", "--parsable", f"--cpus-per-task={cpus}", "--output=/dev/null"],
            input="#!/bin/sh\nsleep 60\n",
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        launch = Launch(1, 1, 1, ("true",), {}, str(tmp_path / "scratch"), Resources(1, 0))
        ex._submit_batch([launch], Resources(1, 0), (node,))
        (jid,) = ex._batches
        assert _slurm_job(jid)["ReqNodeList"] == node
        deadline = time.monotonic() + 60
        while ex._batches[jid].pinned and time.monotonic() < deadline:
            ex.poll(0.2)
        job = _slurm_job(jid)
        assert (job["JobState"], job["ReqNodeList"]) == ("PENDING", "(null)"), job
        subprocess.run(["scancel", blocker], check=True)
        done: list[Finished] = []
        while not done and time.monotonic() < deadline:
            done = ex.poll(0.5)
        assert [(d.step, d.exit_status, d.worker) for d in done] == [(1, 0, node)]
    finally:
        if blocker:
            subprocess.run(["scancel", blocker], check=False)
        ex.close()


def _slurm_job(jid: str) -> dict[str, str]:
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", jid], capture_output=True, text=True, check=True
    ).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))
