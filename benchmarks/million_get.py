"""`wh get --no-write` of a million-file collection with its recorded listing.

The collection of ``million.py`` (``--streams`` streams of ``--files`` files
of 10 bytes, each stream over one stored block of its own), all of it under
one directory ``all/``, recorded with the user's listing of every file's MD5
(as a put records it). Then timed, each ``--repeat`` times, alternating the
builds given with ``--wh`` (a build is ``PATH/TO/wh`` or
``PATH/TO/wh=SRC_DIR`` to run it with ``PYTHONPATH=SRC_DIR``):

- ``get --no-write PDH``                 the whole collection
- ``get --no-write PDH/all``             a sub-path holding every file
- ``get --no-write PDH/all/dNNNNN``      a sub-path of one directory
- ``ls PDH``                             every file's path
- ``get --no-write PDH`` and ``ls PDH`` through ``wh serve`` (``--remote``)

with CPU time (user + system) and peak resident size from ``wait4``. Every
output is counted: one line a file. The setup (blocks, manifest, listing)
is untimed and done through the Python API of the build running this script.

    .venv/bin/python benchmarks/million_get.py --wh .venv/bin/wh \\
        --wh .venv/bin/wh=/path/to/other/src [--remote] [--repeat N] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from million import _blocks, _run

TOP = "all"


def _manifest(blocks: list[bytes], files: int) -> tuple[str, dict[str, str]]:
    """The normalized manifest text and every file's MD5, in manifest order."""
    lines = []
    digests: dict[str, str] = {}
    length = len(blocks[0]) // files
    names = [f"f{j:03d}" for j in range(files)]
    for i, data in enumerate(blocks):
        segments = " ".join(f"{j * length}:{length}:{name}" for j, name in enumerate(names))
        lines.append(f"./{TOP}/d{i:05d} {hashlib.md5(data).hexdigest()}+{len(data)} {segments}\n")
        for j, name in enumerate(names):
            piece = data[j * length : (j + 1) * length]
            digests[f"{TOP}/d{i:05d}/{name}"] = hashlib.md5(piece).hexdigest()
    return "".join(lines), digests


def _record(wh: object, blocks: list[bytes], text: str, digests: dict[str, str]) -> str:
    """Store the blocks and record the collection with the caller's listing."""
    from warehouse.manifest import Manifest

    for data in blocks:
        wh.store.put(data)  # type: ignore[attr-defined]
    wh.store.flush()  # type: ignore[attr-defined]
    return str(wh.save_manifest(Manifest.parse(text), digests).pdh)  # type: ignore[attr-defined]


def _builds(values: list[str]) -> list[tuple[str, str, str | None]]:
    out = []
    for value in values:
        wh, _, src = value.partition("=")
        out.append((value, wh, src or None))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--wh", action="append", help="a build: WH or WH=SRC (repeatable)")
    parser.add_argument("--remote", action="store_true", help="also through `wh serve`")
    parser.add_argument("--workdir", type=Path, help="default: a temporary directory on tmpfs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    builds = _builds(args.wh or [str(Path(sys.executable).with_name("wh"))])

    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    work = args.workdir or Path(tempfile.mkdtemp(prefix="wh-million-get-", dir=base))
    work.mkdir(parents=True, exist_ok=True)
    files = args.streams * args.files
    server = None
    results: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    try:
        blocks = _blocks(args.streams, 10 * args.files)
        text, digests = _manifest(blocks, args.files)
        from warehouse.embedded import EmbeddedWarehouse

        home = work / "home"
        with EmbeddedWarehouse(home) as wh:
            pdh = _record(wh, blocks, text, digests)
        env = dict(os.environ, WH_HOME=str(home))
        env.pop("WH_URL", None)
        middle = f"{TOP}/d{args.streams // 2:05d}"
        runs: dict[str, tuple[dict[str, str], list[str], int]] = {
            "whole": (env, ["get", "--no-write", pdh], files),
            "sub-path, every file": (env, ["get", "--no-write", f"{pdh}/{TOP}"], files),
            "sub-path, one directory": (env, ["get", "--no-write", f"{pdh}/{middle}"], args.files),
            "ls": (env, ["ls", pdh], files),
        }
        if args.remote:
            server, remote = _serve(work, builds[0][1])
            from warehouse.remote.warehouse import RemoteWarehouse

            with RemoteWarehouse(remote["WH_URL"], remote["WH_TOKEN"]) as rwh:
                remote_pdh = _record(rwh, blocks, text, digests)
            assert remote_pdh == pdh
            runs["remote, whole"] = (remote, ["get", "--no-write", pdh], files)
            runs["remote, ls"] = (remote, ["ls", pdh], files)
        del blocks, text, digests
        for _ in range(args.repeat):
            for label, (run_env, argv, want) in runs.items():
                for name, wh_bin, src in builds:
                    build_env = dict(run_env)
                    if src is not None:
                        build_env["PYTHONPATH"] = src
                    seconds, cpu, peak, lines, _ = _run([wh_bin, *argv], build_env, work)
                    if lines != want:
                        raise SystemExit(f"{name} {label}: {lines} lines, want {want}")
                    results.setdefault((label, name), []).append((seconds, cpu, peak))
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(60)
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)

    out = {
        "files": files,
        "streams": args.streams,
        "load_after": os.getloadavg(),
        "results": [
            {
                "run": label,
                "build": name,
                "seconds": statistics.median(s for s, _, _ in r),
                "cpu_seconds": statistics.median(c for _, c, _ in r),
                "peak_mb": max(p for _, _, p in r) / 1e6,
            }
            for (label, name), r in results.items()
        ],
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{files:,} files in {args.streams:,} streams, with the caller's listing")
    for r in out["results"]:
        print(
            f"{r['run']:24} {r['build']:40.40} {r['seconds']:7.2f} s"
            f"  (CPU {r['cpu_seconds']:6.2f} s)  {r['peak_mb']:6.0f} MB"
        )
    print("load average after: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))


def _serve(work: Path, wh_bin: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """``wh serve`` with 2 keep servers; the env of its admin on it."""
    env = dict(os.environ, WH_HOME=str(work / "served"))
    env.pop("WH_URL", None)
    env.pop("PYTHONPATH", None)
    # The manifest and listing of a million files go up in one request.
    argv = [wh_bin, "serve", "--listen", "127.0.0.1:0", "--keep", "2", "--executor", "none"]
    server = subprocess.Popen(
        [*argv, "--max-manifest", str(64 << 20)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert server.stdout is not None
    url = server.stdout.readline().split()[3]
    for _ in range(2):
        server.stdout.readline()
    admin = subprocess.run(
        [wh_bin, "user", "add", "admin", "--admin"], env=env, capture_output=True, text=True
    )
    if admin.returncode != 0:
        raise SystemExit(admin.stderr)
    return server, {**env, "WH_URL": url, "WH_TOKEN": admin.stdout.strip()}


if __name__ == "__main__":
    main()
