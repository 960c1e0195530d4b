"""Build hook: compile the native MD5 kernel (``src/warehouse/native/md5.c``).

Run by hatchling for a wheel and for an editable install. The library is
compiled in place next to its source (an editable install reads ``src``
directly) and, for a wheel, added to it. Without a C compiler, or if the
compile fails, a warning is printed and the build goes on: the package then
hashes with ``hashlib`` (``warehouse.native.md5``), the same digests, slower.
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

SOURCE = Path("src/warehouse/native/md5.c")
LIBRARY = Path("src/warehouse/native/_md5.so")


class CustomBuildHook(BuildHookInterface):  # type: ignore[misc]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        if not _compile(root / SOURCE, root / LIBRARY):
            return
        if version != "editable":
            build_data["force_include"][str(root / LIBRARY)] = "warehouse/native/_md5.so"
            build_data["pure_python"] = False
            build_data["infer_tag"] = True


def _compile(source: Path, target: Path) -> bool:
    """Compile ``source`` to ``target``; False (and no ``target`` left) if it fails."""
    # A library built from an earlier md5.c would be loaded in place of the
    # one that failed: it goes first, so a failed build leaves hashlib's path.
    target.unlink(missing_ok=True)
    cc = shlex.split(os.environ.get("CC", "cc"))
    if not cc or shutil.which(cc[0]) is None:
        _warn(f"no C compiler ({' '.join(cc) or 'CC is empty'}): MD5 checks use hashlib")
        return False
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    # -O3 for the unrolled rounds; the SIMD paths carry their own target
    # attributes and are chosen at run time, so the library loads on any CPU.
    cmd = [*cc, "-O3", "-shared", "-fPIC", "-o", str(tmp), str(source)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        _warn(f"{' '.join(cmd)} could not run ({e}): MD5 checks use hashlib")
        return False
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        _warn(f"{' '.join(cmd)} failed: MD5 checks use hashlib\n{done.stderr.strip()}")
        return False
    os.replace(tmp, target)
    return True


def _warn(message: str) -> None:
    print(f"warning: warehouse native MD5 not built: {message}", file=sys.stderr)
