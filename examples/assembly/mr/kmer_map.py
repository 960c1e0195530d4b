#!/usr/bin/env python3
"""MapReduce mapper: clean reads on stdin -> "<canonical k-mer>\t<count in this split>" lines.

The reads are the preprocess stage's (one a line). The counts are added up
inside the mapper (numpy), so a split passes on each distinct k-mer once. k
is read from config.json beside this file.
"""

import json
import os
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
import dbg  # noqa: E402

k = dbg.check_k(json.loads((here / "config.json").read_text())["k"])
data = sys.stdin.buffer.read()
if not os.environ.get("WH_MAP_FILE", "reads.seq").endswith(".seq"):
    sys.exit(0)  # the preprocess stage's report beside the reads
# One read a line, a pair's mates split by a tab: no k-mer spans a newline, a tab or an N.
keys, counts = dbg.count_kmers(data.split(b"\n"), k)
sys.stdout.buffer.write(dbg.format_counts(keys, counts))
