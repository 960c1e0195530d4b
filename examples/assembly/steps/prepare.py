"""Stage prepare: the MapReduce code collection for k-mer counting, with k fixed in config.json.

Input: the preprocess stage's output (k is its ``preprocess.json``'s: given, or chosen).
"""

import sys
from pathlib import Path

here = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(here))
import stage  # noqa: E402

k = stage.k_from("preprocess.json")
stage.write(
    {
        "config.json": stage.dumps({"k": k}),
        "dbg.py": (here / "dbg.py").read_bytes(),
        "seqio.py": (here / "seqio.py").read_bytes(),
        "unitig_graph.py": (here / "unitig_graph.py").read_bytes(),
        "words.py": (here / "words.py").read_bytes(),
        "kmer_map.py": (here / "mr" / "kmer_map.py").read_bytes(),
        "kmer_reduce.py": (here / "mr" / "kmer_reduce.py").read_bytes(),
    }
)
