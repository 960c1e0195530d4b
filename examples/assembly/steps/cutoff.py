"""Stage cutoff: the k-mer count histogram and the coverage cutoff (first valley unless given)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dbg
import numpy as np
import stage

given = stage.params().get("min_count", "auto")
counts = [dbg.parse_counts(stage.read(p))[1] for p in stage.files()]
hist = dbg.histogram(np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64))
valley = dbg.first_valley(hist)
if given in (None, "auto"):
    chosen = valley if valley is not None else 2
elif isinstance(given, (int, float)) and not isinstance(given, bool) and given >= 0:
    chosen = given
else:
    stage.fail(f"min_count must be a number or auto, not {given!r}")
if not hist:
    # Nothing to assemble: say why here rather than write an empty assembly.
    stage.fail(
        "the reads hold no k-mer: the input has no FASTQ records, "
        "or every read is shorter than k or broken by bases other than ACGT"
    )
table = "".join(f"{c}\t{n}\n" for c, n in sorted(hist.items()))
stage.write(
    {
        "histogram.tsv": ("count\tkmers\n" + table).encode(),
        "cutoff.json": stage.dumps(
            {"valley": valley, "min_count": chosen, "auto": given in (None, "auto")}
        ),
    },
    {"distinct_kmers": sum(hist.values())},
)
