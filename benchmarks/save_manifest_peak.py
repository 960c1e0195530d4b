"""Peak memory of ``save_manifest`` recording a million files' listing.

The collection of ``million_get.py`` (``--streams`` streams of ``--files``
files of 10 bytes) is built and its blocks stored untimed; then one
``save_manifest(manifest, listing)`` is timed, with the peak resident size
reset just before it (``/proc/self/clear_refs``), so that what it adds
over what the process already holds shows. Run it with each build on
``PYTHONPATH`` in turn:

    PYTHONPATH=/path/to/other/src .venv/bin/python benchmarks/save_manifest_peak.py
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from million import _blocks
from million_get import _manifest

import warehouse
from warehouse.embedded import EmbeddedWarehouse
from warehouse.manifest import Manifest


def _status(field: str) -> int:
    """A line of /proc/self/status, in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) >> 10
    raise SystemExit(f"no {field} in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=100)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wh-save-peak-"))
    try:
        blocks = _blocks(args.streams, 10 * args.files)
        text, digests = _manifest(blocks, args.files)
        with EmbeddedWarehouse(work / "home") as wh:
            for block in blocks:
                wh.store.put(block)
            wh.store.flush()
            del blocks
            manifest = Manifest.parse(text)
            _ = manifest.normalized().pdh  # made before, as a caller has it
            before = _status("VmRSS")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # the peak starts again from now
            start = time.perf_counter()
            wh.save_manifest(manifest, digests)
            took = time.perf_counter() - start
            peak = _status("VmHWM")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{warehouse.__file__}: save_manifest {took:.2f} s, resident before {before} MB, "
        f"peak during {peak} MB (+{peak - before})"
    )


if __name__ == "__main__":
    main()
