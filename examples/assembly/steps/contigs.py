"""Stage contigs: contigs.fasta (length and coverage in each header) and stats.json.

Input: ``unitigs`` (the simplify stage's output), ``reads`` (preprocess's, for
what was done to the reads) and ``graph`` (the graph stage's, for the gaps).
stats.json holds the contigs' figures and, under ``reads`` and ``gaps``, those choices.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dbg
import stage

k = stage.k_from("unitigs/k.json")
least = stage.auto(stage.params().get("min_length"), 2 * k, "min_length")
unitigs = dbg.read_unitigs(stage.read("unitigs/unitigs.fasta").decode())
fasta, figures = dbg.contigs_and_stats(unitigs, least)
stats: dict[str, object] = {**figures, "k": k}
stats["reads"] = json.loads(stage.read("reads/preprocess.json"))
gaps = json.loads(stage.read("graph/graph.json"))
simplified = json.loads(stage.read("unitigs/simplify.json"))
gaps["join_overlap"] = simplified.get("join_overlap")
gaps.update({f"overlap_{key}": n for key, n in simplified.get("joins", {}).items()})
stats["gaps"] = gaps
stage.write(
    {"contigs.fasta": fasta, "stats.json": stage.dumps(stats)},
    {"contigs": figures["contigs"]},
)
