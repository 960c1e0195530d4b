"""Stage pairs_code: the pairs' MapReduce code, with the contigs it places reads on.

Input: the contigs stage's output. Output: ``contigs.txt`` (the contigs, one
a line, in contigs.fasta's order: a contig's number is its line), the
mapper and reducer (pairs/) and ``readmap.py``, which they import.
"""

import sys
from pathlib import Path

here = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(here))
import dbg  # noqa: E402
import stage  # noqa: E402

contigs = [seq for _, seq in dbg.read_fasta(stage.read("contigs.fasta").decode())]
stage.write(
    {
        "contigs.txt": "".join(seq + "\n" for seq in contigs).encode(),
        "readmap.py": (here / "readmap.py").read_bytes(),
        "pair_map.py": (here / "pairs" / "pair_map.py").read_bytes(),
        "pair_reduce.py": (here / "pairs" / "pair_reduce.py").read_bytes(),
    },
    {"contigs": len(contigs)},
)
