"""What the step sandbox costs: steps per second of the local executor, plain and
sandboxed (docs/security.md).

N steps (default 400) of a shell script exiting 0, one slot per core, run by
``LocalExecutor`` directly (no catalog), first without and then with the
bubblewrap sandbox a controller uses (as root: dropping to ``wh-steps``).

    .venv/bin/python benchmarks/sandbox.py [--steps N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from warehouse.jobs.executors import Launch, LocalExecutor, local_capacity
from warehouse.jobs.model import Resources
from warehouse.jobs.sandbox import Sandbox, find_sandbox


def rate(n: int, work: Path, sandbox: Sandbox | None) -> float:
    fn = work / "fn"
    fn.mkdir(parents=True)
    script = fn / "ok.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    capacity = local_capacity()
    executor = LocalExecutor(capacity, sandbox)
    env = {"WH_FUNCTION_DIR": str(fn)}
    one = Resources(1, 0)
    started = time.perf_counter()
    sent = done = 0
    try:
        while done < n:
            while sent < n and executor.running() < capacity.cpus:
                launch = Launch(1, sent, 1, (str(script),), env, str(work / "scratch"), one)
                executor.start(launch)
                sent += 1
            for finished in executor.poll(1.0):
                assert finished.exit_status == 0, finished.log
                done += 1
    finally:
        executor.close()
    return n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sandbox = find_sandbox()
    if sandbox is None:
        raise SystemExit("bubblewrap is not usable here")
    with tempfile.TemporaryDirectory(prefix="wh-bench-sandbox-") as tmp:
        os.chmod(tmp, 0o700)
        plain = rate(args.steps, Path(tmp) / "plain", None)
        boxed = rate(args.steps, Path(tmp) / "boxed", sandbox)
    figures = {
        "steps": args.steps,
        "plain_steps_per_s": round(plain, 1),
        "sandboxed_steps_per_s": round(boxed, 1),
        "ratio": round(boxed / plain, 3),
        "as_user": sandbox.user.name if sandbox.user else None,
    }
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
