#!/usr/bin/env python3
"""MapReduce reducer: the pairs mapper's lines, sorted by key -> the lines scaffold_lib reads.

``insert<TAB>size<TAB>pairs`` (counts added up), ``odd<TAB>pairs``, one
``link<TAB>end_a<TAB>bases_a<TAB>end_b<TAB>bases_b`` line a linking pair and
one ``extend<TAB>end<TAB>bases`` line a read reaching past a contig's end.
"""

import sys
from collections import Counter

inserts: Counter[int] = Counter()
odd = 0
out = sys.stdout
for line in sys.stdin:
    key, _, value = line.rstrip("\n").partition("\t")
    if key[:1] == "I":
        inserts[int(key[1:])] += int(value)
    elif key == "O":
        odd += int(value)
    elif key[:1] == "X":
        out.write(f"extend\t{key[1:]}\t{value}\n")
    elif key[:1] == "L":
        ea, eb = key[1:].split(".")
        da, db = value.split()
        out.write(f"link\t{ea}\t{da}\t{eb}\t{db}\n")
    else:
        sys.exit(f"Error: not a line of the pairs mapper: {line[:60]!r}")
for size, n in sorted(inserts.items()):
    out.write(f"insert\t{size}\t{n}\n")
if odd:
    out.write(f"odd\t{odd}\n")
