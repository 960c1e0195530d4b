"""The CWL v1.2 conformance suite run whole by one runner, for the harness.

    python benchmarks/cwl_suite.py wh|cwltool [-j 2] [-n 1-20] [--tags T]

Runs ``cwltest`` over the suite's ``conformance_tests.yaml`` with
``wh-cwl-runner`` (``wh``) or ``cwltool --no-container`` (``cwltool``),
from the suite's directory, and prints how many tests passed and failed
and which failed. A failing test is a figure, not a failure of this
script: it exits 0 once cwltest has run (cwltest itself exits 1 when a
test fails), and non-zero when it could not (no suite, no cwltest).

The suite is found as the tests find it: ``WH_CWL_CONFORMANCE``, else
``cwl-v1.2`` in the ``shared`` directory beside this repository's.
``-n`` (cwltest's test numbers, ``1-20``) or ``--tags`` runs a part of it:
a quick run that proves the scenario works. ``CWL_SUITE_LOG=FILE`` appends
the tally to FILE too (the harness keeps no command's output).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SUITE = Path(os.environ.get("WH_CWL_CONFORMANCE", REPO.parent / "shared" / "cwl-v1.2"))

RUNNERS = {
    "wh": [str(BIN / "wh-cwl-runner")],
    "cwltool": [str(BIN / "cwltool"), "--no-container"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runner", choices=sorted(RUNNERS))
    ap.add_argument("-j", type=int, default=2, help="tests at once (default 2)")
    ap.add_argument("-n", help="only these tests, by number (cwltest's -n: 1,3-6)")
    ap.add_argument("--tags", help="only tests with these tags (cwltest's --tags)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a test may take")
    args = ap.parse_args()
    tests = SUITE / "conformance_tests.yaml"
    if not tests.is_file():
        sys.exit(f"no CWL conformance suite at {SUITE} (set WH_CWL_CONFORMANCE)")
    tool, *extra = RUNNERS[args.runner]
    cmd = [str(BIN / "cwltest"), "--test", str(tests), "--tool", tool]
    cmd += ["-j", str(args.j), "--timeout", str(args.timeout)]
    cmd += ["-n", args.n] if args.n else []
    cmd += ["--tags", args.tags] if args.tags else []
    cmd += ["--", *extra] if extra else []
    # Each runner's temporary files in a directory of its own, removed after.
    with tempfile.TemporaryDirectory(prefix="cwl-suite-") as tmp:
        done = subprocess.run(
            cmd, cwd=SUITE, capture_output=True, text=True, env={**os.environ, "TMPDIR": tmp}
        )
    text = done.stdout + done.stderr
    ran = dict(re.findall(r"^Test \[(\d+)/\d+\] ([^:\s]+)", text, re.M))
    failed = sorted(
        ran.get(n, f"test {n}") for n in set(re.findall(r"^Test (\d+) failed", text, re.M))
    )
    summary = [ln for ln in text.splitlines() if re.search(r"tests passed|failures", ln)]
    if done.returncode not in (0, 1) or not ran:
        sys.exit(f"cwltest did not run (exit {done.returncode}):\n{text[-3000:]}")
    lines = [f"{args.runner}: {len(ran)} tests run; " + "; ".join(summary[-2:])]
    lines += [f"  failed: {name}" for name in failed]
    print("\n".join(lines))
    if os.environ.get("CWL_SUITE_LOG"):  # the harness keeps no output of a command
        with open(os.environ["CWL_SUITE_LOG"], "a", encoding="utf-8") as log:
            log.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
