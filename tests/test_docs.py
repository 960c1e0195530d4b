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
        "workflow",
    }
    for name in warehouse.__all__:
        assert hasattr(warehouse, name)


def test_the_command_list_is_each_commands_own_help() -> None:
    """`wh --help` lists the commands from help kept beside their import paths,
    so it loads none of them; the kept line must be the command's own."""
    import click

    from warehouse.cli import _COMMANDS, cli

    ctx = click.Context(cli)
    for name, (_, kept) in _COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None
        assert command.get_short_help_str(limit=10_000) == kept, name
    probe = (
        "import sys\n"
        "from warehouse.cli import main\n"
        "sys.argv[:] = ['wh', '--help']\n"
        "try:\n    main()\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in ('fastapi', 'distributed', 'sqlalchemy') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]", done.stdout
    for name in _COMMANDS:
        assert f"  {name} " in done.stdout


def test_the_sql_examples_run(tmp_path: Path) -> None:
    """Each `wh sql` line and SQL example of docs/sql.md, as a user pastes it, on
    an embedded warehouse (the one on another catalog excepted)."""
    import os
    import re
    import shlex

    from click.testing import CliRunner

    from warehouse.cli import cli

    text = (ROOT / "docs" / "sql.md").read_text()
    env = {k: None for k in os.environ if k.startswith("WH_")}
    env["WH_HOME"] = str(tmp_path / "home")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "f").write_text("x\n")
    runner = CliRunner()
    assert (
        runner.invoke(cli, ["put", str(tmp_path / "data"), "--name", "n"], env=env).exit_code == 0
    )
    lines = [ln for ln in text.splitlines() if ln.startswith("wh sql ") and "--db" not in ln]
    queries = [shlex.split(ln.split(" | ")[0])[2:] for ln in lines]
    block = text.split("```sql\n", 1)[1].split("```", 1)[0]
    queries += [[q] for q in re.split(r";\n", re.sub(r"--[^\n]*\n", "", block)) if q.strip()]
    assert len(queries) >= 5
    for args in queries:
        done = runner.invoke(cli, ["sql", *args], env=env)
        assert done.exit_code == 0, (args, done.stderr)
