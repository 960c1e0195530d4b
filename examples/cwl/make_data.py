"""Writes data/ref.fa and data/reads.fq: a small made-up reference and reads
sampled from it with a few substitutions, the same every time (seeded)."""

from __future__ import annotations

import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    rng = random.Random(35)
    chroms = {name: "".join(rng.choice("ACGT") for _ in range(3000)) for name in ("chrA", "chrB")}
    (HERE / "data").mkdir(exist_ok=True)
    with open(HERE / "data" / "ref.fa", "w") as f:
        for name, seq in chroms.items():
            f.write(f">{name}\n")
            f.writelines(seq[i : i + 60] + "\n" for i in range(0, len(seq), 60))
    with open(HERE / "data" / "reads.fq", "w") as f:
        for i in range(300):
            name = rng.choice(sorted(chroms))
            start = rng.randrange(0, len(chroms[name]) - 100)
            read = list(chroms[name][start : start + 100])
            for _ in range(rng.randrange(3)):  # a few substitutions
                j = rng.randrange(100)
                read[j] = rng.choice("ACGT".replace(read[j], ""))
            if rng.random() < 0.5:  # either strand
                read = list("".join(read)[::-1].translate(str.maketrans("ACGT", "TGCA")))
            f.write(f"@read{i}\n{''.join(read)}\n+\n{'I' * 100}\n")


if __name__ == "__main__":
    main()
