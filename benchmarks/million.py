"""A collection of a million files: store its manifest, list it, read it.

Builds a manifest of ``--streams`` streams (default 10,000) of ``--files``
files each (default 100) of 10 bytes, every stream over one stored block of
its own (1,000 bytes), in normalized form; stores the blocks (untimed,
through the warehouse's Python API, so run it with the project's Python);
then times, in a fresh embedded warehouse on tmpfs (``/dev/shm`` when there
is one):

- ``wh put --manifest FILE``       (goal: <= 10 s, <= 500 MB)
- ``wh ls PDH | wc -l``            (goal: <= 5 s, <= 500 MB)
- ``wh manifest PDH``
- ``wh get --no-write PDH``

each ``--repeat`` times (median reported) with its CPU time (user + system)
and peak resident size (from ``wait4``). Every listing is counted and
checked to have one line a file.
``--wh PATH`` runs another ``wh`` (say, an older build) over the same input.

    .venv/bin/python benchmarks/million.py [--streams N] [--files N] [--repeat N] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOALS = {"put --manifest": (10.0, 500), "ls | wc -l": (5.0, 500)}


def _blocks(streams: int, size: int) -> list[bytes]:
    return [(b"%09d|" % i * (size // 10 + 1))[:size] for i in range(streams)]


def _manifest(blocks: list[bytes], files: int) -> bytes:
    lines = []
    length = len(blocks[0]) // files
    names = [f"f{j:03d}" if files <= 1000 else f"f{j:07d}" for j in range(files)]
    for i, data in enumerate(blocks):
        segments = " ".join(f"{j * length}:{length}:{name}" for j, name in enumerate(names))
        lines.append(f"./d{i:05d} {hashlib.md5(data).hexdigest()}+{len(data)} {segments}\n")
    return "".join(lines).encode()


def _store_blocks(home: Path, blocks: list[bytes]) -> None:
    from warehouse.embedded import EmbeddedWarehouse

    with EmbeddedWarehouse(home) as wh:
        for data in blocks:
            wh.store.put(data)
        wh.store.flush()


# Commands run as children of a small launcher, not of this process: a
# child's peak resident size counts what its parent had mapped when it forked
# (the memory is shared until exec), and this process holds the blocks.
_LAUNCH = """\
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{usage.ru_maxrss * 1024} {usage.ru_utime + usage.ru_stime}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _run(
    argv: list[str], env: dict[str, str], work: Path, stdin: Path | None = None
) -> tuple[float, float, int, int, bytes]:
    """(seconds, CPU seconds, peak resident bytes, lines written, first line) of a command."""
    peak_file = work / "peak"
    launch = [sys.executable, "-S", "-c", _LAUNCH, str(peak_file), *argv]
    start = time.perf_counter()
    with open(stdin or os.devnull, "rb") as inp:
        proc = subprocess.Popen(launch, env=env, stdin=inp, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        lines = 0
        first = b""
        while chunk := proc.stdout.read(1 << 20):  # what `wc -l` does
            if not first:
                first = chunk.split(b"\n", 1)[0]
            lines += chunk.count(b"\n")
        status = proc.wait()
    seconds = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    peak, cpu = peak_file.read_text().split()
    return seconds, float(cpu), int(peak), lines, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--wh", default=str(Path(sys.executable).with_name("wh")))
    parser.add_argument("--workdir", type=Path, help="default: a temporary directory on tmpfs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    work = args.workdir or Path(tempfile.mkdtemp(prefix="wh-million-", dir=base))
    work.mkdir(parents=True, exist_ok=True)
    try:
        blocks = _blocks(args.streams, 10 * args.files)
        text = _manifest(blocks, args.files)
        manifest = work / "manifest.txt"
        manifest.write_bytes(text)
        files = args.streams * args.files
        pdh = f"{hashlib.md5(text).hexdigest()}+{len(text)}"
        results: dict[str, list[tuple[float, float, int]]] = {}
        for _ in range(args.repeat):
            home = work / "home"
            shutil.rmtree(home, ignore_errors=True)
            _store_blocks(home, blocks)
            env = dict(os.environ, WH_HOME=str(home))
            env.pop("WH_URL", None)
            runs = {
                "put --manifest": ([args.wh, "put", "--manifest", str(manifest)], manifest, 1),
                "ls | wc -l": ([args.wh, "ls", pdh], None, files),
                "manifest": ([args.wh, "manifest", pdh], None, args.streams),
                "get --no-write": ([args.wh, "get", "--no-write", pdh], None, files),
            }
            for label, (argv, stdin, want) in runs.items():
                seconds, cpu, peak, lines, first = _run(argv, env, work, stdin)
                if lines != want:
                    raise SystemExit(f"{label}: {lines} lines, want {want}")
                if label == "put --manifest" and first.decode() != pdh:
                    raise SystemExit(f"put printed {first!r}, want {pdh}")
                results.setdefault(label, []).append((seconds, cpu, peak))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)

    out = {
        "files": files,
        "streams": args.streams,
        "manifest_bytes": len(text),
        "load": os.getloadavg(),
        "results": {
            label: {
                "seconds": statistics.median(s for s, _, _ in runs_),
                "cpu_seconds": statistics.median(c for _, c, _ in runs_),
                "peak_mb": max(p for _, _, p in runs_) / 1e6,
            }
            for label, runs_ in results.items()
        },
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{files:,} files in {args.streams:,} streams, manifest {len(text):,} bytes")
    for label, r in out["results"].items():
        goal = GOALS.get(label)
        mark = ""
        if goal is not None:
            ok = r["seconds"] <= goal[0] and r["peak_mb"] <= goal[1]
            mark = f"  goal <= {goal[0]:g} s, <= {goal[1]} MB: {'PASS' if ok else 'MISS'}"
        print(
            f"{label:16} {r['seconds']:7.2f} s  (CPU {r['cpu_seconds']:6.2f} s)"
            f"  {r['peak_mb']:7.0f} MB{mark}"
        )
    print("load average after: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
