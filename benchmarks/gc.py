"""The GC mark phase over many synthesized collections.

Builds an embedded warehouse whose catalog holds COLLECTIONS named
collections whose manifests together reference BLOCKS distinct blocks
(manifest text stored as blocks, as `wh put` stores it; the data blocks
themselves are not needed to mark), then times the mark: reading the roots
from the catalog, reading every manifest from the volume and collecting the
block hashes.

    .venv/bin/python benchmarks/gc.py --workdir /tmp/gcbench [--repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from pathlib import Path

from warehouse import catalog
from warehouse.blocks import MAX_BLOCK_SIZE
from warehouse.embedded import EmbeddedWarehouse
from warehouse.gc.mark import mark
from warehouse.gc.roots import find_roots
from warehouse.gc.settings import load_settings


def synthesize(wh: EmbeddedWarehouse, collections: int, blocks: int) -> None:
    per = blocks // collections
    extra = blocks - per * collections
    n = 0
    for c in range(collections):
        count = per + (1 if c < extra else 0)
        lines = []
        for s in range(0, count, 1000):  # one stream per 1,000 blocks
            locs = []
            for _ in range(min(1000, count - s)):
                md5 = hashlib.md5(n.to_bytes(8, "little")).hexdigest()
                locs.append(f"{md5}+{67108864 if n % 7 else 1234}")
                n += 1
            size = sum(int(x.split("+")[1]) for x in locs)
            lines.append(f"./d{s} {' '.join(locs)} 0:{size}:file\\040{c}.dat\n")
        text = "".join(lines).encode()
        stored = [
            wh.store.put(text[i : i + MAX_BLOCK_SIZE]).locator
            for i in range(0, len(text), MAX_BLOCK_SIZE)
        ]
        wh.store.flush()
        pdh = f"{hashlib.md5(text).hexdigest()}+{len(text)}"
        catalog.add_collection(wh.engine, pdh, " ".join(str(x) for x in stored), 0, 1, "bench")
        catalog.set_name(wh.engine, f"c{c}", pdh, expect=None, user="bench")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--collections", type=int, default=1151)
    ap.add_argument("--blocks", type=int, default=588_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    home = args.workdir / "gc-home"
    shutil.rmtree(home, ignore_errors=True)
    with EmbeddedWarehouse(home, user="bench") as wh:
        t0 = time.perf_counter()
        synthesize(wh, args.collections, args.blocks)
        setup = time.perf_counter() - t0
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            s = load_settings(wh.engine)
            roots = find_roots(
                wh.engine, time.time(), s.history_retention, s.job_retention, s.signature_ttl
            )
            result = mark(
                wh.engine, lambda loc: wh.volume.get(loc.md5), roots.pdhs, roots.fragments
            )
            times.append(time.perf_counter() - t)
        expected = args.blocks + len(roots.pdhs)  # data blocks + one manifest block each
        assert len(result.marked) == expected, (len(result.marked), expected)
    out = {
        "collections": result.roots,
        "marked": len(result.marked),
        "setup_s": round(setup, 1),
        "mark_s": [round(x, 2) for x in times],
        "best_s": round(min(times), 2),
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"mark: {out['collections']} collections, {out['marked']} blocks marked, "
            f"best {out['best_s']} s of {out['mark_s']} (setup {out['setup_s']} s)"
        )


if __name__ == "__main__":
    main()
