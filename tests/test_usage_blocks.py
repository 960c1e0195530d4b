"""Blocks a step read, by where they came from (docs/usage.md): a local
volume, an S3 volume, keep servers, and the cache for a block read again.

Each step reads every file of its input twice. What it must have read is
counted here from the input's manifest: a file's run of pieces in one block
is one read of that block; the first read of a block comes from the store,
each later one from the RAM cache. ``wh usage --json`` must give exactly
that.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from cluster import Controller, KeepPool, controller, keep_pool
from conftest import Runner
from jobs_helpers import put_function, run_job
from s3_helpers import s3_server, s3_spec, s3_specs  # noqa: F401  (fixtures)
from warehouse import jobs
from warehouse.blocks.sources import SOURCES
from warehouse.catalog.schema import collections
from warehouse.cli.web import sign_in_token
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError
from warehouse.jobs.protocol import MAX_READ_COUNT, parse_report
from warehouse.manifest import Manifest
from warehouse.remote.warehouse import RemoteWarehouse
from warehouse.server.serving import ServerThread
from warehouse.usage.model import BLOCK_SOURCES
from warehouse.web import create_web_app

# Every file of the input read whole, twice over.
_TWICE = """
from warehouse import step

reader = step.reader()
for _ in range(2):
    for path in sorted(reader.files):
        reader.read_file(path)
"""


def _input(root: Path) -> Path:
    """Files of a few sizes, one of them empty, two directories."""
    (root / "d").mkdir(parents=True)
    for i, size in enumerate([0, 1, 5000, 70000, 300000]):
        (root / ("d" if i % 2 else "") / f"f{i}.bin").write_bytes(os.urandom(size))
    return root


def _expected(
    manifest: Manifest, source: str, passes: int = 2
) -> tuple[dict[str, int], dict[str, int]]:
    """(blocks, bytes) per source that ``_TWICE`` reads of ``manifest``'s
    blocks (``passes``: over every file, in order)."""
    blocks = dict.fromkeys(SOURCES, 0)
    sizes = dict.fromkeys(SOURCES, 0)
    seen: set[str] = set()
    files = manifest.files()
    for _ in range(passes):
        for path in sorted(files):
            last = None
            for piece in files[path].pieces:
                if piece.locator.key == last:
                    continue  # the reader's consecutive pieces in one block: one read
                last = piece.locator.key
                where = "cache" if last in seen else source
                seen.add(last)
                blocks[where] += 1
                sizes[where] += piece.locator.size
    return blocks, sizes


def _figures(found: dict[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    return (
        {s: found[f"blocks_{s}"] for s in SOURCES},
        {s: found[f"block_bytes_{s}"] for s in SOURCES},
    )


def _manifest_blocks(wh: EmbeddedWarehouse, pdh: str) -> list[int]:
    """The sizes of the blocks the catalog keeps ``pdh``'s manifest text in
    (an embedded step reads them to open its input)."""
    with wh.engine.connect() as conn:
        text = conn.execute(
            sa.select(collections.c.manifest_blocks).where(collections.c.pdh == pdh)
        ).scalar_one()
    return [int(loc.split("+")[1]) for loc in text.split()]


def _embedded_case(
    wh: EmbeddedWarehouse, tmp_path: Path, run: Runner, source: str, manifest_from: str
) -> None:
    pdh = wh.put([_input(tmp_path / "in")]).pdh
    manifest = wh.manifest(pdh)
    fn = put_function(wh, tmp_path, "twice.py", _TWICE)
    job = run_job(wh, fn, pdh)
    assert job.state == "complete", job.error
    blocks, sizes = _expected(manifest, source)
    # Opening its input, the step read the manifest's blocks once.
    held = _manifest_blocks(wh, pdh)
    blocks[manifest_from] += len(held)
    sizes[manifest_from] += sum(held)
    assert blocks[source] >= 2 and blocks["cache"] >= 2  # the test tells them apart
    (step,) = jobs.list_steps(wh.engine, job.id)
    assert _figures(step.as_dict()) == (blocks, sizes)
    total = json.loads(run("usage", "--job", str(job.id), "--json").stdout)["total"]
    assert _figures(total) == (blocks, sizes)
    assert total["input_bytes"] == 2 * sum(e.size for e in manifest.files().values())
    # The job's page shows the same.
    with (
        ServerThread(create_web_app(wh)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        signed = client.post("/web/signin", data={"token": sign_in_token(wh), "next": "/"})
        assert signed.status_code == 303, signed.text
        page = client.get(f"/web/jobs/{job.id}").text
    shown = dict(re.findall(r'<span class="usage-blocks-([a-z0-9]+)">([0-9]+)</span>', page))
    assert {s: int(n) for s, n in shown.items()} == blocks


def test_an_embedded_step_reads_a_local_volume_then_its_cache(
    wh: EmbeddedWarehouse, tmp_path: Path, run: Runner
) -> None:
    # A local volume has no node cache in front (its blocks are on a local disk).
    _embedded_case(wh, tmp_path, run, "local", manifest_from="local")


def test_an_embedded_step_reads_an_s3_volume_then_its_cache(
    s3_spec: str,  # noqa: F811
    tmp_path: Path,
    run: Runner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = tmp_path / "s3-home"
    monkeypatch.setenv("WH_HOME", str(home))
    monkeypatch.setenv("WH_VOLUME", s3_spec)
    with EmbeddedWarehouse(home) as wh:
        # The manager (this process, this node) opened the input before the
        # step: the manifest's blocks were in the node's disk cache.
        _embedded_case(wh, tmp_path, run, "s3", manifest_from="cache")


@pytest.fixture
def ctl(
    tmp_path: Path, keep_servers: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=2)
        monkeypatch.setenv("WH_URL", c.url)
        monkeypatch.setenv("WH_TOKEN", c.user("alice"))
        monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
        yield c


def test_a_step_through_a_controller_reads_keep_servers_then_its_cache(
    ctl: Controller, run: Runner, tmp_path: Path
) -> None:
    fn = tmp_path / "fn"
    fn.mkdir()
    (fn / "twice.py").write_text(_TWICE)
    fn_pdh = run("put", str(fn)).output.split()[-1]
    key = run("put", str(_input(tmp_path / "in"))).output.split()[-1]
    out = run("job", "submit", f"{fn_pdh}/twice.py", "--input", key, "--wait", "--json").output
    job = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert job["state"] == "complete", job
    with RemoteWarehouse(ctl.url, os.environ["WH_TOKEN"]) as remote:
        manifest = remote.manifest(key)
    # The manifest comes from the controller as text: no block of it is read.
    blocks, sizes = _expected(manifest, "keep")
    assert blocks["keep"] >= 2 and blocks["cache"] >= 2
    total = json.loads(run("usage", "--job", str(job["id"]), "--json").stdout)["total"]
    assert _figures(total) == (blocks, sizes)


def test_blocks_of_another_cluster_count_as_cluster(tmp_path: Path) -> None:
    # Read by a process of its own, as a step would read them (docs/clusters.md):
    # the controllers here run in this process, and read blocks too.
    with (
        keep_pool(tmp_path / "east-keep", 2) as east_pool,
        keep_pool(tmp_path / "west-keep", 2) as west_pool,
        controller(tmp_path / "east.db", east_pool, cluster="east") as east,
        controller(tmp_path / "west.db", west_pool, cluster="west") as west,
    ):
        east_token, west_token = east.user("alice"), west.user("alice")
        with RemoteWarehouse(east.url, east_token) as on_east:
            pdh = on_east.put([_input(tmp_path / "in")]).pdh
            manifest = on_east.manifest(pdh)
        done = subprocess.run(
            [sys.executable, "-c", _READ_ONCE, west.url, west_token, east.url, east_token, pdh],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    read_blocks, read_bytes = json.loads(done.stdout)
    assert all(loc.hint("K") == "@east" for loc in manifest.blocks())
    blocks, sizes = _expected(manifest, "cluster", passes=1)
    assert blocks["cluster"] >= 2
    assert (read_blocks, read_bytes) == (blocks, sizes)


# Every file read once through west, which knows east: prints (blocks, bytes) read.
_READ_ONCE = """
import json, sys
from warehouse.blocks.sources import totals
from warehouse.remote.warehouse import RemoteWarehouse
from warehouse.settings import OtherCluster

west, west_token, east, east_token, pdh = sys.argv[1:]
others = {"east": OtherCluster("east", east, east_token)}
with RemoteWarehouse(west, west_token, clusters=others) as wh:
    reader = wh.reader(pdh)
    for path in sorted(reader.files):
        reader.read_file(path)
print(json.dumps(totals()))
"""


def test_the_block_sources_are_the_same_in_each_layer() -> None:
    assert BLOCK_SOURCES == SOURCES


@pytest.mark.parametrize(
    "line",
    [
        '{"op": "reads", "input_bytes": 1, "blocks": {"disk": 1}}',
        '{"op": "reads", "input_bytes": 1, "blocks": {"cache": -1}}',
        '{"op": "reads", "input_bytes": 1, "blocks": {"cache": true}}',
        '{"op": "reads", "input_bytes": 1, "blocks": {"cache": 1.5}}',
        '{"op": "reads", "input_bytes": 1, "blocks": [1]}',
        '{"op": "reads", "input_bytes": 1, "block_bytes": {"s3": "10"}}',
        f'{{"op": "reads", "input_bytes": 1, "blocks": {{"keep": {MAX_READ_COUNT + 1}}}}}',
    ],
)
def test_a_bad_blocks_report_is_refused(line: str) -> None:
    with pytest.raises(UsageError, match="result file line 1"):
        parse_report(line)


def test_blocks_reported_twice_add_up() -> None:
    line = '{"op": "reads", "input_bytes": 5, "blocks": {"cache": 2}, "block_bytes": {"cache": 9}}'
    report = parse_report(line + "\n" + line.replace('"cache": 2', '"cache": 1, "s3": 3'))
    assert report.input_bytes == 10
    assert report.blocks == {"cache": 3, "local": 0, "s3": 3, "keep": 0, "cluster": 0}
    assert report.block_bytes == {"cache": 18, "local": 0, "s3": 0, "keep": 0, "cluster": 0}
    half = f'{{"op": "reads", "input_bytes": 0, "blocks": {{"s3": {MAX_READ_COUNT}}}}}'
    with pytest.raises(UsageError, match="over"):
        parse_report(half + "\n" + half)
