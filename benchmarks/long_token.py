"""Time to read one long manifest line of a single huge token from a
scratch file (as a controller's answer is read), a piece at a time.

    .venv/bin/python benchmarks/long_token.py --mib 64 128
"""

from __future__ import annotations

import argparse
import os
import time

from warehouse.collection.storedtext import StoredText
from warehouse.manifest.parse import LONG_LINE_VAR, ManifestError, iter_raw_parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, nargs="+", default=[64, 128])
    args = parser.parse_args()
    os.environ[LONG_LINE_VAR] = "1000"
    for mib in args.mib:
        with StoredText() as text:
            text.write(b". " + b"a" * (mib << 20) + b" 0:0:x\n")
            text.done()
            start = time.perf_counter()
            try:
                for _ in iter_raw_parts(text):
                    pass
            except ManifestError:
                pass  # the token is a bad locator: found once read
            print(f"{mib} MiB token: {time.perf_counter() - start:.2f} s", flush=True)


if __name__ == "__main__":
    main()
