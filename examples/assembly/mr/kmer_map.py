#!/usr/bin/env python3
"""MapReduce mapper: FASTQ records on stdin -> "<canonical k-mer>\t<count in this split>" lines.

The counts are added up inside the mapper (numpy), so a split passes on each
distinct k-mer once. k is read from config.json beside this file.
"""

import json
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
import dbg  # noqa: E402

k = dbg.check_k(json.loads((here / "config.json").read_text())["k"])
lines = sys.stdin.buffer.read().split(b"\n")
reads = (line.strip() for line in lines[1::4])
keys, counts = dbg.count_kmers(reads, k)
sys.stdout.buffer.write(dbg.format_counts(keys, counts))
