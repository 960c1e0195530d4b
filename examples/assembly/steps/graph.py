"""Stage graph: solid k-mers (seen at least kmer_min_count times) and each one's successors.

K-mers seen fewer times are kept where they bridge a gap between a dead end
and a dead start of the solid graph (dbg.bridges), at most bridge_length of them.

Input: ./counts (the k-mer count) and ./code (the count's code, with k in config.json).
"""

import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import json

import dbg
import numpy as np
import stage

# k as the counting used it: from the count's code collection (the prepare stage's output).
k = dbg.check_k(json.loads(stage.read("code/config.json"))["k"])
least = stage.auto(stage.params().get("kmer_min_count", 2), 2, "kmer_min_count")
parts = [dbg.parse_counts(stage.read(p)) for p in stage.files("counts")]
keys, counts = dbg.merge_counts([p[0] for p in parts], [p[1] for p in parts])
bridge = stage.auto(stage.params().get("bridge_length"), 3 * k, "bridge_length")
solid = counts >= least
gaps: dict[str, object] = {"bridge_length": bridge}
report: dict[str, int] = {}
no_bridges = np.zeros_like(solid)
bridged = dbg.bridges(keys, counts, solid, k, bridge, report) if least > 1 else no_bridges
solid |= bridged
nodes, counts = keys[solid], counts[solid]
succ = dbg.successors(nodes, k)
gaps.update(report)
# Both sides of a gap are dead ends (one on each strand); so is each end of a contig.
_, _, _, behind = dbg.long_sides(succ, k)
gaps["dead_ends_after_bridges"] = int((((succ >= 0).sum(axis=1) == 0) & behind).sum())
gaps["rule"] = (
    "a dead end is bridged by the rarer k-mers of reads when one walk of at most bridge_length "
    "k-mers reaches a dead start; otherwise the break is kept (the simplify stage may join it)"
)


def npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


stage.write(
    {
        "nodes.npy": npy(nodes),
        "counts.npy": npy(counts),
        "successors.npy": npy(succ),
        "k.json": stage.dumps({"k": k}),
        "graph.json": stage.dumps(gaps),
    },
    {
        "kmers": len(keys),
        "solid_kmers": len(nodes),
        "bridged_kmers": int(bridged.sum()),
        "edges": int((succ >= 0).sum()) // 2,
    },
)
