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


def test_failures_raise_the_documented_exceptions(tmp_path: Path, tree: Path) -> None:
    """docs/python.md, "Errors": the class, the builtin it also is, and the exit code."""
    with warehouse.open(tmp_path / "home") as wh:
        pdh = wh.put(tree, name="run42").write.pdh
        other = wh.put(tree / "reads").write.pdh
        with pytest.raises(warehouse.NotFoundError) as missing:
            wh.resolve("nosuch")
        assert isinstance(missing.value, KeyError) and missing.value.exit_code == 4
        with pytest.raises(warehouse.NotFoundError):
            wh.reader("run42").open("no-such-file")
        with pytest.raises(warehouse.UsageError) as bad:
            wh.put([tree], name="a//b")
        assert isinstance(bad.value, ValueError) and bad.value.exit_code == 2
        with pytest.raises(warehouse.UsageError):
            wh.put([])
        with pytest.raises(warehouse.UsageError):
            wh.set_name("run42", other, expect="not-a-pdh")
        with pytest.raises(warehouse.ConflictError) as conflict:
            wh.set_name("run42", other, expect=other)
        assert conflict.value.exit_code == 3
        assert wh.resolve("run42") == pdh
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OSError):
        warehouse.open(tmp_path / "a-file")


def test_the_documented_calls_type_check(tmp_path: Path) -> None:
    """A program written from docs/python.md passes `mypy --strict` (the package
    ships py.typed): `with warehouse.open() as wh:` was "Warehouse has no __enter__"."""
    from mypy import api

    program = tmp_path / "program.py"
    program.write_text(
        "from pathlib import Path\n\n"
        "import warehouse\n\n"
        "with warehouse.open(Path('home')) as wh:\n"
        "    pdh: str = wh.put('data/run42', name='run42').write.pdh\n"
        "    with wh.reader('run42').open('notes.txt') as f:\n"
        "        first: bytes = f.readline()\n"
        "    versions: list[int] = [c.version for c in wh.name_log('run42')]\n"
        "with warehouse.open('home') as again:\n"
        "    assert again.resolve('run42') == pdh\n"
    )
    out, err, code = api.run(["--strict", "--cache-dir", str(tmp_path / "cache"), str(program)])
    assert code == 0, out + err


def test_a_bad_job_request_is_a_usage_error(tmp_path: Path, tree: Path) -> None:
    """Not a TypeError from json deep inside, nor a job no executor would ever take."""
    from warehouse import jobs

    with warehouse.open(tmp_path / "home") as wh:
        pdh = wh.put(tree).write.pdh
        for request, said in (
            (jobs.JobRequest("builtin:zhash", pdh, {"p": Path("x")}), "JSON values"),
            (jobs.JobRequest("builtin:zhash", pdh, {"x": float("nan")}), "JSON values"),
            (jobs.JobRequest("builtin:zhash", pdh, [1, 2]), "a mapping"),  # type: ignore[arg-type]
            (jobs.JobRequest("builtin:zhash", pdh, {}, executor="nope"), "unknown executor"),
        ):
            with pytest.raises(warehouse.UsageError, match=said):
                jobs.submit(wh, request)
        assert jobs.submit(wh, jobs.JobRequest("builtin:zhash", pdh, {})).state == "queued"


def test_the_package_loads_its_parts_when_first_asked_for() -> None:
    """Every process imports the package first: a keep server and the command
    line load neither the collections, SQLAlchemy nor pydantic until they use
    them; each public name is still there, loaded when asked for."""
    import subprocess
    import sys

    probe = (
        "import sys, warehouse, warehouse.server.keepd, warehouse.cli\n"
        "heavy = ('warehouse.base', 'warehouse.collection.writer', 'sqlalchemy', 'pydantic')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "print([n for n in warehouse.__all__ if not hasattr(warehouse, n)])\n"
        "print('warehouse.base' in sys.modules, warehouse.Manifest.__module__)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "[]", "True warehouse.manifest.model"]
