"""Steps that read and write plain files (docs/jobs.md, "Plain files").

A function asks for it with a line ``# wh: files`` among the first lines of
its entry file. Its steps then run through this module: the job's input
collection is written, every block verified, under the step's scratch as
``$WH_INPUT_DIR`` (its files read-only), an empty ``$WH_OUTPUT_DIR`` is made beside
it, the function runs, and when it exits 0 what it left under
``$WH_OUTPUT_DIR`` is stored and reported as the step's output fragment.

**Decision: materialized, not mounted.** A sandboxed step runs as an
unprivileged user in namespaces of its own, without ``/dev/fuse``; a FUSE
mount made outside and bound in would need ``allow_other`` and a mount
process per step holding the job's token. A copy in the scratch works the
same under every executor (local, sandbox, Slurm, Dask), counts against the
step's scratch limit, and is gone with the scratch.

Run as ``python -P -m warehouse.jobs.files PROGRAM [ARGS...]``.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

__all__ = ["WRAPPER", "asks_for_files", "main"]

WRAPPER = "warehouse.jobs.files"
# Looked for in the first lines of the entry file only: a directive, not content.
_DIRECTIVE = re.compile(rb"^#\s*wh:\s*files\s*$", re.MULTILINE)
_HEAD_BYTES = 1024


def asks_for_files(entry: Path) -> bool:
    """Whether the entry file carries the ``# wh: files`` directive."""
    try:
        with open(entry, "rb") as f:
            head = f.read(_HEAD_BYTES)
    except OSError:
        return False
    return _DIRECTIVE.search(head) is not None


def _read_only(root: Path) -> None:
    """The files under ``root`` made read-only; its directories stay
    writable, so that the scratch is removed as always after the step."""
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            if not os.path.islink(p):
                os.chmod(p, stat.S_IMODE(os.lstat(p).st_mode) & ~0o222)


def main(argv: list[str]) -> int:
    from warehouse import step
    from warehouse.errors import WarehouseError

    if not argv:
        print("wh: usage: python -m warehouse.jobs.files PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    scratch = step.scratch()
    input_dir, output_dir = scratch / "wh-input", scratch / "wh-output"
    wh = step.warehouse()
    # A scratch kept from an earlier attempt starts over (its files are
    # read-only, but their directories are not, so they go).
    for old in (input_dir, output_dir):
        shutil.rmtree(old, ignore_errors=True)
    try:
        wh.get(step.job_input(), input_dir)
        _read_only(input_dir)
        output_dir.mkdir()
    except (WarehouseError, OSError) as e:
        print(f"wh: the step's input could not be written as files: {e}", file=sys.stderr)
        return 1
    env = {**os.environ, "WH_INPUT_DIR": str(input_dir), "WH_OUTPUT_DIR": str(output_dir)}
    sys.stdout.flush()
    code = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, check=False).returncode
    if code != 0:
        return code if code > 0 else 128 - code
    if not any(output_dir.iterdir()):
        return 0
    try:
        done = wh.put([output_dir])
        step.output(wh.manifest(done.pdh))
    except (WarehouseError, OSError) as e:
        print(f"wh: the step's output files could not be stored: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
