"""Stage simplify: drop low-coverage unitigs, tips, bubble arms; merge chains; until no change.

Then join the gaps no read spans where a dead end overlaps one dead start
(unitig_graph.join_overlaps).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dbg
import stage

k = stage.k_from("unitigs/k.json")
p = stage.params()
cutoff = json.loads(stage.read("cutoff/cutoff.json"))
how = dbg.Simplify(
    k,
    min_count=float(cutoff["min_count"]),
    tip_length=stage.auto(p.get("tip_length"), 2 * k, "tip_length"),
    # 3k, and at least 100 bases (as Velvet bounds its branches): at small k two errors close
    # together, joined by a bridge, make an arm longer than 3k.
    bubble_size=stage.auto(p.get("bubble_size"), max(3 * k, 100), "bubble_size"),
    remove_tips=stage.switch(p.get("remove_tips", True), "remove_tips"),
    remove_bubbles=stage.switch(p.get("remove_bubbles", True), "remove_bubbles"),
)
graph = dbg.UnitigGraph(dbg.read_unitigs(stage.read("unitigs/unitigs.fasta").decode()), k)
graph = dbg.simplify(graph, how)
# Gaps no read spans: a dead end joined to the one dead start it overlaps (0: never).
overlap = stage.auto(p.get("join_overlap"), (k + 1) // 2, "join_overlap")
least = stage.auto(p.get("min_length"), 2 * k, "min_length")
joins: dict[str, int] = {}
if overlap:
    graph = dbg.join_overlaps(graph, overlap, least, joins)
settings = {
    "min_count": how.min_count,
    "tip_length": how.tip_length,
    "bubble_size": how.bubble_size,
    "remove_tips": how.remove_tips,
    "remove_bubbles": how.remove_bubbles,
}
stage.write(
    {
        "unitigs.fasta": dbg.write_unitigs(graph.unitigs),
        "k.json": stage.dumps({"k": k}),
        "simplify.json": stage.dumps(
            {"settings": settings, "rounds": how.log, "joins": joins, "join_overlap": overlap}
        ),
    },
    {"rounds": len(how.log), "unitigs": len(graph.unitigs)},
)
