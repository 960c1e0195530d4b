#!/usr/bin/env python3
"""Ingest benchmark: `wh put` / `wh get` against borg and restic on the same tree.

Generates (once, deterministically from a seed) a tree (``--tree``): ``large``,
about 1.4 GB of incompressible data in ~1,000 files and two of 200 MB;
``small10k`` / ``small100k``, 10,000 / 100,000 files of 1-8 KB; ``single``,
one file of 2 GB. Then times:

* ``wh put <tree> --json`` and ``wh get <pdh> <out>`` (the get verifies every block);
* ``borg create --compression none`` and ``borg extract`` (unencrypted repository);
* ``restic backup`` and ``restic restore latest`` (encrypted; compression off when
  the installed restic supports it).

Every run uses a fresh repository / warehouse, created untimed (``borg init``,
``restic init``, and a first ``wh name ls``), and a fresh output directory.
Before each timed command every file of the input and of the run's repository
is dropped from the page cache (``posix_fadvise(DONTNEED)``; ``--cache warm``
reads them instead), the same for every tool. The tools alternate run by run;
the median of ``--repeat`` runs is reported, with each tool's peak resident
memory (``wait4``). Every restored tree is compared with the original (file
list, sizes, md5 of a sample of files plus the big files). The script prints a
table of seconds, MB/s (1 MB = 10**6 bytes) and peak MB and the ratios of wh
against each other tool, with the targets of the tree.

The exit code is 0 whenever every measurement completed, also on a MISS: this is
a measurement, not a test.  It is non-zero when a tool failed, a restored tree
differed from the original, or a requested tool could not be found.

Standard library only.  Run ``python benchmarks/ingest.py --help`` for options.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MB = 1_000_000
CHUNK = 8 << 20  # bytes generated / read / hashed per step
TREE_FORMAT = 1  # bump when the generated layout changes, to invalidate old trees
MARKER = "tree.json"
TREE = "tree"
BIG_FILES = 2

PUT_TARGET = 0.75  # wh put must take at most this fraction of the other tool's backup time
GET_TARGET = 1.0  # wh get must take less than this fraction of the other tool's restore time

INSTALL_HINT = "apt-get install borgbackup restic"
ALL_TOOLS = ("wh", "borg", "restic")


class BenchError(Exception):
    """A failure that makes the measurement meaningless."""


# --------------------------------------------------------------------------- tree


@dataclass(frozen=True)
class FileSpec:
    rel: str
    size: int


@dataclass(frozen=True)
class TreeSpec:
    seed: int
    scale: float
    dirs: tuple[str, ...]
    files: tuple[FileSpec, ...]
    big: tuple[str, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def marker(self) -> dict[str, object]:
        return {
            "format": TREE_FORMAT,
            "seed": self.seed,
            "scale": self.scale,
            "files": len(self.files),
            "bytes": self.total_bytes,
        }


def plan_tree(seed: int, scale: float) -> TreeSpec:
    """Decide the layout: ~1,000 files of 0.2-1.8 MB over ~20 nested dirs, two 200 MB files."""
    rng = random.Random(seed)
    n_dirs = max(2, round(20 * scale))
    n_files = max(1, round(1000 * scale))
    lo, hi = max(1, round(0.2 * MB * scale)), max(1, round(1.8 * MB * scale))
    big_size = max(1, round(200 * MB * scale))

    # A 4-ary tree of directories: d01..d04 at the top, d05..d08 under d01, and so on.
    dirs: list[str] = []
    for k in range(1, n_dirs + 1):
        parent = (k - 1) // 4
        name = f"d{k:02d}"
        dirs.append(f"{dirs[parent - 1]}/{name}" if parent else name)

    files = [
        FileSpec(f"{dirs[i % n_dirs]}/f{i:04d}.bin", rng.randint(lo, hi)) for i in range(n_files)
    ]
    big = [FileSpec(f"big{j}.bin", big_size) for j in range(BIG_FILES)]
    return TreeSpec(
        seed=seed,
        scale=scale,
        dirs=tuple(dirs),
        files=tuple(files + big),
        big=tuple(f.rel for f in big),
    )


def plan_small(seed: int, count: int, scale: float = 1.0) -> TreeSpec:
    """``count`` files of 1-8 KB, 1,000 to a directory, under 10 top directories."""
    rng = random.Random(seed)
    n_dirs = max(1, -(-count // 1000))
    dirs = [f"s{k % 10:02d}/d{k:04d}" for k in range(n_dirs)]
    files = [
        FileSpec(f"{dirs[i // 1000]}/f{i:06d}.dat", rng.randint(1024, 8192)) for i in range(count)
    ]
    return TreeSpec(seed=seed, scale=scale, dirs=tuple(dirs), files=tuple(files), big=())


def plan_single(seed: int, scale: float) -> TreeSpec:
    """One file of 2 GB (times ``scale``)."""
    big = FileSpec("single.bin", max(1, round(2000 * MB * scale)))
    return TreeSpec(seed=seed, scale=scale, dirs=(), files=(big,), big=(big.rel,))


TREES = ("large", "small10k", "small100k", "single")


def plan(kind: str, seed: int, scale: float) -> TreeSpec:
    if kind == "small10k":
        return plan_small(seed, max(1, round(10_000 * scale)), scale)
    if kind == "small100k":
        return plan_small(seed, max(1, round(100_000 * scale)), scale)
    if kind == "single":
        return plan_single(seed, scale)
    return plan_tree(seed, scale)


def _write_file(args: tuple[str, str, int, int]) -> None:
    """Write one file of random bytes; the content depends only on (seed, relative path)."""
    root, rel, size, seed = args
    rng = random.Random(f"{seed}/{rel}")
    with open(os.path.join(root, rel), "wb") as fh:
        left = size
        while left:
            n = min(CHUNK, left)
            fh.write(rng.randbytes(n))
            left -= n


def ensure_tree(workdir: Path, spec: TreeSpec, log: Log, kind: str = "large") -> Path:
    """Generate the tree unless a matching one (per the marker file) is already there."""
    root = workdir / (TREE if kind == "large" else f"{TREE}-{kind}")
    marker = workdir / (MARKER if kind == "large" else f"{TREE}-{kind}.json")
    want = {**spec.marker(), "kind": kind}
    if marker.is_file() and root.is_dir():
        try:
            have = json.loads(marker.read_text())
        except ValueError:
            have = None
        if have == want and _sizes_match(root, spec):
            log.say(f"tree: reusing {len(spec.files)} files, {_mb(spec.total_bytes)} MB")
            return root
    log.say(f"tree: generating {len(spec.files)} files, {_mb(spec.total_bytes)} MB ...")
    marker.unlink(missing_ok=True)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)  # the single-file tree has no directory that would make it
    for d in spec.dirs:
        (root / d).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # Biggest first, so the two large files do not end up alone at the tail.
    jobs = [
        (str(root), f.rel, f.size, spec.seed)
        for f in sorted(spec.files, key=lambda f: f.size, reverse=True)
    ]
    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(_write_file, jobs, chunksize=max(4, len(jobs) // (workers * 8))):
            pass
    marker.write_text(json.dumps(want, indent=2) + "\n")
    log.say(f"tree: generated in {time.perf_counter() - t0:.1f} s")
    return root


def _sizes_match(root: Path, spec: TreeSpec) -> bool:
    try:
        return listing(root) == {f.rel: f.size for f in spec.files}
    except OSError:
        return False


def listing(root: Path) -> dict[str, int]:
    """Relative path -> size of every regular file under root (symlinks are not followed)."""
    out: dict[str, int] = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, root).replace(os.sep, "/")] = os.lstat(p).st_size
    return out


def md5_file(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def sample_files(spec: TreeSpec, n: int = 20) -> list[str]:
    """About n small files chosen deterministically, plus the big files."""
    small = sorted(f.rel for f in spec.files if f.rel not in spec.big)
    picked = random.Random(spec.seed + 1).sample(small, min(n, len(small)))
    return sorted(picked) + list(spec.big)


def warm_and_hash(root: Path, sample: Sequence[str]) -> tuple[dict[str, str], float]:
    """Read every file once (warming the page cache); return md5 of the sample and seconds."""
    wanted = set(sample)
    digests: dict[str, str] = {}
    t0 = time.perf_counter()
    for rel in sorted(listing(root)):
        if rel in wanted:
            digests[rel] = md5_file(root / rel)
        else:
            with open(root / rel, "rb") as fh:
                while fh.read(CHUNK):
                    pass
    return digests, time.perf_counter() - t0


def find_restored_root(out: Path, expected_top: set[str]) -> Path:
    """Locate the restored copy of the tree inside out.

    Tools differ: some restore into out itself, some into out/tree, restic into
    out/<absolute path of the tree>.  Walk down single-directory chains until the
    top-level listing matches the original.
    """
    cur = out
    for _ in range(256):
        if not cur.is_dir():
            break
        names = set(os.listdir(cur))
        if names == expected_top:
            return cur
        if len(names) != 1:
            break
        cur = cur / names.pop()
    raise BenchError(f"restored tree not found under {out} (stopped at {cur})")


def verify_restore(
    out: Path, original: dict[str, int], digests: dict[str, str], label: str
) -> None:
    expected_top = {rel.split("/", 1)[0] for rel in original}
    root = find_restored_root(out, expected_top)
    got = listing(root)
    if got != original:
        missing = sorted(set(original) - set(got))[:5]
        extra = sorted(set(got) - set(original))[:5]
        wrong = sorted(r for r in set(got) & set(original) if got[r] != original[r])[:5]
        raise BenchError(
            f"{label}: restored tree differs: {len(got)} files vs {len(original)}; "
            f"missing {missing}, extra {extra}, wrong size {wrong}"
        )
    for rel, digest in digests.items():
        if md5_file(root / rel) != digest:
            raise BenchError(f"{label}: restored file {rel} has different content")


# --------------------------------------------------------------------------- running


class Log:
    """Progress lines; on stderr with --json so that stdout holds only the JSON."""

    def __init__(self, to_stderr: bool) -> None:
        self.stream = sys.stderr if to_stderr else sys.stdout

    def say(self, msg: str) -> None:
        print(msg, file=self.stream, flush=True)


# What each timed command starts with: "drop" (every file of the input and of
# the run's repository dropped from the page cache, as borg leaves what it
# reads) or "warm" (every such file read just before). Set by main().
CACHE_MODE = "drop"
CACHE_PATHS: list[Path] = []
# Peak resident size (bytes) of the last command run, from wait4.
LAST_PEAK: list[int] = [0]


def _each_file(roots: Sequence[Path]) -> Iterator[str]:
    for root in roots:
        if root.is_file():
            yield str(root)
        for dirpath, _, names in os.walk(root):
            for name in names:
                yield os.path.join(dirpath, name)


def control_cache(roots: Sequence[Path], mode: str) -> None:
    """Drop (posix_fadvise DONTNEED) or warm (read) every file under ``roots``."""
    for path in _each_file(roots):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if mode == "drop":
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                while os.read(fd, CHUNK):
                    pass
        finally:
            os.close(fd)


def run(cmd: Sequence[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, str]:
    """Run cmd, return (seconds, stdout); raise BenchError with stderr on failure."""
    # No command pays for flushing what the one before left dirty (a restore
    # leaves 1.4 GB unsynced; deleting the last run's files queues journal work).
    os.sync()
    control_cache(CACHE_PATHS, CACHE_MODE)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        LAST_PEAK[0] = usage.ru_maxrss * 1024
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    if proc.returncode != 0:
        tail = "\n".join((stderr or stdout).strip().splitlines()[-15:])
        raise BenchError(f"command failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return elapsed, stdout


def tool_version(cmd: Sequence[str], env: dict[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(
            list(cmd), capture_output=True, text=True, check=False, timeout=60, env=env
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (proc.stdout or proc.stderr).strip()
    return text.splitlines()[0] if proc.returncode == 0 and text else "unknown"


def find_wh(explicit: str | None) -> str | None:
    if explicit:
        return explicit if os.access(explicit, os.X_OK) and Path(explicit).is_file() else None
    beside = Path(sys.executable).parent / "wh"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("wh")


def parse_json_output(text: str) -> dict[str, object]:
    """The JSON object printed by a command: the whole stdout, or its last JSON line."""
    text = text.strip()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
        for line in reversed(text.splitlines()):
            try:
                value = json.loads(line)
                break
            except ValueError:
                continue
    if not isinstance(value, dict):
        raise BenchError(f"expected a JSON object on stdout, got: {text[:300]!r}")
    return value


@dataclass
class Timings:
    backup: list[float] = field(default_factory=list)
    restore: list[float] = field(default_factory=list)


class Tool:
    def __init__(self, name: str, backup_op: str, restore_op: str, notes: str = "") -> None:
        self.name = name
        self.backup_op = backup_op
        self.restore_op = restore_op
        self.notes = notes
        self.peaks: list[int] = []  # backup, restore, backup, ... (bytes)

    def cycle(self, tree: Path, rundir: Path) -> tuple[float, float, Path]:
        """One fresh backup + restore; return (backup s, restore s, output dir).

        After each timed command, its peak resident size is appended to ``peaks``."""
        raise NotImplementedError


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in list(env):
        if key.startswith(("BORG_", "RESTIC_", "WH_")):
            del env[key]
    return env


class Wh(Tool):
    def __init__(self, exe: str) -> None:
        super().__init__("wh", "put", "get", "fresh WH_HOME; get verifies every block")
        self.exe = exe

    def cycle(self, tree: Path, rundir: Path) -> tuple[float, float, Path]:
        env = _clean_env()
        env["WH_HOME"] = str(rundir / "wh-home")
        out = rundir / "out"
        # The first command creates the empty warehouse (catalog and volume),
        # untimed, as `borg init` and `restic init` create their repositories.
        run([self.exe, "name", "ls"], env)
        t_put, stdout = run([self.exe, "put", str(tree), "--json"], env)
        self.peaks.append(LAST_PEAK[0])
        result = parse_json_output(stdout)
        pdh = result.get("pdh")
        if not isinstance(pdh, str) or not pdh:
            raise BenchError(f"wh put --json printed no 'pdh' field: {stdout[:300]!r}")
        t_get, _ = run([self.exe, "get", pdh, str(out)], env)
        self.peaks.append(LAST_PEAK[0])
        return t_put, t_get, out


class Borg(Tool):
    def __init__(self, exe: str) -> None:
        super().__init__("borg", "create", "extract", "unencrypted, --compression none")
        self.exe = exe

    def env(self, base: Path) -> dict[str, str]:
        env = _clean_env()
        env["BORG_BASE_DIR"] = str(base)  # config, cache, security and keys dirs live here
        env["BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK"] = "yes"
        env["BORG_RELOCATED_REPO_ACCESS_IS_OK"] = "yes"
        return env

    def cycle(self, tree: Path, rundir: Path) -> tuple[float, float, Path]:
        env = self.env(rundir / "borg-base")
        repo = rundir / "repo"
        out = rundir / "out"
        out.mkdir()
        run([self.exe, "init", "--encryption=none", str(repo)], env)
        t_create, _ = run(
            [self.exe, "create", "--compression", "none", f"{repo}::a", tree.name],
            env,
            cwd=tree.parent,
        )
        self.peaks.append(LAST_PEAK[0])
        t_extract, _ = run([self.exe, "extract", f"{repo}::a"], env, cwd=out)
        self.peaks.append(LAST_PEAK[0])
        return t_create, t_extract, out


class Restic(Tool):
    def __init__(self, exe: str) -> None:
        super().__init__("restic", "backup", "restore")
        self.exe = exe
        help_text = subprocess.run(
            [exe, "backup", "--help"], capture_output=True, text=True, check=False
        ).stdout
        self.compression_off = "--compression" in help_text
        self.notes = (
            "encrypted, repository v2, --compression off"
            if self.compression_off
            else "encrypted, repository v1 (no compression support)"
        )

    def env(self, rundir: Path) -> dict[str, str]:
        env = _clean_env()
        env["RESTIC_REPOSITORY"] = str(rundir / "repo")
        env["RESTIC_PASSWORD"] = "benchmark"
        env["RESTIC_CACHE_DIR"] = str(rundir / "restic-cache")
        return env

    def cycle(self, tree: Path, rundir: Path) -> tuple[float, float, Path]:
        env = self.env(rundir)
        out = rundir / "out"
        extra = ["--compression", "off"] if self.compression_off else []
        init = [self.exe, "init"] + (["--repository-version", "2"] if self.compression_off else [])
        run(init, env)
        t_backup, _ = run([self.exe, "backup", *extra, "--quiet", tree.name], env, cwd=tree.parent)
        self.peaks.append(LAST_PEAK[0])
        t_restore, _ = run([self.exe, "restore", "latest", "--quiet", "--target", str(out)], env)
        self.peaks.append(LAST_PEAK[0])
        return t_backup, t_restore, out


# --------------------------------------------------------------------------- report


def _mb(n: float) -> str:
    return f"{n / MB:,.1f}"


def machine_facts(tools: dict[str, str]) -> dict[str, object]:
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) * 1024 / 2**30, 1)
    except OSError:
        pass
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "cpu_model": _cpu_model(),
        "memory_gib": mem,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tools": tools,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# Targets (wh time / other time, at most) by tree; None: no target set.
TARGETS: dict[str, dict[tuple[str, str], float]] = {
    "large": {("put", "borg"): PUT_TARGET, ("get", "borg"): GET_TARGET},
    "small10k": {},
    "small100k": {
        ("put", "borg"): 0.6,
        ("put", "restic"): 0.75,
        ("get", "borg"): 0.8,
        ("get", "restic"): 0.8,
        ("peak", "borg"): 2.0,
    },
    "single": {("put", "borg"): 0.75, ("get", "restic"): 0.9},
}


def ratio_rows(best: dict[str, dict[str, float]], kind: str = "large") -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    ops = {"borg": ("create", "extract"), "restic": ("backup", "restore")}
    targets = TARGETS.get(kind, {})
    for other, (b_op, r_op) in ops.items():
        for wh_op, other_op in (
            ("put", b_op),
            ("get", r_op),
            ("put_peak", f"{b_op}_peak"),
            ("get_peak", f"{r_op}_peak"),
        ):
            target = targets.get(("peak" if wh_op.endswith("_peak") else wh_op, other))
            row: dict[str, object] = {
                "name": f"wh {wh_op.replace('_', ' ')} / {other} {other_op.replace('_', ' ')}",
                "target": "-" if target is None else f"<= {target:.2f}",
                "ratio": None,
                "verdict": f"n/a ({'wh' if 'wh' not in best else other} not run)",
            }
            if "wh" in best and other in best:
                r = best["wh"][wh_op] / best[other][other_op]
                row["ratio"] = round(r, 3)
                row["verdict"] = "-" if target is None else ("PASS" if r <= target else "MISS")
            rows.append(row)
    return rows


def print_report(report: dict[str, Any]) -> None:
    machine = report["machine"]
    tree = report["tree"]
    print()
    print("machine")
    print(
        f"  cpus         {machine['cpu_count']} ({machine['cpus_usable']} usable)"
        f"  {machine['cpu_model']}"
    )
    print(f"  memory       {machine['memory_gib']} GiB")
    print(f"  platform     {machine['platform']}")
    print(f"  python       {machine['python']}")
    for name, version in machine["tools"].items():
        print(f"  {name:<12} {version}")
    print()
    print(
        f"tree: {tree['files']} files, {_mb(tree['bytes'])} MB, seed {tree['seed']}, "
        f"scale {tree['scale']}; page cache before each timed command: {report['cache']}; "
        f"load average at the end {', '.join(f'{x:.1f}' for x in report['load_average'])}"
    )
    print(
        f"median of {report['repeat']} run(s), tools alternated, each on a fresh repository; "
        "MB = 10**6 bytes"
    )
    print()
    print(f"  {'tool':<8} {'operation':<10} {'seconds':>9} {'MB/s':>9} {'peak MB':>8}   notes")
    for row in report["results"]:
        print(
            f"  {row['tool']:<8} {row['operation']:<10} {row['seconds']:>9.2f} "
            f"{row['mb_per_s']:>9.1f} {row['peak_mb']:>8.0f}   {row['notes']}"
        )
    print()
    print("ratios (wh time / other time; lower is better for wh)")
    for row in report["ratios"]:
        ratio = "n/a" if row["ratio"] is None else f"{row['ratio']:.2f}"
        print(f"  {row['name']:<36} {ratio:>6}   target {row['target']:<7} {row['verdict']}")
    for line in report["skipped"]:
        print(f"skipped: {line}")


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Time wh put/get against borg create/extract and restic backup/restore.",
    )
    p.add_argument("--workdir", type=Path, help="work directory (default: a fresh temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply all file sizes and counts by F (default 1: about 1.4 GB)",
    )
    p.add_argument("--seed", type=int, default=20240601, help="seed for the generated tree")
    p.add_argument(
        "--repeat", type=int, default=3, help="runs per tool, alternated; the median is reported"
    )
    p.add_argument(
        "--tree",
        choices=TREES,
        default="large",
        help="large: ~1,000 files of 0.2-1.8 MB and two of 200 MB; small10k / small100k: "
        "10,000 / 100,000 files of 1-8 KB; single: one file of 2 GB (default: large)",
    )
    p.add_argument(
        "--cache",
        choices=("drop", "warm"),
        default="drop",
        help="before each timed command, drop every input and repository file from the "
        "page cache, or read every one (default: drop)",
    )
    p.add_argument("--wh", help="path of the wh command (default: beside python, then PATH)")
    p.add_argument(
        "--tools",
        default=",".join(ALL_TOOLS),
        help="comma-separated subset of: wh,borg,restic (default: all)",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if args.scale <= 0:
        p.error("--scale must be positive")
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    args.tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = sorted(set(args.tools) - set(ALL_TOOLS))
    if unknown:
        p.error(f"unknown tool(s) {', '.join(unknown)}; choose from {', '.join(ALL_TOOLS)}")
    return args


def select_tools(args: argparse.Namespace) -> tuple[list[Tool], list[str], dict[str, str]]:
    tools: list[Tool] = []
    skipped: list[str] = []
    versions: dict[str, str] = {}
    if "wh" in args.tools:
        exe = find_wh(args.wh)
        if exe is None:
            where = args.wh or f"beside {sys.executable} or on PATH"
            raise BenchError(
                f"wh command not found ({where}); install the package into the venv "
                "(pip install -e .), pass --wh PATH, or leave it out with --tools borg,restic"
            )
        tools.append(Wh(exe))
        versions["wh"] = tool_version([exe, "--version"])
        if versions["wh"] == "unknown" and Path(exe).parent == Path(sys.executable).parent:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                versions["wh"] = f"warehouse {importlib.metadata.version('warehouse')}"
    for name, cls in (("borg", Borg), ("restic", Restic)):
        if name not in args.tools:
            continue
        exe = shutil.which(name)
        if exe is None:
            skipped.append(f"{name} is not installed (install with: {INSTALL_HINT})")
            continue
        tools.append(cls(exe))
        versions[name] = tool_version([exe, "version" if name == "restic" else "--version"])
    return tools, skipped, versions


@dataclass
class Workdir:
    path: Path
    temporary: bool

    @classmethod
    def open(cls, given: Path | None) -> Workdir:
        if given is not None:
            given.mkdir(parents=True, exist_ok=True)
            return cls(given.resolve(), False)
        return cls(Path(tempfile.mkdtemp(prefix="wh-ingest-bench-")).resolve(), True)


def run_cycles(
    tool: Tool,
    tree: Path,
    runs: Path,
    repeat: int,
    check: dict[str, object],
    log: Log,
    first: int = 0,
) -> Iterator[tuple[float, float]]:
    original = check["listing"]
    digests = check["digests"]
    assert isinstance(original, dict) and isinstance(digests, dict)
    for i in range(first, first + repeat):
        rundir = runs / f"{tool.name}-{i + 1}"
        if rundir.exists():
            shutil.rmtree(rundir)
        rundir.mkdir(parents=True)
        # The input and this run's repository start each timed command alike.
        CACHE_PATHS[:] = [tree, rundir]
        # The run's repository and output stay until the script ends: on ext4
        # creating many files within minutes of deleting many is several times
        # slower (the inode allocator skips recently deleted inodes), so a
        # deletion here would slow whichever tool restored next.
        t_b, t_r, out = tool.cycle(tree, rundir)
        verify_restore(out, original, digests, f"{tool.name} run {i + 1}")
        log.say(
            f"  {tool.name} run {i + 1}: {tool.backup_op} {t_b:.2f} s "
            f"({tool.peaks[-2] / MB:.0f} MB), {tool.restore_op} {t_r:.2f} s "
            f"({tool.peaks[-1] / MB:.0f} MB) (restored tree verified)"
        )
        yield t_b, t_r


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    log = Log(to_stderr=args.json)
    try:
        tools, skipped, versions = select_tools(args)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in skipped:
        log.say(f"skipped: {line}")

    work = Workdir.open(args.workdir)
    log.say(f"workdir: {work.path}")
    try:
        global CACHE_MODE
        CACHE_MODE = args.cache
        spec = plan(args.tree, args.seed, args.scale)
        tree = ensure_tree(work.path, spec, log, args.tree)
        original = listing(tree)
        digests, warm_s = warm_and_hash(tree, sample_files(spec))
        log.say(
            f"page cache: every file of the input and of the run's repository is "
            f"{'dropped (posix_fadvise DONTNEED)' if args.cache == 'drop' else 'read'} "
            "before each timed command, for every tool"
        )
        check: dict[str, object] = {"listing": original, "digests": digests}
        runs = work.path / "runs"
        best: dict[str, dict[str, float]] = {}
        results: list[dict[str, object]] = []
        timings = {tool.name: Timings() for tool in tools}
        # Tools alternate run by run, so a change in the machine's load falls
        # on all of them alike; the median of the runs is reported.
        for i in range(args.repeat):
            for tool in tools:
                for t_b, t_r in run_cycles(tool, tree, runs, 1, check, log, first=i):
                    timings[tool.name].backup.append(t_b)
                    timings[tool.name].restore.append(t_r)
        for tool in tools:
            t = timings[tool.name]
            peaks = {tool.backup_op: tool.peaks[0::2], tool.restore_op: tool.peaks[1::2]}
            best[tool.name] = {
                tool.backup_op: statistics.median(t.backup),
                tool.restore_op: statistics.median(t.restore),
                f"{tool.backup_op}_peak": max(peaks[tool.backup_op]),
                f"{tool.restore_op}_peak": max(peaks[tool.restore_op]),
            }
            for op, all_s in ((tool.backup_op, t.backup), (tool.restore_op, t.restore)):
                s = statistics.median(all_s)
                results.append(
                    {
                        "tool": tool.name,
                        "operation": op,
                        "seconds": round(s, 3),
                        "mb_per_s": round(spec.total_bytes / MB / s, 1),
                        "all_seconds": [round(x, 3) for x in all_s],
                        "peak_mb": round(max(peaks[op]) / MB, 1),
                        "notes": tool.notes,
                    }
                )
        shutil.rmtree(runs, ignore_errors=True)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if work.temporary and not args.keep:
            shutil.rmtree(work.path, ignore_errors=True)
        elif work.temporary:
            log.say(f"kept workdir {work.path}")

    report: dict[str, Any] = {
        "machine": machine_facts(versions),
        "tree": {
            "files": len(spec.files),
            "bytes": spec.total_bytes,
            "seed": spec.seed,
            "scale": spec.scale,
            "warm_seconds": round(warm_s, 3),
        },
        "repeat": args.repeat,
        "results": results,
        "ratios": ratio_rows(best, args.tree),
        "tree_kind": args.tree,
        "cache": args.cache,
        "load_average": os.getloadavg(),
        "targets": {f"{op} / {other}": t for (op, other), t in TARGETS[args.tree].items()},
        "skipped": skipped,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
