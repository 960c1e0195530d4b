"""Stage unitigs: linear chains of the k-mer graph compressed into unitigs."""

import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dbg
import numpy as np
import stage


def load(name: str) -> np.ndarray:
    out: np.ndarray = np.load(io.BytesIO(stage.read(name)), allow_pickle=False)
    return out


k = stage.k_from("k.json")
unitigs = dbg.kmer_unitigs(load("nodes.npy"), load("counts.npy"), k, load("successors.npy"))
stage.write(
    {
        "unitigs.fasta": dbg.write_unitigs(dbg.Unitig(*u) for u in unitigs),
        "k.json": stage.dumps({"k": k}),
    },
    {"unitigs": len(unitigs)},
)
