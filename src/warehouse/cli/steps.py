"""``wh step``: what a running step uses to report back (DESIGN §5.2).

A step's reports are lines appended to its result file ($WH_RESULT), which
the manager reads when the step ends: no catalog and no server are needed,
so these commands start quickly.
"""

from __future__ import annotations

import os
from typing import BinaryIO

import click

from warehouse.errors import UsageError
from warehouse.jobs.protocol import append_record, check_queue
from warehouse.manifest import Manifest

__all__ = ["step"]


@click.group()
def step() -> None:
    """Report from inside a running step (uses $WH_RESULT)."""


def _result_file() -> str:
    path = os.environ.get("WH_RESULT")
    if not path:
        raise UsageError("WH_RESULT is not set: this is not running as a step of a job")
    return path


@step.command(name="queue")
@click.option("--level", type=int, required=True, help="Level of the new steps.")
@click.argument("inputs", nargs=-1)
def step_queue(level: int, inputs: tuple[str, ...]) -> None:
    """Queue one step at LEVEL per INPUT string (one step with no input if none)."""
    path = _result_file()
    for text in inputs or ("",):
        check_queue(level, text)
    for text in inputs or ("",):
        append_record(path, {"op": "queue", "level": level, "input": text})


@step.command(name="output")
@click.argument("manifest", type=click.File("rb"), default="-")
@click.option("--intermediate", is_flag=True, help="Pass to later steps, not the job output.")
def step_output(manifest: BinaryIO, intermediate: bool) -> None:
    """Report manifest text (FILE, or '-' for standard input) as this step's output."""
    text = Manifest.parse(manifest.read()).format()
    op = "intermediate" if intermediate else "output"
    append_record(_result_file(), {"op": op, "manifest": text})
