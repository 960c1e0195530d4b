"""A/B: what permission checks cost `wh ls` of a 10,000-file collection
through a controller (docs/permissions.md; target: at most 5%).

    .venv/bin/python benchmarks/perms_ls.py --base OLD/src --new NEW/src \\
        [--files 10000] [--rounds 5] [--runs 3] [--requests 20]

Three installations run at once on this machine, each `wh serve --keep 2`
in its own home: the old source tree (no permission checks), the new one in
`open` mode and the new one in `private` mode. Each holds the same
collection of small files, put and named `big` by a plain user, who then
reads it. Round after round, in turns that rotate (so a change of the
machine's load falls on all alike), each is timed two ways:

- `wh ls big` as a user runs it (a process: start, name, manifest, listing);
- the controller's side alone: `GET /api/v1/names/big` then
  `GET /api/v1/collections/PDH/manifest`, from this process.

With ``--base-private`` the old tree runs in `private` mode too: an A/B of
two trees that both check permissions (a change to the checks themselves).

Medians per installation, and each new one's ratio to the old, are printed.
Only ``PYTHONPATH`` picks which ``warehouse`` package the servers and `wh`
import; both run in this virtual environment. Exit 0 unless something failed.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

WH = str(Path(sys.executable).with_name("wh"))


@dataclass
class Side:
    name: str
    src: str
    mode: str | None  # "private" sets it; None leaves the catalog as made
    env: dict[str, str] = field(default_factory=dict)
    server: subprocess.Popen[str] | None = None
    url: str = ""
    token: str = ""
    pdh: str = ""
    ls: list[float] = field(default_factory=list)
    api: list[float] = field(default_factory=list)


def _wh(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([WH, *args], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"wh {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout


def start(side: Side, work: Path, tree: Path) -> None:
    home = work / side.name
    env = {**os.environ, "PYTHONPATH": side.src, "WH_HOME": str(home)}
    for k in ("WH_URL", "WH_TOKEN"):
        env.pop(k, None)
    side.server = subprocess.Popen(
        [WH, "serve", "--listen", "127.0.0.1:0", "--keep", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert side.server.stdout is not None
    side.url = side.server.stdout.readline().split()[-1]
    for _ in range(2):
        side.server.stdout.readline()  # the keep servers' "listening" lines
    side.token = _wh(env, "user", "add", "bench").strip()
    root = _wh(env, "user", "add", "root", "--admin").strip()
    side.env = {**env, "WH_URL": side.url, "WH_TOKEN": side.token}
    if side.mode is not None:
        _wh({**side.env, "WH_TOKEN": root}, "perms-mode", side.mode)
    side.pdh = _wh(side.env, "put", str(tree), "--name", "big").split()[-1]


def _get(side: Side, path: str) -> bytes:
    request = urllib.request.Request(
        side.url + path, headers={"Authorization": f"Bearer {side.token}"}
    )
    with urllib.request.urlopen(request, timeout=300) as r:
        return bytes(r.read())


def measure(side: Side, runs: int, requests: int) -> None:
    for _ in range(runs):
        t = time.perf_counter()
        out = subprocess.run([WH, "ls", "big"], env=side.env, capture_output=True, check=True)
        side.ls.append(time.perf_counter() - t)
        assert out.stdout.count(b"\n") >= 10_000 or out.stdout
    for _ in range(requests):
        t = time.perf_counter()
        _get(side, "/api/v1/names/big")
        _get(side, f"/api/v1/collections/{side.pdh}/manifest")
        side.api.append(time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--base", required=True, help="the old version's src directory")
    ap.add_argument("--new", required=True, help="the new version's src directory")
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3, help="`wh ls` runs per turn")
    ap.add_argument("--requests", type=int, default=20, help="request pairs per turn")
    ap.add_argument(
        "--base-private",
        action="store_true",
        help="the old tree in private mode too (it must have permissions)",
    )
    args = ap.parse_args()
    base, new = os.path.abspath(args.base), os.path.abspath(args.new)
    sides = [
        Side(
            "old-private" if args.base_private else "old",
            base,
            "private" if args.base_private else None,
        ),
        Side("new-open", new, None),
        Side("new-private", new, "private"),
    ]
    with tempfile.TemporaryDirectory(prefix="wh-perms-ls-") as tmp:
        work = Path(tmp)
        tree = work / "tree"
        for d in range(100):
            sub = tree / f"d{d:03}"
            sub.mkdir(parents=True)
            for f in range(args.files // 100):
                (sub / f"f{f:04}.txt").write_text(f"{d} {f}\n")
        try:
            for side in sides:
                start(side, work, tree)
            for r in range(args.rounds):
                load = os.getloadavg()[0]
                order = sides[r % 3 :] + sides[: r % 3]
                print(
                    f"round {r + 1}: load {load:.1f}, order {[s.name for s in order]}", flush=True
                )
                for side in order:
                    measure(side, args.runs, args.requests)
        finally:
            for side in sides:
                if side.server is not None:
                    side.server.send_signal(signal.SIGTERM)
                    side.server.wait(timeout=60)
    old = sides[0]
    print(
        f"\n{'installation':<12} {'wh ls median':>13} {'ratio':>6} {'API median':>11} {'ratio':>6}"
    )
    for side in sides:
        ls, api = statistics.median(side.ls), statistics.median(side.api)
        ls_r, api_r = ls / statistics.median(old.ls), api / statistics.median(old.api)
        times = f"{ls * 1000:>10.0f} ms {ls_r:>6.3f} {api * 1000:>8.1f} ms {api_r:>6.3f}"
        print(f"{side.name:<12} {times}")


if __name__ == "__main__":
    main()
