"""`wh copy` between two installations, side by side with `wh get` + `wh put`.

    .venv/bin/python benchmarks/clustercopy.py [--size-mb 1000] [--repeat 2]

Everything runs on this machine: cluster `east` (`wh serve --keep 2`) holds a
tree of random files; each run starts a fresh, empty cluster `west` and either
copies the collection there with `wh copy PDH --to west` or writes it out of
east with `wh get` and stores it on west with `wh put` (each with a fresh
client cache, so nothing is skipped). The two kinds alternate, so both see the
same load. Target: copy at least 0.8x the throughput of get + put.
Exit 0 unless something failed (it is a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from remote import make_tree, serve

WH = str(Path(sys.executable).with_name("wh"))


def start(work: Path, name: str) -> tuple[subprocess.Popen[str], str, str]:
    """A `wh serve --keep 2` called ``name``: the process, its URL and a user's token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env["WH_HOME"] = str(work / name)
    return serve(env, "--executor", "none", "--cluster-name", name)


def client(
    work: Path, url: str, token: str, clusters: dict[str, tuple[str, str]]
) -> dict[str, str]:
    """A client of ``url`` with its own config (the other clusters) and an empty cache."""
    config = work / "xdg" / "warehouse" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        "".join(f'[clusters.{n}]\nurl = "{u}"\ntoken = "{t}"\n' for n, (u, t) in clusters.items())
    )
    config.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    return env | {
        "WH_URL": url,
        "WH_TOKEN": token,
        "XDG_CONFIG_HOME": str(work / "xdg"),
        "XDG_CACHE_HOME": str(work / "cache"),
    }


def run(cmd: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:3])} failed: {done.stderr.strip()}")
    return done.stdout


def stop(server: subprocess.Popen[str]) -> None:
    server.terminate()
    server.wait(60)
    if server.stdout:
        server.stdout.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wh-copy-bench-"))
    east, east_url, east_token = start(work, "east")
    try:
        tree = work / "tree"
        make_tree(tree, args.size_mb * 1_000_000, args.seed)
        total = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
        putter = client(work / "putter", east_url, east_token, {})
        pdh = json.loads(run([WH, "put", str(tree), "--json"], putter))["pdh"]
        shutil.rmtree(tree)
        best = {"copy": 1e9, "get+put": 1e9}
        for r in range(args.repeat):
            for kind in best:
                trial = work / f"{kind}-{r}"
                west, west_url, west_token = start(trial, "west")
                try:
                    others = {"east": (east_url, east_token), "west": (west_url, west_token)}
                    at_east = client(trial / "c", east_url, east_token, others)
                    at_west = {**at_east, "WH_URL": west_url, "WH_TOKEN": west_token}
                    os.sync()
                    start_time = time.perf_counter()
                    if kind == "copy":
                        out = json.loads(run([WH, "copy", pdh, "--to", "west", "--json"], at_east))
                        assert out["copied_bytes"] == out["bytes"], out
                    else:
                        run([WH, "get", pdh, str(trial / "out")], at_east)
                        got = run([WH, "put", str(trial / "out"), "--json"], at_west)
                        assert json.loads(got)["pdh"] == pdh
                    elapsed = time.perf_counter() - start_time
                finally:
                    stop(west)
                print(f"  {kind:8} run {r + 1}: {elapsed:.2f} s", flush=True)
                best[kind] = min(best[kind], elapsed)
                shutil.rmtree(trial, ignore_errors=True)
        mb = total / 1e6
        load = os.getloadavg()[0]
        print(f"\ncollection: {mb:,.0f} MB; best of {args.repeat}; {os.cpu_count()} CPUs")
        print(f"load average at the end: {load:.1f}")
        for kind, t in best.items():
            print(f"  {kind:8} {mb / t:>8.0f} MB/s")
        ratio = best["get+put"] / best["copy"]
        verdict = "PASS" if ratio >= 0.8 else "MISS"
        print(f"\n  copy / (get + put)  {ratio:.2f}  target >= 0.80 {verdict}")
    finally:
        stop(east)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
