#!/usr/bin/env python3
"""MapReduce mapper: the preprocess stage's reads on stdin -> what their pairs tell.

Both mates of each pair (one line, split by a tab) are placed on the contigs
(contigs.txt beside this file, one a line) by their k-mers found once in them; lines
out (readmap.mapper_lines): ``I<size>\t<pairs>`` for pairs within one
contig, ``O\t<pairs>`` for pairs on one contig not facing each other, and
``L<end_a>.<end_b>\t<bases_a> <bases_b>`` for each pair linking two contigs,
so the reducers get the links of two contig ends together (as PGA's mate
bundling does), and ``X<end>\t<bases>`` for the bases of a read reaching
past a contig's end.
"""

import json
import os
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
import readmap as rm  # noqa: E402

BATCH = 20_000  # pairs placed at once: bounds the mapper's arrays to some 100 MB

if not os.environ.get("WH_MAP_FILE", "reads.seq").endswith(".seq"):
    sys.exit(0)  # the preprocess stage's report beside the reads
repeats = json.loads((here / "repeats.json").read_text())
index = rm.build_index((here / "contigs.txt").read_text().split(), skip=repeats)
first, second = rm.pairs_of(sys.stdin.buffer.read().split(b"\n"))
out = sys.stdout.buffer
for i in range(0, len(first), BATCH):
    a, b = first[i : i + BATCH], second[i : i + BATCH]
    one, two = rm.place_reads(index, a), rm.place_reads(index, b)
    out.write(rm.mapper_lines(rm.pair_facts(one, two, index.lengths)))
    past = rm.overhangs(one, a, index.lengths) + rm.overhangs(two, b, index.lengths)
    out.write(rm.overhang_lines(past))
