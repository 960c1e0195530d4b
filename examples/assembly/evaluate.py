"""Contigs against the reference they came from: identity, genome fraction, NG50, misassemblies.

    python examples/assembly/evaluate.py reference.fasta contigs.fasta [--min-length 500]

Alignment by minimap2 through ``mappy``. A contig counts as misassembled when
its best alignment covers less than 95% of it, or when another alignment of
at least 100 bases puts a part of it elsewhere.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dbg


def evaluate(reference: str, contigs: list[str], min_length: int = 500) -> dict[str, Any]:
    import mappy

    aligner = mappy.Aligner(seq=reference, preset="asm5")
    covered: list[tuple[int, int]] = []
    matches = aligned = 0
    misassembled = unaligned = 0
    worst = 1.0
    used = [c for c in contigs if len(c) >= min_length]
    for seq in used:
        hits = [h for h in aligner.map(seq) if h.is_primary or h.blen >= 100]
        if not hits:
            unaligned += 1
            continue
        best = max(hits, key=lambda h: h.mlen)
        identity = best.mlen / best.blen
        worst = min(worst, identity)
        matches += best.mlen
        aligned += best.blen
        if best.q_en - best.q_st < 0.95 * len(seq) or any(
            h is not best and h.q_en - h.q_st >= 100 for h in hits
        ):
            misassembled += 1
        covered.extend((h.r_st, h.r_en) for h in hits)
    covered.sort()
    total = 0
    end = -1
    for st, en in covered:
        if en > end:
            total += en - max(st, end)
            end = en
    lengths = [len(c) for c in used]
    return {
        "contigs": len(used),
        "genome_fraction": total / len(reference),
        "identity": matches / aligned if aligned else 0.0,
        "worst_identity": worst,
        "misassemblies": misassembled,
        "unaligned": unaligned,
        "n50": dbg.n50(lengths),
        "ng50": dbg.n50(lengths, len(reference)),
        "longest": max(lengths, default=0),
    }


def fail(message: str, code: int) -> NoReturn:
    print(f"Error: {message}", file=sys.stderr)
    raise SystemExit(code)


def read(path: Path) -> list[tuple[str, str]]:
    """A FASTA file's records; a missing or unreadable file ends the program with one line."""
    try:
        return dbg.read_fasta(path.read_text())
    except FileNotFoundError:
        fail(f"{path}: no such file", 4)
    except (OSError, UnicodeDecodeError) as e:
        fail(f"{path}: cannot read it as FASTA text ({e.__class__.__name__})", 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reference", type=Path)
    ap.add_argument("contigs", type=Path)
    ap.add_argument("--min-length", type=int, default=500)
    a = ap.parse_args()
    ref = "".join(s for _, s in read(a.reference))
    if not ref:
        fail(f"{a.reference}: no FASTA record: the reference must be FASTA", 2)
    contigs = [s for _, s in read(a.contigs)]
    print(json.dumps(evaluate(ref, contigs, a.min_length), indent=1))


if __name__ == "__main__":
    main()
