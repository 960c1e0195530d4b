"""Write the job file of scatter.cwl: N counts (1..N) over a small text.

python make_job.py N DIR    # DIR/job.json and DIR/text.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    n, out = int(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    # 1,000 short lines: every head -n k of it differs, for k up to 1,000.
    (out / "text.txt").write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    job = {"text": {"class": "File", "path": "text.txt"}, "counts": list(range(1, n + 1))}
    (out / "job.json").write_text(json.dumps(job) + "\n")


if __name__ == "__main__":
    main()
