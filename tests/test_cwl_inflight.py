"""A CWL run keeps more tool invocations in flight than there are cores: the
job manager runs as many steps as the cores hold and the others wait as
queued jobs, so the runner puts the next jobs together while steps run
(docs/cwl.md, "How a run maps to jobs")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cwl_helpers import cwltool_installed  # noqa: F401 (autouse fixture)
from waiting import wait_for

BIN = Path(sys.executable).parent
_PATIENCE = 180  # a guard against a hang: runners start slowly under load

# Each invocation waits until the gate file exists: none can finish first.
GATED = """\
cwlVersion: v1.2
class: Workflow
requirements: {ScatterFeatureRequirement: {}}
inputs:
  gate: string
  ks: int[]
outputs:
  outs: {type: "File[]", outputSource: wait/out}
steps:
  wait:
    run:
      class: CommandLineTool
      baseCommand: [sh, -c, 'while [ ! -e "$0" ]; do sleep 0.05; done; echo "$1"']
      inputs:
        gate: {type: string, inputBinding: {position: 1}}
        k: {type: int, inputBinding: {position: 2}}
      stdout: out.txt
      outputs:
        out: {type: stdout}
    scatter: k
    in: {gate: gate, k: ks}
    out: [out]
"""


def _cores() -> int:
    return max(os.cpu_count() or 1, len(os.sched_getaffinity(0)))


@pytest.mark.timeout(400)
def test_more_invocations_are_submitted_than_there_are_cores(home: Path, tmp_path: Path) -> None:
    n = 2 * _cores() + 1
    (tmp_path / "gated.cwl").write_text(GATED)
    gate = tmp_path / "gate"
    job = {"gate": str(gate), "ks": list(range(n))}
    (tmp_path / "job.json").write_text(json.dumps(job))
    env = {k: v for k, v in os.environ.items() if k not in ("WH_URL", "WH_TOKEN")}
    env["WH_HOME"] = str(home)
    wh_bin = str(BIN / "wh")

    def submitted() -> int:
        show = [wh_bin, "workflow", "show", "1", "--json"]
        shown = subprocess.run(show, env=env, capture_output=True, text=True)
        return len(json.loads(shown.stdout)["nodes"]) if shown.returncode == 0 else 0

    with subprocess.Popen(
        [wh_bin, "cwl", "run", "--json", "gated.cwl", "job.json"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as runner:
        try:
            # Every invocation is a job (a node of the run) while none has finished:
            # with one in flight per core, no more than the cores' count would be.
            wait_for(lambda: submitted() >= n, f"{n} jobs submitted at once", _PATIENCE, 0.2)
            gate.touch()
            out, err = runner.communicate(timeout=_PATIENCE)
        finally:
            gate.touch()  # a failed wait leaves no runner waiting on it
    assert runner.returncode == 0, err
    assert f"wh cwl: {n} jobs: {n} ran, 0 reused" in err
    outs = json.loads(out)["outs"]
    assert [o["size"] for o in outs] == [len(f"{k}\n") for k in range(n)]
