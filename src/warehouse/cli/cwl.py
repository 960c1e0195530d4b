"""``wh cwl run``: a CWL v1.2 workflow or tool, each tool invocation a warehouse job."""

from __future__ import annotations

import io
import json
import shutil
import sys
import tempfile
from typing import Any

import click

__all__ = ["cwl"]


@click.group()
def cwl() -> None:
    """Run CWL v1.2 workflows and tools as warehouse jobs (see docs/cwl.md)."""


def _shown(value: Any) -> str:
    if isinstance(value, dict) and value.get("class") in ("File", "Directory"):
        return str(value.get("location"))
    return json.dumps(value, ensure_ascii=False)


@cwl.command("run")
@click.argument("document", metavar="WORKFLOW.cwl")
@click.argument("job", required=False, metavar="[JOB.yml|json]")
@click.option(
    "--outdir",
    metavar="D",
    help="Also write the output files into D (default: only in the warehouse).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the CWL output object as JSON.")
@click.option(
    "--name-outputs",
    metavar="PREFIX",
    help="Name each output holding files PREFIX.OUTPUT (as wh workflow run does).",
)
@click.option("--no-reuse", is_flag=True, help="Run every tool, even one run before.")
@click.option("--verbose", is_flag=True, help="Show cwltool's progress on stderr.")
@click.pass_context
def run(
    ctx: click.Context,
    document: str,
    job: str | None,
    outdir: str | None,
    as_json: bool,
    name_outputs: str | None,
    no_reuse: bool,
    verbose: bool,
) -> None:
    """Run WORKFLOW.cwl on JOB (its inputs). Output files are named as
    keep:PDH/path; exit 0 success, 1 failed, 2 bad document or job file,
    33 unsupported requirement."""
    from warehouse.cwl import RunOptions, run_cwl

    scratch = None if outdir else tempfile.mkdtemp(prefix="wh-cwl-out-")
    argv = ["--disable-color", "--outdir", outdir or str(scratch)]
    argv += [] if verbose else ["--quiet"]
    argv += [document] + ([job] if job else [])
    printed = io.StringIO()
    try:
        code = run_cwl(
            argv,
            stdout=printed,
            stderr=sys.stderr,
            options=RunOptions(
                reuse=not no_reuse,
                summary=True,
                local_paths=bool(outdir),
                name_outputs=name_outputs,
            ),
        )
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if code == 0:
        text = printed.getvalue()
        if as_json:
            click.echo(text, nl=False)
        elif text.strip():
            for name, value in sorted(json.loads(text).items()):
                click.echo(f"{name}: {_shown(value)}")
    ctx.exit(code)
