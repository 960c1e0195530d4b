"""The batch script a Slurm job of the executor runs (``slurmexec``), and
the ``sbatch`` command line that submits it.

The script runs its steps one after the other, each in its own directory
with only its own environment (sandboxed when asked), and appends a line to
the events file as each step starts and ends: the manager learns of a
step's end from that file, not from Slurm.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping

from warehouse.jobs.executors import Launch
from warehouse.jobs.model import Resources
from warehouse.jobs.sandbox import Sandbox

__all__ = ["host_case", "sbatch_argv", "step_lines"]

_NICE_LIMIT = 2147483645  # Slurm's bound on --nice


def host_case(worker_hosts: Mapping[str, str]) -> list[str]:
    """Script lines setting ``$wh_host`` to the node's host label."""
    if not worker_hosts:
        return ["wh_host="]
    arms = " ".join(
        f"{shlex.quote(node)}) wh_host={shlex.quote(label)};;"
        for node, label in sorted(worker_hosts.items())
    )
    return [f'case "${{SLURMD_NODENAME:-$HOSTNAME}}" in {arms} *) wh_host=;; esac']


def step_lines(
    launch: Launch,
    path: str,
    events: str,
    argv: list[str],
    env: Mapping[str, str],
    *,
    with_host: bool,
    sandbox: Sandbox | None,
) -> list[str]:
    """The script's lines running one step: ``argv`` in ``path``/tmp with
    ``env`` only (and ``WH_HOST`` if ``with_host``), its output in
    ``path``/log, its start and end noted in ``events`` (quoted already)."""
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    if with_host:
        assignments += ' "WH_HOST=$wh_host"'
    command = " ".join(shlex.quote(a) for a in argv)
    p = shlex.quote(path)
    tag = f"{launch.job} {launch.step} {launch.attempt}"
    # Not `env -i VAR=… cmd`: every local account may read a program's
    # arguments (/proc/PID/cmdline), and these hold the job's token.
    # The shell's own exports are no program's; the rest it stops
    # exporting (or, failing to list them, does not run the step), so
    # the step gets these variables only.
    clear = 'vs=$(compgen -e) && for v in $vs; do export -n "$v"; done'
    run = (
        f"(cd {p}/tmp && {{ {clear}; }} && export {assignments} && exec {command})"
        f" </dev/null >{p}/log 2>&1"
    )
    if sandbox is not None:
        # Never unsandboxed: without bwrap on this node the step fails.
        bwrap = shlex.quote(sandbox.bwrap)
        missing = f"wh: {sandbox.bwrap} (bubblewrap) is missing on node"
        run = (
            f"if [[ -x {bwrap} ]]; then {run}; else echo {shlex.quote(missing)} "
            f'"${{SLURMD_NODENAME:-$HOSTNAME}}: the step was not run" >{p}/log; '
            "(exit 126); fi"
        )
    return [
        f'echo "{tag} start" >>{events}',
        "s=$EPOCHREALTIME",
        run,
        "rc=$?",
        f'echo "{tag} $rc $s $EPOCHREALTIME ${{SLURMD_NODENAME:-$HOSTNAME}}" >>{events}',
        # A step killed by a signal (scancel, a time limit, the OOM
        # killer) ends the batch: its later steps, never begun, go
        # back to the queue rather than start in a dying job.
        'if (( rc > 128 )); then exit "$rc"; fi',
    ]


def sbatch_argv(
    launches: list[Launch],
    request: Resources,
    root: str,
    *,
    comment: str,
    partition_args: list[str],
    wall: float,
    nodes: tuple[str, ...] = (),
) -> list[str]:
    """The ``sbatch`` command submitting a batch of ``launches`` (its script
    on standard input), named after its first step and tagged ``comment``."""
    first = launches[0]
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name=wh-{first.job}-{first.step}",
        f"--comment={comment}",
        f"--cpus-per-task={max(request.cpus, 1)}",
        "--no-requeue",
        "--export=NONE",
        f"--nice={max(-_NICE_LIMIT, min(_NICE_LIMIT, -first.priority))}",
        f"--output={root}/slurm-%j.out",
        f"--chdir={root}",
        *partition_args,
    ]
    if request.memory > 0:
        argv.append(f"--mem={max(1, math.ceil(request.memory / 2**20))}M")
    if wall > 0:  # minutes, for the batch's steps one after the other
        argv.append(f"--time={max(1, math.ceil(wall * len(launches) / 60))}")
    if nodes:
        # One node: a job given a list of several would be given them all.
        argv.append(f"--nodelist={nodes[0]}")
    return argv
