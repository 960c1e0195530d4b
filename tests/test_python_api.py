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
