"""The benchmark harness: scenarios of whole commands, ours beside a peer's.

    .venv/bin/python benchmarks/bench.py SCENARIO [--runs N] [--json FILE]
        [--ab REV] [--cold] [--case NAME] [--keep]
    .venv/bin/python benchmarks/bench.py --list

A scenario is a TOML file in ``benchmarks/scenarios/`` (format in
benchmarks/README.md): a set-up script run once, then cases, each a few
tools timed as a user runs them: the whole command from a shell, its start,
planning and output included. Every round runs each case's tools in an
order rotated by one from the last round, so a drift of the machine's load
falls on all of them alike; medians are reported (at least 5 runs). The
page, dentry and inode caches are dropped before every timed command of a
``cold`` scenario, for every tool alike. CPU is user + system time of the
command and of every process it waited for (``wait4``'s rusage); a daemon
a command leaves running is not counted, and a note says so. The load
average is read before each timed command and reported with the results.

``--ab REV`` adds, beside each case's first tool (ours), the same command run
from a worktree of REV (``PYTHONPATH`` picks which ``warehouse`` the command
imports; the worktree has no native library unless built there).

hyperfine (what STYLE.md points at) times one command's runs back to back
and drops caches only through its own ``--prepare``: this runner rotates
the tools inside every round and counts children's CPU, which the figures
in docs/benchmarks.md need, in a page of standard-library Python.

Exit 0 unless a command failed (a missed goal is a figure, not a failure).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"
REPO = HERE.parent
BIN = Path(sys.executable).parent


@dataclass
class Tool:
    name: str
    cmd: str
    prepare: str = ""
    env: dict[str, str] = field(default_factory=dict)
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)


@dataclass
class Case:
    name: str
    tools: list[Tool]
    max_seconds: float | None = None  # a goal for ours alone
    max_ratio: float | None = None  # a goal for ours / the first peer


def load_scenario(path: Path) -> tuple[dict[str, object], list[Case]]:
    with path.open("rb") as f:
        spec = tomllib.load(f)
    cases = []
    for c in spec.get("case", []):
        tools = [
            Tool(t["name"], t["cmd"], t.get("prepare", ""), dict(t.get("env", {})))
            for t in c["tool"]
        ]
        if not tools:
            sys.exit(f"{path}: case {c['name']!r} has no tool")
        cases.append(Case(c["name"], tools, c.get("max_seconds"), c.get("max_ratio")))
    return spec, cases


def drop_caches() -> None:
    """Page cache, dentries and inodes, so that 'cold' means cold for every tool."""
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as e:
        sys.exit(f"--cold needs to write /proc/sys/vm/drop_caches (as root): {e}")


def shell(cmd: str, env: dict[str, str], cwd: Path) -> tuple[float, float, int, str]:
    """Run ``cmd`` in bash; its wall seconds, CPU seconds (children included),
    exit status and the tail of its error output."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            ["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read()[-2000:].decode(errors="replace")
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode, tail


def base_env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["WORK"] = str(work)
    env["REPO"] = str(REPO)  # this tree: a scenario's inputs (examples/) are read from it
    env["WH_HOME"] = str(work / "home")
    env.pop("WH_URL", None)
    env.pop("WH_TOKEN", None)
    return env


def worktree(rev: str, into: Path) -> Path:
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(into), rev],
        check=True,
        capture_output=True,
    )
    return into


def compiled(src: Path) -> None:
    """Byte-compile a tree's modules before any is timed: with
    PYTHONDONTWRITEBYTECODE set, a fresh worktree (or a module changed
    since its cache was written) is compiled again by every command: that
    nearly doubled the instructions of `wh ls NAME` through a controller
    (0.97 G against 0.53 G, callgrind)."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(src)],
        check=False,  # a module that does not compile fails its command, timed or not
        capture_output=True,
    )


def run(
    spec: dict[str, object], cases: list[Case], runs: int, cold: bool, work: Path, ab: list[Tool]
) -> None:
    env = base_env(work)
    setup = str(spec.get("setup", ""))
    try:
        # Each side sets up its own home: an older catalog need not read a newer one.
        for side in [{}, *(t.env for t in ab[:1])]:
            if not setup:
                break
            print("set-up …", file=sys.stderr)
            wall, _, rc, tail = shell(setup, env | side, work)
            if rc:
                sys.exit(f"set-up failed (exit {rc}):\n{tail}")
            print(f"set-up done in {wall:.1f} s", file=sys.stderr)
        _rounds(cases, runs, cold, work, env)
    finally:
        # What the set-up started (servers) is stopped however the run ends.
        teardown = str(spec.get("teardown", ""))
        if teardown:
            _, _, rc, tail = shell(teardown, env, work)
            if rc:
                print(f"teardown failed (exit {rc}):\n{tail}", file=sys.stderr)


def _rounds(cases: list[Case], runs: int, cold: bool, work: Path, env: dict[str, str]) -> None:
    for case in cases:
        for r in range(runs):
            order = case.tools[r % len(case.tools) :] + case.tools[: r % len(case.tools)]
            for tool in order:
                tenv = env | tool.env
                if tool.prepare:
                    _, _, rc, tail = shell(tool.prepare, tenv, work)
                    if rc:
                        sys.exit(f"{case.name}/{tool.name}: prepare failed:\n{tail}")
                if cold:
                    drop_caches()
                tool.load.append(os.getloadavg()[0])
                wall, cpu, rc, tail = shell(tool.cmd, tenv, work)
                if rc:
                    sys.exit(f"{case.name}/{tool.name}: `{tool.cmd}` exit {rc}:\n{tail}")
                tool.wall.append(wall)
                tool.cpu.append(cpu)
            print(f"{case.name}: round {r + 1}/{runs}", file=sys.stderr)


def summary(spec: dict[str, object], cases: list[Case], cold: bool) -> dict[str, object]:
    out_cases = []
    for case in cases:
        tools = [
            {
                "name": t.name,
                "cmd": t.cmd,
                "median_s": statistics.median(t.wall),
                "min_s": min(t.wall),
                "max_s": max(t.wall),
                "cpu_median_s": statistics.median(t.cpu),
                "runs_s": t.wall,
                "load_median": statistics.median(t.load),
            }
            for t in case.tools
        ]
        ours = tools[0]["median_s"]
        entry: dict[str, object] = {"name": case.name, "tools": tools}
        if len(tools) > 1:
            entry["ratio"] = ours / tools[1]["median_s"]  # type: ignore[operator]
        if case.max_seconds is not None:
            entry["goal"] = f"<= {case.max_seconds} s"
            entry["met"] = ours <= case.max_seconds  # type: ignore[operator]
        if case.max_ratio is not None and "ratio" in entry:
            entry["goal"] = f"ratio <= {case.max_ratio}"
            entry["met"] = entry["ratio"] <= case.max_ratio  # type: ignore[operator]
        out_cases.append(entry)
    return {
        "scenario": spec.get("title", ""),
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "cold": cold,
        "cases": out_cases,
    }


def show(result: dict[str, object]) -> None:
    print(f"{result['scenario']}  ({result['date']} UTC, {result['machine']})")
    for case in result["cases"]:  # type: ignore[attr-defined]
        goal = case.get("goal", "")
        met = {True: "met", False: "MISSED"}.get(case.get("met"), "")  # type: ignore[arg-type]
        ratio = f"  ratio {case['ratio']:.2f}" if "ratio" in case else ""
        print(f"\n{case['name']}{ratio}  {goal} {met}")
        for t in case["tools"]:
            print(
                f"  {t['name']:<14} median {t['median_s']:.3f} s  "
                f"[{t['min_s']:.3f}-{t['max_s']:.3f}]  cpu {t['cpu_median_s']:.3f} s  "
                f"load {t['load_median']:.2f}   $ {t['cmd']}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?", help="a name in benchmarks/scenarios/ or a path")
    ap.add_argument("--list", action="store_true", help="list the scenarios")
    ap.add_argument("--runs", type=int, help="rounds (default: the scenario's, at least 5)")
    ap.add_argument("--cold", action="store_true", help="drop caches before every command")
    ap.add_argument("--case", action="append", help="run only these cases")
    ap.add_argument("--ab", metavar="REV", help="also run ours from a worktree of REV")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if args.list or not args.scenario:
        for p in sorted(SCENARIOS.glob("*.toml")):
            with p.open("rb") as f:
                print(f"{p.stem:<16} {tomllib.load(f).get('title', '')}")
        return
    path = Path(args.scenario)
    if not path.exists():
        path = SCENARIOS / f"{args.scenario}.toml"
    spec, cases = load_scenario(path)
    if args.case:
        cases = [c for c in cases if c.name in args.case]
    runs = args.runs or max(5, int(spec.get("runs", 5)))  # type: ignore[call-overload]
    if runs < 5:
        print("note: fewer than 5 runs: the medians are not the page's", file=sys.stderr)
    cold = args.cold or spec.get("cache") == "cold"
    work = Path(tempfile.mkdtemp(prefix="wh-bench-"))
    tree: Path | None = None
    ab: list[Tool] = []
    try:
        compiled(REPO / "src")
        if args.ab:
            tree = worktree(args.ab, work / "ab-tree")
            compiled(tree / "src")
            for case in cases:
                ours = case.tools[0]
                other = Tool(f"{ours.name}@{args.ab}", ours.cmd, ours.prepare, dict(ours.env))
                other.env["PYTHONPATH"] = str(tree / "src")
                other.env["WH_HOME"] = str(work / "home-ab")
                case.tools.insert(1, other)
                ab.append(other)
        run(spec, cases, runs, cold, work, ab)
        result = summary(spec, cases, cold)
        show(result)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    finally:
        if tree is not None:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
