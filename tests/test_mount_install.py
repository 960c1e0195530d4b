"""``wh mount`` where pyfuse3 is not installed (an install without the
``[mount]`` extra): one ``Error:`` line saying what to install, no traceback;
the other commands never load pyfuse3 or trio."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# `wh ARGS...` in a fresh interpreter where pyfuse3 and trio cannot be imported.
PROBE = """
import sys

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyfuse3", "trio"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
sys.argv[:] = ["wh", *sys.argv[1:]]
from warehouse.cli import main
main()
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env["WH_HOME"] = str(tmp_path / "home")
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_mount_without_pyfuse3_names_the_extra(tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    done = _run(tmp_path, "mount", str(tmp_path / "mnt"))
    assert done.returncode == 1, done
    assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "warehouse[mount]" in done.stderr, done.stderr
    assert not os.path.ismount(tmp_path / "mnt")


def test_other_commands_do_not_load_the_mount(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("f\n")
    done = _run(tmp_path, "put", str(tmp_path / "f.txt"))
    assert done.returncode == 0, done.stderr
