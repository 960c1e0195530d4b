#!/usr/bin/env python3
"""A put through a controller: its client's and its controller's peak
memory and its time, two builds of `wh` alternated (A/B).

Each round, for each build: a fresh ``wh serve --keep 2 --executor none``
in a fresh ``WH_HOME``, an admin and the user alice made by its own
commands, then alice's ``wh put --no-progress TREE`` of ``--files`` tiny
files (a few bytes each, 1,000 to a directory, made under ``--scratch``,
tmpfs where there is one; ``--per-dir 1``: each in a directory of its own,
a block and an accounting line per directory; with ``--same``, every
file holds the same bytes: one block, written once per directory).
Printed per run: the put's wall seconds, the client's peak resident size
(``wait4``) and the controller's (``VmHWM`` of the ``wh serve`` process,
read before it stops; its keep servers are processes of their own and not
counted), then each build's medians and the load average seen.

    python benchmarks/remote_put_ab.py --a MAIN/.venv/bin/wh --b .venv/bin/wh \\
        --work /var/tmp/remote-put --scratch /dev/shm/remote-put --files 100000 --rounds 3
    python benchmarks/remote_put_ab.py ... --files 100000 --per-dir 1 --rounds 2
    python benchmarks/remote_put_ab.py ... --files 20000 --per-dir 1 --same --rounds 1

Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from put_bounded import tiny_tree  # the same trees


def one_file_dirs(root: Path, count: int, same: bool = False) -> Path:
    """``count`` tiny files, each in a directory of its own (kept if already
    there); ``same``: all holding the same bytes."""
    if root.is_dir() and sum(len(f) for _, _, f in os.walk(root)) == count:
        return root
    shutil.rmtree(root, ignore_errors=True)
    for i in range(count):
        d = root / f"d{i // 1000:04d}" / f"{i:07d}"
        d.mkdir(parents=True)
        data = b"the same\n" if same else b"" if i % 5 == 0 else b"%x\n" % i
        (d / "f").write_bytes(data)
    return root


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM")


def _run(wh: str, tree: Path, home: Path) -> tuple[float, int, int]:
    """Wall seconds, client and controller peak KiB of one remote put."""
    shutil.rmtree(home, ignore_errors=True)
    env = {**os.environ, "WH_HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}
    env.pop("WH_URL", None)
    env.pop("WH_TOKEN", None)
    server = subprocess.Popen(
        [wh, "serve", "--listen", "127.0.0.1:0", "--keep", "2", "--executor", "none"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split()[3]
        for _ in range(2):
            server.stdout.readline()  # the keep servers listening
        admin = subprocess.run(
            [wh, "user", "add", "admin", "--admin"], env=env, capture_output=True, text=True
        )
        remote = {**env, "WH_URL": url, "WH_TOKEN": admin.stdout.strip()}
        alice = subprocess.run(
            [wh, "user", "add", "alice"], env=remote, capture_output=True, text=True, check=True
        )
        remote["WH_TOKEN"] = alice.stdout.strip()
        t0 = time.perf_counter()
        client = subprocess.Popen(
            [wh, "put", "--no-progress", str(tree)], env=remote, stdout=subprocess.DEVNULL
        )
        _, status, usage = os.wait4(client.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"{wh} put failed")
        return wall, usage.ru_maxrss, _peak_kib(server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the `wh` of build A (main)")
    ap.add_argument("--b", required=True, help="the `wh` of build B")
    ap.add_argument("--work", type=Path, required=True, help="homes (on disk)")
    ap.add_argument("--scratch", type=Path, required=True, help="the tree (tmpfs)")
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--per-dir", type=int, choices=(1, 1000), default=1000, help="files per directory"
    )
    ap.add_argument("--same", action="store_true", help="with --per-dir 1: files alike")
    args = ap.parse_args()
    if args.per_dir == 1:
        name = f"{'same' if args.same else 'dirs'}{args.files}"
        tree = one_file_dirs(args.scratch / name, args.files, args.same)
    else:
        tree = tiny_tree(args.scratch / f"tiny{args.files}", args.files)
    seen: dict[str, list[tuple[float, int, int]]] = {"A": [], "B": []}
    loads = []
    for r in range(args.rounds):
        for build, wh in (
            (("A", args.a), ("B", args.b)) if r % 2 == 0 else (("B", args.b), ("A", args.a))
        ):
            loads.append(os.getloadavg()[0])
            wall, client, ctl = _run(wh, tree, args.work / f"home-{build}")
            seen[build].append((wall, client, ctl))
            print(
                f"round {r} {build}: {wall:6.1f} s  client {client / 1024:6.1f} MB  "
                f"controller {ctl / 1024:6.1f} MB  (load {loads[-1]:.2f})",
                flush=True,
            )
    for build, runs in seen.items():
        walls, clients, ctls = zip(*runs, strict=True)
        print(
            f"{build}: median {statistics.median(walls):.1f} s, client "
            f"{statistics.median(clients) / 1024:.1f} MB (max {max(clients) / 1024:.1f}), "
            f"controller {statistics.median(ctls) / 1024:.1f} MB (max {max(ctls) / 1024:.1f})"
        )
    print(f"load average at each run's start: {min(loads):.2f} to {max(loads):.2f}")


if __name__ == "__main__":
    main()
