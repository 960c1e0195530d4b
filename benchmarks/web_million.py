"""The web page of a collection of a million files: time per page and the server's peak memory.

Builds the collection of ``benchmarks/million.py`` (``--streams`` streams,
default 10,000, of ``--files`` files, default 100, of 10 bytes; the root
holds one directory per stream), stores its blocks and its manifest (``wh
put --manifest``, untimed) in a fresh embedded warehouse on tmpfs, then,
for each ``--wh`` given (builds alternate round by round), starts ``wh web``
under a small launcher (``wait4`` gives its peak resident size and CPU time)
and times these requests, in order:

- ``root, first``: the collection's page, the first request for it
- ``root``: the same page again
- ``root page 37``: page 37 of the root's 10,000 directories
- ``dir``: the page of one directory (``d05000``, its 100 files)
- ``download``: one file of it
- ``dir 2``: another directory's page (``d09999``)

Every page is checked to show the entries and counts it should. The
server is stopped after each round and its peak and CPU time reported with
each request's median time over the rounds.

    .venv/bin/python benchmarks/web_million.py [--wh PATH ...] [--rounds N] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import http.cookiejar
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

# The same collection as million.py (run as a script, its directory is on the path).
from million import _blocks, _manifest, _store_blocks

# The launcher passes a SIGTERM on to wh, waits, and writes wh's peak
# resident bytes and CPU seconds (a child's peak would count this process's
# memory until exec).
_LAUNCH = """\
import os, signal, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGTERM))
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{usage.ru_maxrss * 1024} {usage.ru_utime + usage.ru_stime}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _round(wh: str, env: dict[str, str], work: Path, pdh: str, args: argparse.Namespace) -> dict:
    peak_file = work / "peak"
    launch = [sys.executable, "-S", "-c", _LAUNCH, str(peak_file), wh, "web"]
    proc = subprocess.Popen(
        launch, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    times: dict[str, float] = {}
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1].removesuffix("/web/")
        token = proc.stdout.readline().split()[-1]
        # A cookie jar keeps the session cookie the sign-in sets.
        opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )
        form = urllib.parse.urlencode({"token": token, "next": "/web/"}).encode()
        with opener.open(url + "/web/signin", data=form, timeout=600) as signed:
            assert signed.status == 200, signed.status  # after the redirect
        base = f"/web/c/{pdh}"
        files = args.streams * args.files
        last = f"d{args.streams - 1:05d}"
        middle = f"d{args.streams // 2:05d}"
        page = min(37, -(-args.streams // 200))  # the root lists 200 directories a page
        requests = [
            ("root, first", base, {}, f"in {files} files"),
            ("root", base, {}, ">d00000/<"),
            ("root page 37", base, {"page": page}, f">d{(page - 1) * 200:05d}/<"),
            ("dir", base, {"path": middle}, f"in {args.files} files"),
            ("download", f"{base}/f/{middle}/f007", {}, None),
            ("dir 2", base, {"path": last}, f">f{args.files - 1:03d}<"),
        ]
        for label, path, params, want in requests:
            query = "?" + urllib.parse.urlencode(params) if params else ""
            start = time.perf_counter()
            with opener.open(url + path + query, timeout=600) as answer:
                body = answer.read()
                times[label] = time.perf_counter() - start
                assert answer.status == 200, (label, answer.status)
            if want is not None:
                assert want in body.decode(), (label, want)
            else:
                assert len(body) == 10, label
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        if proc.stdout:
            proc.stdout.close()
    peak, cpu = peak_file.read_text().split()
    return {"times": times, "peak": int(peak), "cpu": float(cpu)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wh", action="append", help="a wh to run (repeatable; default: this one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    whs = args.wh or [str(Path(sys.executable).with_name("wh"))]

    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    work = Path(tempfile.mkdtemp(prefix="wh-webmillion-", dir=base))
    load_before = os.getloadavg()
    try:
        blocks = _blocks(args.streams, 10 * args.files)
        text = _manifest(blocks, args.files)
        manifest = work / "manifest.txt"
        manifest.write_bytes(text)
        pdh = f"{hashlib.md5(text).hexdigest()}+{len(text)}"
        home = work / "home"
        _store_blocks(home, blocks)
        env = dict(os.environ, WH_HOME=str(home))
        env.pop("WH_URL", None)
        put = subprocess.run(
            [whs[0], "put", "--manifest", str(manifest)], env=env, capture_output=True, check=True
        )
        assert put.stdout.decode().strip() == pdh
        rounds: dict[str, list[dict]] = {wh: [] for wh in whs}
        for _ in range(args.rounds):
            for wh in whs:
                rounds[wh].append(_round(wh, env, work, pdh, args))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    out = {
        "files": args.streams * args.files,
        "streams": args.streams,
        "manifest_bytes": len(text),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "builds": {
            wh: {
                "seconds": {
                    label: statistics.median(r["times"][label] for r in runs)
                    for label in runs[0]["times"]
                },
                "server_peak_mb": max(r["peak"] for r in runs) / 1e6,
                "server_cpu_seconds": statistics.median(r["cpu"] for r in runs),
            }
            for wh, runs in rounds.items()
        },
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(
        f"{out['files']:,} files in {args.streams:,} streams, manifest {len(text):,} bytes,"
        f" {args.rounds} round(s)"
    )
    for wh, r in out["builds"].items():
        print(wh)
        for label, seconds in r["seconds"].items():
            print(f"  {label:14} {seconds:7.3f} s")
        print(
            f"  server peak {r['server_peak_mb']:.0f} MB,"
            f" CPU {r['server_cpu_seconds']:.1f} s a round"
        )
    print("load average before: " + " ".join(f"{x:.1f}" for x in load_before))
    print("load average after:  " + " ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
