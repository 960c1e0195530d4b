"""Put and get throughput through a controller and 2 keep servers (replication 2),
side by side with the embedded warehouse on the same tree.

    .venv/bin/python benchmarks/remote.py [--size-mb 600] [--repeat 3] [--tls]

Everything runs on this machine: `wh serve` with 2 keep servers started as
child processes (`--keep 2`), and the same `wh put` / `wh get` commands with
WH_URL set. Targets: remote put at least 0.5x and remote get at least 0.8x
the embedded throughput. With --tls, a third installation serves HTTPS
(a self-signed certificate made with the openssl command, trusted through
WH_CA_BUNDLE) and its ratios are printed too. Every server keeps its default
access log (to its standard error, discarded here). Exit 0 unless something
failed (it is a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The tests' certificate helper, as benchmarks/query.py uses their helpers.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from certs import self_signed

WH = str(Path(sys.executable).with_name("wh"))


def make_tree(root: Path, total: int, seed: int) -> None:
    """Files of 0.2-1.8 MB plus a few of 50 MB, random bytes (incompressible)."""
    rng = random.Random(seed)
    written = 0
    i = 0
    while written < total:
        size = 50_000_000 if i % 40 == 39 else rng.randint(200_000, 1_800_000)
        size = min(size, total - written)
        d = root / f"dir{i % 9}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"file{i:05d}").write_bytes(rng.randbytes(size))
        written += size
        i += 1


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    # Start each command with no dirty pages from the one before being
    # written back meanwhile: a get's 600 MB of output files would otherwise
    # be flushed during whichever command comes next.
    os.sync()
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:3])} failed: {done.stderr.strip()}")
    return elapsed, done.stdout


def put_get(env: dict[str, str], tree: Path, out: Path) -> tuple[float, float]:
    t_put, stdout = timed([WH, "put", str(tree), "--json"], env)
    pdh = json.loads(stdout)["pdh"]
    shutil.rmtree(out, ignore_errors=True)
    t_get, _ = timed([WH, "get", pdh, str(out)], env)
    return t_put, t_get


def tls_options(work: Path) -> list[str]:
    """``--tls-cert/--tls-key`` options for a new certificate for 127.0.0.1."""
    cert, key = self_signed(work)
    return ["--tls-cert", str(cert), "--tls-key", str(key)]


def serve(env: dict[str, str], *options: str) -> tuple[subprocess.Popen[str], str, str]:
    """A `wh serve --keep 2` in ``env`` (its WH_HOME): the process, its URL and
    a new user's token."""
    server = subprocess.Popen(
        [WH, "serve", "--listen", "127.0.0.1:0", "--keep", "2", *options],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert server.stdout is not None
    url = server.stdout.readline().split()[-1]
    for _ in range(2):
        server.stdout.readline()  # the keep servers' "listening" lines
    token = subprocess.run(
        [WH, "user", "add", "bench"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    return server, url, token


def start_cluster(work: Path, tls: bool = False) -> tuple[subprocess.Popen[str], dict[str, str]]:
    home = work / "server-home"
    env = {**os.environ, "WH_HOME": str(home)}
    env.pop("WH_URL", None)
    options = tls_options(work / "tls") if tls else []
    if tls:
        env["WH_CA_BUNDLE"] = options[1]
    server, url, token = serve(env, *options)
    client = {**os.environ, "WH_URL": url, "WH_TOKEN": token, "WH_REPLICATION": "2"}
    if tls:
        client["WH_CA_BUNDLE"] = options[1]
    return server, client


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=600)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tls", action="store_true", help="also time an installation over HTTPS")
    args = ap.parse_args()
    kinds = ["embedded", "remote", *(["remote-tls"] if args.tls else [])]
    work = Path(tempfile.mkdtemp(prefix="wh-remote-bench-"))
    try:
        tree = work / "tree"
        make_tree(tree, args.size_mb * 1_000_000, args.seed)
        total = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
        best: dict[str, list[float]] = {k: [1e9, 1e9] for k in kinds}
        for r in range(args.repeat):
            for kind in kinds:
                run_dir = work / f"{kind}-{r}"
                if kind == "embedded":
                    env = {**os.environ, "WH_HOME": str(run_dir / "home")}
                    env.pop("WH_URL", None)
                    server = None
                else:
                    server, env = start_cluster(run_dir, tls=kind == "remote-tls")
                try:
                    t_put, t_get = put_get(env, tree, run_dir / "out")
                finally:
                    if server is not None:
                        server.terminate()
                        server.wait(30)
                print(f"  {kind:10} run {r + 1}: put {t_put:.2f} s, get {t_get:.2f} s", flush=True)
                best[kind] = [min(best[kind][0], t_put), min(best[kind][1], t_get)]
                shutil.rmtree(run_dir, ignore_errors=True)
        mb = total / 1e6
        print(f"\ntree: {mb:,.0f} MB; best of {args.repeat}; {os.cpu_count()} CPUs")
        print(f"  {'':11}{'put MB/s':>10}{'get MB/s':>10}")
        for kind, (p, g) in best.items():
            print(f"  {kind:11}{mb / p:>10.0f}{mb / g:>10.0f}")
        put_ratio = best["embedded"][0] / best["remote"][0]
        get_ratio = best["embedded"][1] / best["remote"][1]
        print(
            f"\n  remote put / embedded put  {put_ratio:.2f}  target >= 0.50 "
            f"{'PASS' if put_ratio >= 0.5 else 'MISS'}"
        )
        print(
            f"  remote get / embedded get  {get_ratio:.2f}  target >= 0.80 "
            f"{'PASS' if get_ratio >= 0.8 else 'MISS'}"
        )
        if args.tls:
            tls_put = best["embedded"][0] / best["remote-tls"][0]
            tls_get = best["embedded"][1] / best["remote-tls"][1]
            print(f"  remote-tls put / embedded put  {tls_put:.2f}  (no target)")
            print(f"  remote-tls get / embedded get  {tls_get:.2f}  (no target)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
