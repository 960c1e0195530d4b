"""Issue 40's must-hold checks of `wh mount`, as a new user would make them,
and the mount's memory while they run.

    .venv/bin/python benchmarks/mount_checks.py                  # 100,000 files, 2 GB file
    .venv/bin/python benchmarks/mount_checks.py --files 2000 --big-mb 64   # a quick run
    .venv/bin/python benchmarks/mount_checks.py --files 1000000 --big-mb 0 --no-md5sum
    .venv/bin/python benchmarks/mount_checks.py --files 1000000 --per-dir 0 --big-mb 0  # flat

On an embedded warehouse of its own (a temporary $WH_HOME, or --workdir):

- puts a tree of --files small files (--per-dir a directory, 1,000 by
  default; 0: all in one flat directory) and one file of
  --big-mb MiB, and mounts the warehouse (`wh mount`, a process of its own);
- `md5sum -c` of `wh get KEY --no-write`'s listing, run inside
  mnt/by_name/KEY: every file read through the mount has the MD5 `wh get`
  lists (for both collections);
- `ls -lRn` through the mount: every file's size equals `wh ls -l`'s (the
  manifest's), and no file is missing or extra;
- the mount's peak resident memory (VmHWM) after each step, and its
  resident memory after the mount came up.

Exits 1 if a check fails (a measurement otherwise: no goal on time or memory).
Needs FUSE 3 (fusermount3, /dev/fuse) and the [mount] extra.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def wh(env: dict[str, str], *args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(BIN / "wh"), *args], env=env, cwd=cwd, capture_output=True, text=True
    )
    if done.returncode:
        sys.exit(f"wh {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return done.stdout


def memory(pid: int) -> dict[str, int]:
    """The process's resident and peak resident memory, in KiB."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def make_small(root: Path, files: int, per_dir: int) -> None:
    if not per_dir:
        root.mkdir(parents=True)
    for i in range(files):
        d = root / f"d{i // per_dir:04}" if per_dir else root
        if per_dir and i % per_dir == 0:
            d.mkdir(parents=True)
        (d / f"f{i:07}.txt").write_bytes(os.urandom(16 + i % 200))


def ls_sizes(root: Path) -> dict[str, int]:
    """Every file's size as `ls -lRn` shows it, by path below ``root``."""
    done = subprocess.run(["ls", "-lRn", str(root)], capture_output=True, text=True, check=True)
    sizes: dict[str, int] = {}
    here = ""
    for line in done.stdout.splitlines():
        if line.endswith(":") and not line.startswith(("-", "d", "total")):
            here = str(Path(line[:-1]).relative_to(root))
            here = "" if here == "." else here + "/"
        elif line.startswith("-"):
            fields = line.split(None, 8)
            sizes[here + fields[8]] = int(fields[4])
    return sizes


def wh_sizes(env: dict[str, str], key: str) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for line in wh(env, "ls", "-l", key).splitlines():
        size, path = line.split(None, 1)
        sizes[path] = int(size)
    return sizes


def check(
    env: dict[str, str], mnt: Path, key: str, work: Path, pid: int, md5: bool = True
) -> dict[str, object]:
    listing = work / f"{key}.md5"
    listing.write_text(wh(env, "get", key, "--no-write") if md5 else "")
    start = time.perf_counter()
    done = subprocess.run(
        ["md5sum", "-c", "--quiet", str(listing)] if md5 else ["true"],
        cwd=mnt / "by_name" / key,
        capture_output=True,
        text=True,
    )
    md5_s = time.perf_counter() - start
    after_md5 = memory(pid)
    start = time.perf_counter()
    through = ls_sizes(mnt / "by_name" / key)
    ls_s = time.perf_counter() - start
    listed = wh_sizes(env, key)
    result: dict[str, object] = {
        "files": len(listed),
        "md5sum_ok": done.returncode == 0 and not done.stdout.strip() if md5 else None,
        "md5sum_s": round(md5_s, 2),
        "ls_sizes_ok": through == listed,
        "ls_s": round(ls_s, 2),
        "peak_kib_after_md5sum": after_md5["VmHWM"],
        "peak_kib_after_ls": memory(pid)["VmHWM"],
    }
    if result["md5sum_ok"] is False:
        result["md5sum_said"] = (done.stdout + done.stderr)[-2000:]
    if not result["ls_sizes_ok"]:
        wrong = sorted(set(through.items()) ^ set(listed.items()))[:10]
        result["ls_differs"] = [f"{p}: {s}" for p, s in wrong]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument(
        "--per-dir", type=int, default=1000, help="small files a directory (0: one flat directory)"
    )
    parser.add_argument("--big-mb", type=int, default=2048, help="0: no large file")
    parser.add_argument("--workdir", type=Path, help="kept (default: a temporary directory)")
    parser.add_argument(
        "--no-md5sum", action="store_true", help="only ls -lRn (the listing's memory alone)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if shutil.which("fusermount3") is None or not os.path.exists("/dev/fuse"):
        sys.exit("needs FUSE 3: fusermount3 and /dev/fuse")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="mount-checks-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env.update(WH_HOME=str(work / "home"), WH_USER="checker")
    keys: list[str] = []
    if args.files:
        make_small(work / "small", args.files, args.per_dir)
        # Left until the end: removing a million files one by one takes long.
        wh(env, "put", str(work / "small"), "--name", "small")
        keys.append("small")
    if args.big_mb:
        (work / "big").mkdir()
        with open(work / "big" / "big.bin", "wb") as f:
            for _ in range(args.big_mb):
                f.write(os.urandom(1 << 20))
        wh(env, "put", str(work / "big"), "--name", "big")
        shutil.rmtree(work / "big")
        keys.append("big")
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    proc = subprocess.Popen([str(BIN / "wh"), "mount", str(mnt)], env=env, stderr=subprocess.PIPE)
    report: dict[str, object] = {
        "files": args.files,
        "per_dir": args.per_dir,
        "big_mb": args.big_mb,
    }
    try:
        deadline = time.monotonic() + 120
        while not os.path.ismount(mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                said = proc.stderr.read().decode() if proc.stderr else ""
                sys.exit(f"the mount did not come up: {said}")
            time.sleep(0.05)
        report["mounted_kib"] = memory(proc.pid)["VmRSS"]
        for key in keys:
            report[key] = check(env, mnt, key, work, proc.pid, not args.no_md5sum)
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=False)
        proc.wait(timeout=60)
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    ok = all(
        r["md5sum_ok"] is not False and r["ls_sizes_ok"]  # type: ignore[index]
        for k, r in report.items()
        if k in ("small", "big")
    )
    report["ok"] = ok
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            print(f"{key}: {value}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
