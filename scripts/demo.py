"""`make demo`: store a sample data set, name it, get it back and check it.

Runs the real `wh` command against a fresh embedded warehouse in
demo-out/warehouse, and says what it did at each step.
"""

from __future__ import annotations

import filecmp
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

OUT = Path("demo-out")
WH = str(Path(sys.executable).with_name("wh"))


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def wh(*args: str) -> str:
    print("$ wh " + " ".join(args), flush=True)
    env = {**os.environ, "WH_HOME": str(OUT / "warehouse")}
    done = subprocess.run([WH, *args], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"wh {args[0]} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def make_sample(root: Path) -> tuple[int, int]:
    """A few hundred files in nested directories: text, gzip, empty, odd names."""
    rng = random.Random(20081)
    words = [
        "acgt",
        "gatc",
        "tata",
        "ccgg",
        "read",
        "quality",
        "lane",
        "tile",
        "flowcell",
        "sample",
    ]
    files = 0
    total = 0
    for run in range(3):
        for lane in range(1, 5):
            d = root / f"run {run}" / f"lane{lane}"
            d.mkdir(parents=True)
            for tile in range(25):
                text = "\n".join(
                    " ".join(rng.choices(words, k=12)) for _ in range(rng.randint(5, 400))
                )
                data = text.encode()
                if tile % 3 == 0:
                    (d / f"tile{tile:03d}.txt.gz").write_bytes(gzip.compress(data, mtime=0))
                else:
                    (d / f"tile{tile:03d}.txt").write_bytes(data)
                files += 1
                total += len(data)
        (root / f"run {run}" / "EMPTY").write_bytes(b"")
        (root / f"run {run}" / "notes: ä, ö, ü.txt").write_text(f"run {run} notes\n")
        files += 2
    (root / "results" / "not yet").mkdir(parents=True)
    (root / "reference").mkdir()
    (root / "reference" / "genome.fa").write_bytes(rng.randbytes(3 * 1024 * 1024))
    files += 1
    return files, total


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    sample = OUT / "sample"
    say("Making a sample data set")
    files, _ = make_sample(sample)
    print(f"{files} files under {sample}, some gzip-compressed, some empty, names with spaces")

    say("Storing it in a fresh embedded warehouse, named 'sample'")
    pdh = wh("put", str(sample), "--name", "sample").strip()
    print(f"collection key (PDH): {pdh}")

    # The resume cache does not show here: it keeps only directories whose
    # files average 32 KiB or more, and only files older than 2 seconds.
    say("Storing it again: the same PDH, every block already stored, nothing new is written")
    again = wh("put", str(sample), "--json")
    print(again.strip())

    say("Looking inside")
    print(wh("ls", "-l", "sample/reference"), end="")
    print(wh("name", "log", "sample"), end="")

    say("Getting it back and checking every byte")
    restored = OUT / "restored"
    listing = wh("get", "sample", str(restored))
    print(f"{len(listing.splitlines())} files written and verified; first lines of the listing:")
    print("".join(listing.splitlines(keepends=True)[:3]), end="")
    cmp = filecmp.dircmp(sample, restored)
    if not _identical(cmp):
        sys.exit("the restored tree differs from the original")
    print("restored tree is identical to the original")

    say("Done")
    print(f"warehouse: {OUT / 'warehouse'}; try: WH_HOME={OUT / 'warehouse'} {WH} ls sample")

    say("A batch job: zhash hashes every file, gzip ones decompressed, one step per stream")
    print(wh("job", "submit", "builtin:zhash", "--input", "sample", "--wait"), end="")
    listing = wh("job", "ls")
    print(listing, end="")
    # Piped, the listing is tab-separated under a header line.
    rows = [line.split("\t") for line in listing.splitlines()[1:]]
    job_id = next(r[0] for r in rows if r[1] == "complete")
    print(wh("job", "show", job_id), end="")
    out = json.loads(wh("job", "show", job_id, "--json"))["output_pdh"]
    print(f"(the --json form, for scripts, gives the output: {out})")
    print("".join(wh("cat", f"{out}/run 0/lane1/md5sum.txt").splitlines(keepends=True)[:8]), end="")
    print(wh("job", "submit", "builtin:zhash", "--input", "sample", "--wait"), end="")
    print("(submitted again: answered from reuse, no step ran)")

    say("A workflow: hashes and word counts side by side, then one combined report")
    wf = OUT / "report.wf.yml"
    wf.write_text(WORKFLOW)
    print(wf.read_text(), end="")
    print(wh("workflow", "run", str(wf), "--name-outputs", "demo", "--wait"), end="")
    print(wh("ls", "demo.report"), end="")
    print(wh("workflow", "run", str(wf), "--name-outputs", "demo", "--wait"), end="")
    print("(run again: every job reused)")
    print(wh("lineage", "demo.report"), end="")


# The workflow the demo runs (docs/workflows.md): two jobs over the sample,
# then a copy of both outputs under ./hashes and ./words.
WORKFLOW = """workflow: report
inputs:
  data: {default: sample}
jobs:
  hashes:
    function: builtin:zhash
    input: $data
  words:
    function: builtin:wordcount
    input: $data
  report:
    function: builtin:copy
    input: {hashes: $hashes, words: $words}
outputs:
  report: $report
"""


def _identical(cmp: filecmp.dircmp[str]) -> bool:
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
    if mismatch or errors:
        return False
    return all(_identical(sub) for sub in cmp.subdirs.values())


if __name__ == "__main__":
    main()
