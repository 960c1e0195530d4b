#!/usr/bin/env python3
"""What a get spends on its manifest and recorded digests, without the files.

Opens a stored collection as `wh get` does (its stored manifest text and
the user's recorded listing), goes through every file stream by stream and
looks up each file's recorded MD5 in manifest order, as a get does; prints
the best and median seconds of five such passes. Run it with another
``PYTHONPATH`` to time another build's code on the same warehouse.

    .venv/bin/python benchmarks/get_listing_read.py --home /var/tmp/get-ab/wh-home-small100k \\
        --pdh "$(cat /var/tmp/get-ab/pdh-small100k)" --user "$USER"
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from warehouse.embedded import EmbeddedWarehouse


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--home", type=Path, required=True, help="the warehouse home (WH_HOME)")
    p.add_argument("--pdh", required=True)
    p.add_argument("--user", required=True, help="whose listing (the user who stored it)")
    p.add_argument("--passes", type=int, default=5)
    args = p.parse_args()
    with EmbeddedWarehouse(args.home, user=args.user) as wh:
        seconds: list[float] = []
        files = 0
        for _ in range(args.passes):
            start = time.perf_counter()
            reader = wh.reader(args.pdh, one_pass=True)
            digests = reader.file_md5s
            if digests is None:
                print(f"{args.user} recorded no listing of {args.pdh}", file=sys.stderr)
                return 1
            files = 0
            for entries, _ in reader.iter_streams():
                for entry in entries:
                    if digests.get(entry.path) is None:
                        print(f"no recorded digest for {entry.path!r}", file=sys.stderr)
                        return 1
                    files += 1
            seconds.append(time.perf_counter() - start)
    print(f"{files} files: best {min(seconds):.3f} s, median {statistics.median(seconds):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
