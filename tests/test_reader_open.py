"""`CollectionReader.open`: a seekable file object over a collection's file."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError


def test_open_reads_seeks_and_verifies(wh: EmbeddedWarehouse, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    data = os.urandom(3 * (1 << 20) + 123)  # more than one block (64 MiB max, split small)
    (src / "big").write_bytes(data)
    (src / "empty").write_bytes(b"")
    pdh = wh.put([src]).write.pdh
    reader = wh.reader(pdh)
    with reader.open("big") as f:
        assert f.read(10) == data[:10]
        assert f.seek(-5, io.SEEK_END) == len(data) - 5
        assert f.read() == data[-5:]
        assert f.read() == b""
        f.seek(1 << 20)
        assert f.read(1000) == data[1 << 20 : (1 << 20) + 1000]
        f.seek(0)
        assert f.read() == data
        with pytest.raises(ValueError):
            f.seek(-1)
    with reader.open("empty") as f:
        assert f.read() == b""
    with pytest.raises(NotFoundError):
        reader.open("nope")
