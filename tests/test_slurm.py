"""The Slurm executor when Slurm misbehaves (docs/slurm.md), on the real test cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from jobs_helpers import put_function, run_job
from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs import slurmexec

STEP = "#!/bin/sh\necho done\n"


def refusing_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusals: int) -> Path:
    """Put an sbatch first on PATH that refuses its first REFUSALS calls as a busy
    slurmctld does, then hands over to the real one; returns the file counting calls."""
    real = shutil.which("sbatch")
    assert real, "the Slurm cluster fixture puts sbatch on PATH"
    calls = tmp_path / "sbatch-calls"
    calls.write_text("")
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sbatch").write_text(
        "#!/bin/sh\n"
        f"echo x >> {calls}\n"
        f'if [ "$(wc -l < {calls})" -le {refusals} ]; then\n'
        '    echo "sbatch: error: Batch job submission failed: Socket timed out" >&2\n'
        "    exit 1\n"
        "fi\n"
        f'exec {real} "$@"\n'
    )
    (shim / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    return calls


@pytest.mark.slow
def test_a_brief_sbatch_refusal_is_waited_out_without_spending_attempts(
    wh: EmbeddedWarehouse,
    tmp_path: Path,
    slurm_cluster: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = refusing_sbatch(tmp_path, monkeypatch, refusals=3)
    fn = put_function(wh, tmp_path, "ok.sh", STEP)
    key = wh.put([put_input(tmp_path)]).pdh
    job = run_job(wh, fn, key, executor="slurm", max_attempts=2)
    assert (job.state, job.failed_attempts) == ("complete", 0)
    assert len(calls.read_text().splitlines()) == 4  # three refused, then submitted


@pytest.mark.slow
def test_sbatch_refusing_for_good_fails_the_job_saying_so(
    wh: EmbeddedWarehouse,
    tmp_path: Path,
    slurm_cluster: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slurmexec, "SUBMIT_PATIENCE", 1.0)
    refusing_sbatch(tmp_path, monkeypatch, refusals=1_000_000)
    fn = put_function(wh, tmp_path, "ok.sh", STEP)
    key = wh.put([put_input(tmp_path)]).pdh
    job = run_job(wh, fn, key, executor="slurm", max_attempts=2)
    assert (job.state, job.failed_attempts) == ("failed", 2)
    (step,) = jobs.list_steps(wh.engine, job.id)
    assert "sbatch refused it: sbatch failed: sbatch: error: Batch job submission failed" in (
        step.log_tail or ""
    )


def put_input(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    (d / "a.txt").write_text("a\n")
    return d


@pytest.mark.slow
def test_a_manager_for_one_partition_leaves_the_other_managers_jobs_alone(
    tmp_path: Path, slurm_cluster: str
) -> None:
    # A Slurm job as the plain `slurm` manager of this installation submits it.
    place = str(tmp_path / "jobs")
    jid = sbatch_sleeper(tmp_path, slurmexec.owner_tag(place))
    try:
        partition = squeue(jid)[1]
        # `slurm:PARTITION`'s manager starting: not its job, left running.
        slurmexec.SlurmExecutor(partition, owner=place).close()
        assert squeue(jid)[0] in ("PENDING", "RUNNING")
        # The plain `slurm` manager starting again: its own orphan, cancelled.
        slurmexec.SlurmExecutor(None, owner=place).close()
        assert squeue(jid)[0] not in ("PENDING", "RUNNING")
    finally:
        subprocess.run(["scancel", jid], check=False)


def sbatch_sleeper(tmp_path: Path, comment: str) -> str:
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--job-name=wh-1-0",
            f"--comment={comment}",
            f"--output={tmp_path}/slurm-%j.out",
            "--wrap=sleep 300",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().split(";")[0]


def squeue(jid: str) -> tuple[str, str]:
    """A job's state and partition (states of ended jobs too)."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", jid, "-o", "%T|%P"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    state, _, partition = out.partition("|")
    return state, partition


TWO_STEPS = """#!/bin/sh
# Step 0 queues two steps; the first sleeps on its first attempt, long
# enough for the test to end its Slurm job from outside.
set -e
if [ "$WH_STEP" = 0 ]; then wh step queue --level 1 slow quick; exit 0; fi
marker="$WH_HOME/../began-$WH_STEP"
if [ "$WH_STEP_INPUT" = slow ] && [ ! -e "$marker" ]; then touch "$marker"; sleep 120; fi
echo "$WH_STEP_INPUT ran"
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_step_its_batch_never_began_is_run_again_without_a_failed_attempt(
    wh: EmbeddedWarehouse, tmp_path: Path, slurm_cluster: str
) -> None:
    # One CPU-wide request for the whole partition: both level-1 steps share a batch.
    cpus = sum(
        int(c)
        for c in subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    fn = put_function(wh, tmp_path, "two.sh", TWO_STEPS)
    key = wh.put([put_input(tmp_path)]).pdh
    tag = slurmexec.owner_tag(str(wh.home.resolve()))
    ended: list[str] = []

    def end_the_batch_when_the_slow_step_runs() -> None:
        while not list(tmp_path.glob("began-*")):
            time.sleep(0.1)
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i|%k|%T"], capture_output=True, text=True, check=True
        ).stdout
        for line in out.splitlines():
            jid, comment, state = line.split("|")
            if comment == tag and state == "RUNNING":
                subprocess.run(["scancel", jid], check=True)
                ended.append(jid)

    helper = threading.Thread(target=end_the_batch_when_the_slow_step_runs, daemon=True)
    helper.start()
    job = run_job(wh, fn, key, executor="slurm", cpus=cpus, max_attempts=2)
    helper.join(timeout=60)
    assert len(ended) == 1
    assert job.state == "complete", job
    steps = {s.number: s for s in jobs.list_steps(wh.engine, job.id)}
    # The slow step was running: one failed attempt. The quick one never began.
    assert [(s.attempts, s.failures) for _, s in sorted(steps.items())][1:] == [(2, 1), (1, 0)]
