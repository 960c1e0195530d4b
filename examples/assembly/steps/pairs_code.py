"""Stage pairs_code: the pairs' MapReduce code, with the contigs it places reads on.

Input: the contigs stage's output. Output: ``contigs.txt`` (the contigs, one
a line, in contigs.fasta's order: a contig's number is its line),
``repeats.json`` (the numbers of the contigs taken for repeats), the mapper
and reducer (pairs/) and ``readmap.py``, which they import.
"""

import sys
from pathlib import Path

here = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(here))
import dbg  # noqa: E402
import scaffold_lib as sl  # noqa: E402
import stage  # noqa: E402

records = dbg.read_fasta(stage.read("contigs.fasta").decode())
contigs = [seq for _, seq in records]
# Repeats place no read (readmap.build_index): the scaffold stage finds the same ones.
repeats = sl.repeats([sl.coverage_of(h) for h, _ in records], [len(c) for c in contigs])
stage.write(
    {
        "contigs.txt": "".join(seq + "\n" for seq in contigs).encode(),
        "repeats.json": stage.dumps(sorted(repeats)),
        "readmap.py": (here / "readmap.py").read_bytes(),
        "pair_map.py": (here / "pairs" / "pair_map.py").read_bytes(),
        "pair_reduce.py": (here / "pairs" / "pair_reduce.py").read_bytes(),
    },
    {"contigs": len(contigs), "repeats": len(repeats)},
)
