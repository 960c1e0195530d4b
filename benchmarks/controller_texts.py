"""The controller's side of ``GET /collections/{pdh}/manifest`` and ``/listing``.

The million-file collection of ``million_get.py`` (``--streams`` x
``--files``, with the caller's listing) is recorded on a ``wh serve`` run
with each build's sources on ``PYTHONPATH`` in turn (builds alternated,
``--rounds`` times); each request is then made 3 times and reported as the
median wall time and the median growth of the controller's peak resident
size over the request (``clear_refs`` resets the peak first).

    .venv/bin/python benchmarks/controller_texts.py --src src --src MAIN_CHECKOUT/src
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from million_get import _blocks, _manifest, _record, _serve


def _status(pid: int, key: str) -> int:
    """A ``/proc/PID/status`` figure in KiB."""
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith(key)).split()[1])


def _measure(src: str, wh_bin: str, streams: int, files: int) -> dict[str, tuple[float, float]]:
    os.environ["PYTHONPATH"] = src  # the server started below runs this build
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    work = Path(tempfile.mkdtemp(prefix="wh-controller-texts-", dir=base))
    blocks = _blocks(streams, 10 * files)
    text, digests = _manifest(blocks, files)
    server, remote = _serve(work, wh_bin)
    try:
        from warehouse.remote.warehouse import RemoteWarehouse

        with RemoteWarehouse(remote["WH_URL"], remote["WH_TOKEN"]) as rwh:
            pdh = _record(rwh, blocks, text, digests)
        del blocks, text, digests
        api = f"{remote['WH_URL']}/api/v1/collections/{pdh}"
        auth = {"Authorization": f"Bearer {remote['WH_TOKEN']}"}
        out: dict[str, tuple[float, float]] = {}
        for what in ("/manifest", "/listing"):
            walls: list[float] = []
            growth: list[float] = []
            for _ in range(3):
                rss = _status(server.pid, "VmRSS")
                with open(f"/proc/{server.pid}/clear_refs", "w") as f:
                    f.write("5")
                start = time.perf_counter()
                answer = httpx.get(api + what, headers=auth, timeout=600)
                walls.append(time.perf_counter() - start)
                growth.append((_status(server.pid, "VmHWM") - rss) / 1024)
                assert answer.status_code == 200, answer.status_code
            out[what] = (statistics.median(walls), statistics.median(growth))
        return out
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--src", action="append", required=True, help="a build's src (repeatable)")
    parser.add_argument("--wh", default=".venv/bin/wh")
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    for _ in range(args.rounds):
        for src in args.src:
            load = os.getloadavg()[0]
            for what, (wall, growth) in _measure(src, args.wh, args.streams, args.files).items():
                print(f"{src} {what}: {wall:.2f} s, peak +{growth:.0f} MB (load {load:.1f})")


if __name__ == "__main__":
    main()
