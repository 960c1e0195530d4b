#!/usr/bin/env python3
"""What reading a stored manifest through a scratch file costs a get, against holding it.

In one process, alternated, best of ``--passes``: the stored text of
collection ``--pdh`` in warehouse ``--home`` read whole into memory
(``load_manifest_text``, as a get did) or copied a piece at a time into an
unnamed scratch file (``load_stored_text``, as it does now), then gone
through as a whole-collection get goes through it: once for the paths
(``iter_normal_dirs``, the destination's checks) and once for the file
entries (``CollectionReader.iter_streams``, the writes).

    .venv/bin/python benchmarks/stored_text_read.py --home WH_HOME --pdh PDH --passes 9
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from warehouse.collection.reader import CollectionReader
from warehouse.collection.records import load_manifest_text, load_stored_text
from warehouse.collection.scratch import scratch_dir
from warehouse.collection.storedtext import StoredText
from warehouse.embedded import EmbeddedWarehouse
from warehouse.manifest.normal import iter_normal_dirs


def _go_through(wh: EmbeddedWarehouse, text: bytes | StoredText, pdh: str) -> int:
    files = sum(len(names or ()) for _, names, _ in iter_normal_dirs(text))
    reader = CollectionReader(wh.store, None, normal_text=text, one_pass=True, pdh=pdh)
    entries = sum(len(e) for e, _ in reader.iter_streams())
    assert entries == files
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--pdh", required=True)
    parser.add_argument("--passes", type=int, default=9)
    args = parser.parse_args()
    with EmbeddedWarehouse(args.home) as wh:
        scratch = scratch_dir(args.home)

        def held() -> int:
            text = load_manifest_text(wh.store, wh.engine, args.pdh)
            assert text is not None
            return _go_through(wh, text, args.pdh)

        def spooled() -> int:
            text = load_stored_text(wh.store, wh.engine, args.pdh, scratch)
            assert text is not None
            with text:
                return _go_through(wh, text, args.pdh)

        ways: dict[str, Callable[[], int]] = {"held": held, "scratch file": spooled}
        best = dict.fromkeys(ways, float("inf"))
        for _ in range(args.passes):
            for name, way in ways.items():
                t0 = time.perf_counter()
                files = way()
                best[name] = min(best[name], time.perf_counter() - t0)
        for name, seconds in best.items():
            print(f"{name:14} {seconds * 1000:8.1f} ms  ({files:,} files)")


if __name__ == "__main__":
    main()
