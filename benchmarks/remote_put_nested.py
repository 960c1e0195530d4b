#!/usr/bin/env python3
"""A streamed put (POST /api/v1/collections/text) of a chain of nested
streams, each a directory of the one before with one file: how long the
controller takes to check and record it. A hostile body's cost: its
manifest is about ``levels``² bytes, and each stream has every stream
before it as an ancestor.

A controller in this process over two keep servers (tests/cluster.py),
a user with one stored block, then one body sent from files on disk;
printed: the manifest's size, the answer and the request's wall seconds.

    python benchmarks/remote_put_nested.py --levels 10000 --work /var/tmp/nested
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from cluster import controller, keep_pool
from warehouse.remote.warehouse import RemoteWarehouse

PATH = "/api/v1/collections/text"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", type=int, default=10_000)
    ap.add_argument("--work", type=Path, required=True)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    with (
        keep_pool(args.work / "keep", 2) as pool,
        controller(
            args.work / "c.db", pool, max_manifest=1 << 20, max_spooled=1 << 30, scratch=args.work
        ) as ctl,
    ):
        token = ctl.user("alice")
        with RemoteWarehouse(ctl.url, token) as remote:
            loc = str(remote.store.put(b"hello\n").locator)
        md5 = hashlib.md5(b"hello\n").hexdigest()
        text, listing = args.work / "text", args.work / "listing"
        with text.open("w") as t, listing.open("w") as lst:
            lst.write("{")
            for k in range(args.levels):
                name = "/".join(["a"] * (k + 1))
                t.write(f"./{name} {loc} 0:6:f\n")
                lst.write(("," if k else "") + json.dumps(name + "/f") + f':"{md5}"')
            lst.write("}")

        def body() -> Iterator[bytes]:
            for f in (text, listing):
                with f.open("rb") as h:
                    while piece := h.read(1 << 20):
                        yield piece

        sizes = {"manifest_size": text.stat().st_size, "listing_size": listing.stat().st_size}
        start = time.monotonic()
        resp = httpx.post(
            ctl.url + PATH,
            params=sizes,
            content=body(),
            headers={"Authorization": f"Bearer {token}"},
            timeout=3600,
        )
        took = time.monotonic() - start
    print(f"manifest {sizes['manifest_size'] / 1e6:.1f} MB: {resp.status_code} in {took:.1f} s")


if __name__ == "__main__":
    main()
