"""`wh put --manifest` of a million-file manifest through a controller.

The manifest of ``million.py`` (``--streams`` streams of ``--files`` files of
10 bytes, in normalized form; 12.4 MB for the default million files) is put
with ``wh put --manifest FILE`` by the admin of a fresh ``wh serve --keep 2``
on tmpfs (an admin's blocks are not checked for signatures, so none need be
stored). Each build given with ``--wh`` (alternated, ``--repeat`` rounds)
runs its own controller and client. Reported: the put's wall time, the
client's CPU time and peak resident size (``/usr/bin/time``), and the
controller's peak resident size (``VmHWM``) before and after the put. The
controller takes whole manifests up to 64 MiB (``--max-manifest``), so a
build without the streamed route can store it too.

    .venv/bin/python benchmarks/million_put_remote.py --wh .venv/bin/wh --wh OTHER/.venv/bin/wh
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from million import _blocks, _manifest
from million_get import _serve  # the same controller and admin
from remote_put_ab import _peak_kib


def _peak_mb(pid: int) -> int:
    return _peak_kib(pid) // 1024


def _one(wh: str, manifest: Path, base: str) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(dir=base, prefix="wh-put-remote-"))
    server, client = _serve(work, wh)
    try:
        client["WH_HOME"] = str(work / "client")
        before = _peak_mb(server.pid)
        start = time.monotonic()
        put = subprocess.run(
            ["/usr/bin/time", "-f", "%M %U %S", wh, "put", "--manifest", str(manifest)],
            env=client,
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - start
        if put.returncode != 0:
            raise SystemExit(put.stderr)
        kb, user, system = put.stderr.strip().splitlines()[-1].split()
        return {
            "pdh": put.stdout.strip(),
            "seconds": round(wall, 2),
            "client_cpu_seconds": round(float(user) + float(system), 2),
            "client_peak_mb": int(kb) // 1024,
            "controller_peak_mb_before": before,
            "controller_peak_mb_after": _peak_mb(server.pid),
        }
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--wh", action="append", required=True)
    args = parser.parse_args()
    base = "/dev/shm" if Path("/dev/shm").is_dir() else tempfile.gettempdir()
    with tempfile.TemporaryDirectory(dir=base) as d:
        manifest = Path(d) / "m.txt"
        manifest.write_bytes(_manifest(_blocks(args.streams, 1000), args.files))
        for round_ in range(args.repeat):
            for wh in args.wh:
                load = os.getloadavg()[0]
                result = _one(wh, manifest, base)
                print(json.dumps({"round": round_, "wh": wh, "load": round(load, 1), **result}))


if __name__ == "__main__":
    main()
