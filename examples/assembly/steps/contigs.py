"""Stage contigs: contigs.fasta (length and coverage in each header) and stats.json."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dbg
import stage

k = stage.k()
least = stage.auto(stage.params().get("min_length"), 2 * k, "min_length")
unitigs = dbg.read_unitigs(stage.read("unitigs.fasta").decode())
fasta, stats = dbg.contigs_and_stats(unitigs, least)
stage.write(
    {"contigs.fasta": fasta, "stats.json": stage.dumps(stats)}, {"contigs": stats["contigs"]}
)
