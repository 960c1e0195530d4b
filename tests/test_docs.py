"""Docs kept true by tests: the CLI reference and the public surface."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import warehouse

ROOT = Path(__file__).resolve().parent.parent


def test_cli_reference_is_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cli_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_every_exit_code_is_documented() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    codes = {
        cls.exit_code
        for cls in vars(warehouse.errors).values()
        if isinstance(cls, type) and issubclass(cls, warehouse.WarehouseError)
    }
    for code in codes | {0}:
        assert f"\n| {code} |" in text, f"exit code {code} is not in docs/cli.md"


def test_public_surface() -> None:
    assert set(warehouse.__all__) == {
        "EMPTY_LOCATOR",
        "MAX_BLOCK_SIZE",
        "CollectionReader",
        "ConflictError",
        "CorruptDataError",
        "EmbeddedWarehouse",
        "ForbiddenError",
        "Locator",
        "LocatorError",
        "Manifest",
        "ManifestError",
        "NotFoundError",
        "PutResult",
        "UsageError",
        "Warehouse",
        "WarehouseError",
        "open",
    }
    for name in warehouse.__all__:
        assert hasattr(warehouse, name)
