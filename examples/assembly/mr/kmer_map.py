#!/usr/bin/env python3
"""MapReduce mapper: FASTQ records on stdin -> "<canonical k-mer>\t<count in this split>" lines.

The counts are added up inside the mapper (numpy), so a split passes on each
distinct k-mer once. k is read from config.json beside this file. Input that
is not FASTQ fails the step with one line naming the file and the record.
"""

import json
import os
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
import dbg  # noqa: E402

k = dbg.check_k(json.loads((here / "config.json").read_text())["k"])
try:
    reads = dbg.fastq_sequences(sys.stdin.buffer.read())
except dbg.BadReads as e:
    sys.exit(f"Error: {os.environ.get('WH_MAP_FILE', 'the reads')}: {e}")
keys, counts = dbg.count_kmers((line.strip() for line in reads), k)
sys.stdout.buffer.write(dbg.format_counts(keys, counts))
