"""Build hook: compile the native libraries (``src/warehouse/native/*.c``).

Run by hatchling for a wheel and for an editable install. Each library is
compiled in place next to its source (an editable install reads ``src``
directly) and, for a wheel, added to it. Without a C compiler, or if a
compile fails, a warning is printed and the build goes on: the package then
does that work in Python (``warehouse.native``), the same results, slower.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

NATIVE = Path("src/warehouse/native")
# Each source, its library, and what is done without it.
LIBRARIES = (
    ("md5.c", "_md5.so", "MD5 checks use hashlib"),
    ("files.c", "_files.so", "a get writes its small files from Python"),
)


class CustomBuildHook(BuildHookInterface):  # type: ignore[misc]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        for source, library, without in LIBRARIES:
            target = root / NATIVE / library
            if not _compile(root / NATIVE / source, target, without):
                continue
            if version != "editable":
                build_data["force_include"][str(target)] = f"warehouse/native/{library}"
                build_data["pure_python"] = False
                build_data["infer_tag"] = True


def _compile(source: Path, target: Path, without: str) -> bool:
    """Compile ``source`` to ``target``; False (and no ``target`` left) if it
    fails, saying so with ``without``, what is done instead."""
    # A library built from an earlier source would be loaded in place of the
    # one that failed: it goes first, so a failed build leaves the Python path.
    target.unlink(missing_ok=True)
    cc = shlex.split(os.environ.get("CC", "cc"))
    if not cc or shutil.which(cc[0]) is None:
        _warn(source, f"no C compiler ({' '.join(cc) or 'CC is empty'}): {without}")
        return False
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    # -O3 for the unrolled rounds; the SIMD paths carry their own target
    # attributes and are chosen at run time, so the library loads on any CPU.
    cmd = [*cc, "-O3", "-shared", "-fPIC", "-o", str(tmp), str(source)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        _warn(source, f"{' '.join(cmd)} could not run ({e}): {without}")
        return False
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        _warn(source, f"{' '.join(cmd)} failed: {without}\n{done.stderr.strip()}")
        return False
    os.replace(tmp, target)
    return True


def _warn(source: Path, message: str) -> None:
    print(f"warning: warehouse native {source.name} not built: {message}", file=sys.stderr)
