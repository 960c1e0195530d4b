"""What a run does next, from its nodes' states (pure, like ``jobs.model``).

A node is ``waiting`` until every job it reads is complete, then it is
submitted (``queued``/``running`` follow its job), and ends ``complete``,
``failed``, ``cancelled``, or ``skipped`` when a job it reads did not
complete. The run is complete when every node is; it fails (or is
cancelled) once nothing can move any more and some node did not complete.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from warehouse.workflows.spec import JobSpec, Ref, Workflow

__all__ = [
    "ACTIVE_NODE",
    "DONE_NODE",
    "Decision",
    "NodeState",
    "decide",
    "job_input",
    "job_params",
    "may_move",
    "node_state_of_job",
    "readers_of",
]

ACTIVE_NODE = frozenset({"waiting", "queued", "running"})
DONE_NODE = frozenset({"complete", "failed", "cancelled", "skipped"})
_NOT_COMPLETE = frozenset({"failed", "cancelled", "skipped"})


@dataclass(frozen=True, slots=True)
class NodeState:
    state: str
    output_pdh: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    submit: list[str]  # waiting nodes whose inputs are all complete, in file order
    skip: list[str]  # waiting nodes reading a job that did not complete
    run_state: str  # running, complete, failed or cancelled


def decide(wf: Workflow, nodes: Mapping[str, NodeState]) -> Decision:
    submit: list[str] = []
    states = {name: nodes[name].state for name in wf.jobs}
    # Skips spread from every job that did not complete to its waiting readers,
    # and on from them: one pass over the edges, whatever the file's order (a
    # pass over the file per level was quadratic in a chain listed backwards).
    readers = readers_of(wf)
    spread = [name for name, state in states.items() if state in _NOT_COMPLETE]
    skipped: set[str] = set()
    while spread:
        for reader in readers[spread.pop()]:
            if states[reader] == "waiting":
                states[reader] = "skipped"
                skipped.add(reader)
                spread.append(reader)
    skip = [name for name in wf.jobs if name in skipped]
    for name, job in wf.jobs.items():
        if states[name] == "waiting" and all(states[d] == "complete" for d in job.depends_on):
            submit.append(name)
    values = set(states.values())
    if values == {"complete"}:
        run_state = "complete"
    elif values & ACTIVE_NODE:
        run_state = "running"
    elif "failed" in values or ("skipped" in values and "cancelled" not in values):
        run_state = "failed"
    else:
        run_state = "cancelled"
    return Decision(submit, skip, run_state)


def readers_of(wf: Workflow) -> dict[str, list[str]]:
    """For each job, the jobs that read it."""
    readers: dict[str, list[str]] = {name: [] for name in wf.jobs}
    for name, job in wf.jobs.items():
        for d in job.depends_on:
            readers[d].append(name)
    return readers


def may_move(
    wf: Workflow,
    states: Mapping[str, str],
    changed: Iterable[str],
    readers: Mapping[str, list[str]],
) -> bool:
    """Whether ``decide`` may now submit or skip a node, or end the run, after
    only the nodes ``changed`` changed (each to its state in ``states``): a
    reader of one of them has all its inputs complete, one did not complete,
    or no node is active any more. Cheaper than ``decide`` when a few of many
    nodes changed (``readers``: ``readers_of(wf)``)."""
    for name in changed:
        if states[name] in _NOT_COMPLETE:
            return True
        for reader in readers[name]:
            deps = wf.jobs[reader].depends_on
            if states[reader] == "waiting" and all(states[d] == "complete" for d in deps):
                return True
    return not any(state in ACTIVE_NODE for state in states.values())


def _value(ref: Ref, inputs: Mapping[str, Any], outputs: Mapping[str, str]) -> Any:
    return outputs[ref.name] if ref.name in outputs else inputs[ref.name]


def job_input(
    job: JobSpec, inputs: Mapping[str, Any], outputs: Mapping[str, str]
) -> str | list[tuple[str, str]]:
    """The key a job reads, or the (dir, key) parts of its combined input."""
    if isinstance(job.input, dict):
        return [
            (d, str(_value(k, inputs, outputs)) if isinstance(k, Ref) else k)
            for d, k in job.input.items()
        ]
    if isinstance(job.input, Ref):
        return str(_value(job.input, inputs, outputs))
    return job.input


def job_params(job: JobSpec, inputs: Mapping[str, Any], outputs: Mapping[str, str]) -> Any:
    """The job's parameters with every reference replaced by its value."""

    def sub(value: Any) -> Any:
        if isinstance(value, Ref):
            return _value(value, inputs, outputs)
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v) for v in value]
        return value

    return sub(job.params)


def node_state_of_job(job_state: str) -> str:
    """A node's state while it follows its job (a paused job counts as running)."""
    return "running" if job_state == "paused" else job_state
