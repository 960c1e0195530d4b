"""Where a sandboxed step's start time goes: variants of the bubblewrap command
line, timed alternately (docs/benchmarks.md, "Step sandbox").

Each round runs a shell script exiting 0 once through each variant, in turn,
so a change of the machine's load falls on all of them alike; medians and
minimums in milliseconds are printed with the load average.

- ``plain``: the script alone, no sandbox;
- ``full``: the command line the controller uses (``Sandbox.wrap``);
- ``etc-view``: the same, but the ~18 entries of ``/etc`` it shows bound as
  one prepared copy (one mount instead of ~18): a candidate, not in use;
- ``no-setpriv``: without dropping to the steps' user (as root): what the
  extra exec costs; not a safe variant;
- ``bare``: ``bwrap --ro-bind / / true``, bubblewrap's own floor.

    .venv/bin/python benchmarks/sandbox_start.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from warehouse.jobs.sandbox import _ETC, find_sandbox


def etc_view(cmd: list[str], view: Path) -> list[str]:
    """``cmd`` with its /etc binds replaced by one bind of a copy of them."""
    out: list[str] = []
    i = 0
    while i < len(cmd):
        if cmd[i] in ("--ro-bind-try", "--dir") and cmd[i + 1].startswith("/etc"):
            if out[-2:] == ["--perms", "0755"]:
                del out[-2:]
            i += 3 if cmd[i] == "--ro-bind-try" else 2
            continue
        out.append(cmd[i])
        i += 1
    at = out.index("--proc")
    return [*out[:at], "--ro-bind", str(view), "/etc", *out[at:]]


def make_view(view: Path) -> None:
    for entry in _ETC:
        if not os.path.lexists(entry):
            continue
        target = view / os.path.relpath(entry, "/etc")
        target.parent.mkdir(parents=True, exist_ok=True)
        if os.path.isdir(entry) and not os.path.islink(entry):
            shutil.copytree(entry, target, symlinks=True)
        else:
            shutil.copy2(entry, target, follow_symlinks=False)
    for root, dirs, _ in os.walk(view):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
    os.chmod(view, 0o755)


def no_setpriv(cmd: list[str]) -> list[str]:
    start = cmd.index("--cap-add")
    end = len(cmd) - 1 - cmd[::-1].index("--")
    return cmd[:start] + cmd[end:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    box = find_sandbox()
    if box is None:
        raise SystemExit("bubblewrap is not usable here")
    with tempfile.TemporaryDirectory(prefix="wh-bench-sandbox-start-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        fn = work / "fn"
        fn.mkdir()
        script = fn / "ok.sh"
        script.write_text("#!/bin/sh\nexit 0\n")
        script.chmod(0o755)
        scratch, result = work / "s" / "tmp", work / "s" / "result"
        scratch.mkdir(parents=True)
        box.prepare_scratch(str(scratch), str(result))
        full = box.wrap(
            [str(script)], function_dir=str(fn), scratch=str(scratch), result=str(result)
        )
        view = work / "etc"
        make_view(view)
        variants = {
            "plain": [str(script)],
            "full": full,
            "etc-view": etc_view(full, view),
            "bare": [box.bwrap, "--ro-bind", "/", "/", "true"],
        }
        if box.user is not None:
            variants["no-setpriv"] = no_setpriv(full)
        times: dict[str, list[float]] = {k: [] for k in variants}
        loads = [os.getloadavg()[0]]
        for _ in range(args.rounds):
            for name, cmd in variants.items():
                start = time.perf_counter()
                done = subprocess.run(cmd, capture_output=True, check=False)
                times[name].append(time.perf_counter() - start)
                if done.returncode != 0:
                    raise SystemExit(f"{name} failed: {done.stderr.decode()[-500:]}")
        loads.append(os.getloadavg()[0])
    print(f"{args.rounds} rounds; load average {loads[0]:.1f} before, {loads[1]:.1f} after")
    print(f"  {'':12}{'median ms':>10}{'min ms':>8}")
    for name, values in times.items():
        median, low = statistics.median(values) * 1000, min(values) * 1000
        print(f"  {name:12}{median:>10.1f}{low:>8.1f}")


if __name__ == "__main__":
    main()
