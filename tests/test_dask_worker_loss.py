"""A Dask worker killed mid-step: the job still completes, with the local executor's output."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs_helpers import local_dask, put_function, run_job
from warehouse.embedded import EmbeddedWarehouse

# The first run of step s1 kills the worker process running it (its parent).
KILLER = """import os, signal, time
from pathlib import Path
from warehouse import step

if step.number() == 0:
    step.queue(1, "s0", "s1", "s2")
else:
    mark = Path(os.environ["WH_HOME"]).parent / "killed"
    if step.step_input() == "s1" and os.environ.get("KILL_WORKER") and not mark.exists():
        mark.write_text("once")
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(0.5)  # still running as its worker dies
        raise SystemExit(1)
    out = step.StreamWriter("./" + step.step_input())
    out.add_file("out.txt", [step.step_input().encode() * 100])
    step.output(out.finish())
"""


@pytest.fixture
def own_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A cluster of its own: this test kills one of its workers (the nanny starts another)."""
    monkeypatch.setenv("KILL_WORKER", "1")
    yield from local_dask(1)


def test_a_worker_killed_mid_step_retries_and_gives_the_local_output(
    wh: EmbeddedWarehouse, tmp_path: Path, own_cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x").write_text("x")
    key = wh.put([tmp_path / "in"]).pdh
    fn = put_function(wh, tmp_path, "killer.py", KILLER)
    dask = run_job(wh, fn, key, executor=f"dask:{own_cluster}", reuse=False)
    assert (wh.home.parent / "killed").exists()  # the worker really was killed
    assert dask.state == "complete", dask.error
    monkeypatch.delenv("KILL_WORKER")
    local = run_job(wh, fn, key, executor="local", reuse=False)
    assert local.state == "complete", local.error
    assert dask.output_pdh == local.output_pdh
