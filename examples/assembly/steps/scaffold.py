"""Stage scaffold: contigs ordered and oriented by read pairs; scaffolds.fasta, contigs.fasta,
stats.json (NG50 of each).

Input: ``pairs`` (the pairs' MapReduce: insert sizes and links),
``contigs`` (the contigs stage's output) and ``cutoff`` (the k-mer count
histogram, for the genome size when it is not given). Without pairs every
contig is a scaffold of its own.
"""

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dbg
import scaffold_lib as sl
import stage

p = stage.params()
min_links = stage.auto(p.get("min_links"), 5, "min_links")
if min_links < 1:
    stage.fail(f"min_links must be at least 1, not {min_links}")
given_size = stage.auto(p.get("genome_size"), 0, "genome_size")
given_insert = stage.auto(p.get("insert_size"), 0, "insert_size")
given_sd = stage.auto(p.get("insert_sd"), 0, "insert_sd")

records = dbg.read_fasta(stage.read("contigs/contigs.fasta").decode())
contigs = [seq for _, seq in records]
coverage = [sl.coverage_of(h) for h, _ in records]
try:
    text = "".join(stage.read(f).decode() for f in stage.files("pairs"))
    pairs = sl.parse_pair_output(text)
except ValueError as e:
    stage.fail(str(e))

insert = None
if given_insert:
    # A given size without a spread: a tenth of it, as library preparations usually give.
    insert = sl.Insert(float(given_insert), float(given_sd or max(1, given_insert // 10)), 0)
scaffolds, info = sl.scaffold(contigs, coverage, pairs, min_links, insert)
info["insert_rule"] = "given" if given_insert else "pairs within one contig"

if given_size:
    genome_size, rule = given_size, "given"
else:
    cutoff = json.loads(stage.read("cutoff/cutoff.json"))
    rows = stage.read("cutoff/histogram.tsv").decode().splitlines()[1:]
    counts = {int(c): int(n) for c, n in (row.split("\t") for row in rows)}
    genome_size = sl.genome_size_from_histogram(counts, float(cutoff["min_count"]))
    rule = "distinct k-mers seen at least min_count times"
stats: dict[str, Any] = {
    "genome_size": genome_size,
    "genome_size_rule": rule,
    "contigs": sl.summary([len(c) for c in contigs], genome_size),
    "scaffolds": sl.summary([len(s.seq) for s in scaffolds], genome_size),
    "scaffolding": info,
}
fasta = sl.fasta(
    (f"scaffold{i} length={len(s.seq)} contigs={s.contigs} gaps={s.gaps} n={s.n_bases}", s.seq)
    for i, s in enumerate(scaffolds, 1)
)
stage.write(
    {
        "scaffolds.fasta": fasta,
        "contigs.fasta": stage.read("contigs/contigs.fasta"),
        "stats.json": stage.dumps(stats),
    },
    {"scaffolds": len(scaffolds), "joins": int(info.get("joins", 0))},
)
