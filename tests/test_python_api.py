"""The Python library as docs/python.md describes it, called the way a new user would."""

from __future__ import annotations

from pathlib import Path

import pytest

import warehouse


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "data" / "run42"
    (root / "reads").mkdir(parents=True)
    (root / "notes.txt").write_bytes(b"line one\n")
    (root / "reads" / "a.fq").write_bytes(b"@r\nACGT\n+\n!!!!\n")
    return root


def test_put_takes_one_path_as_a_string_or_a_path(tmp_path: Path, tree: Path) -> None:
    with warehouse.open(tmp_path / "home") as wh:
        listed = wh.put([tree]).write.pdh
        # A lone path is that path, not a sequence of one-letter paths.
        assert wh.put(str(tree)).write.pdh == listed
        assert wh.put(tree).write.pdh == listed
        assert wh.put([str(tree)]).write.pdh == listed


def test_open_reads_the_settings_wh_reads(tmp_path: Path) -> None:
    """The config file's `home` is where `warehouse.open()` works, as for `wh`; a bad
    setting is a UsageError naming it. (A fresh interpreter: settings apply once.)"""
    import os
    import subprocess
    import sys

    config = tmp_path / "xdg" / "warehouse" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"home = {str(tmp_path / 'from-file')!r}\n")
    probe = "import warehouse\nwith warehouse.open() as wh:\n    print(wh.home)\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    env["HOME"] = str(tmp_path)  # nothing made in the real home, whatever happens
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "from-file")
    bad = (
        "import warehouse\n"
        "try:\n    warehouse.open()\n"
        "except warehouse.UsageError as e:\n    print(e)\n"
    )
    env["WH_REPLICATION"] = "9"
    done = subprocess.run([sys.executable, "-c", bad], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "WH_REPLICATION: 9 is not in the range 1<=x<=8", done.stderr
