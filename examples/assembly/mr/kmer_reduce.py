#!/usr/bin/env python3
"""MapReduce reducer: sorted "<k-mer>\t<count>" lines on stdin -> one line a k-mer, summed."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dbg

keys, counts = dbg.parse_counts(sys.stdin.buffer.read())
keys, counts = dbg.merge_counts([keys], [counts])
sys.stdout.buffer.write(dbg.format_counts(keys, counts))
