"""Bad names given to ``wh name``, embedded and through a controller: one Error line, exit 2."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cluster import KeepPool, controller
from warehouse.cli import cli


@pytest.fixture(params=["embedded", "controller"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    home = {"WH_HOME": str(tmp_path / "home")}
    if request.param == "embedded":
        yield home
        return
    pool: KeepPool = request.getfixturevalue("keep_servers")
    with controller(tmp_path / "catalog.db", pool) as ctl:
        yield {**home, "WH_URL": ctl.url, "WH_TOKEN": ctl.user("alice")}


def _wh(*args: str, env: dict[str, str]) -> Result:
    """`wh ARGS` through click in this process, in ``env`` (a process each
    cost most of these tests' time); an exception escaping it fails the test."""
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def _pdh(env: dict[str, str], root: Path, text: str) -> str:
    d = root / text
    d.mkdir()
    (d / "f").write_text(text)
    out = _wh("put", str(d), env=env)
    assert out.exit_code == 0, out.stderr
    return out.stdout.strip()


def test_a_bad_name_is_refused_by_every_name_command_and_moves_no_other(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Through a controller, ``x?y`` and ``x#y`` went into the URL as they were:
    ``wh name set 'x?y' PDH`` moved the name ``x``, and ``a/b`` answered "Not Found"
    (a name in a project, ``a/b``, is a name now: ``a//b`` and ``a/`` are not)."""
    first, other = _pdh(env, tmp_path, "first"), _pdh(env, tmp_path, "other")
    assert _wh("name", "set", "x", first, env=env).exit_code == 0
    for bad in ("x?y", "x#y", "a//b", "a/", "a/..", "..", "a b"):
        for args in (["set", bad, other], ["set", bad, other, "--expect", first], ["get", bad]):
            out = _wh("name", *args, env=env)
            assert out.exit_code == 2, (args, out.stdout, out.stderr)
            assert out.stderr.startswith(f"Error: bad name {bad!r}: use letters"), out.stderr
            assert out.stderr.count("\n") == 1, out.stderr
    for bad in ("x?y", "a//b"):
        out = _wh("name", "log", bad, env=env)
        assert (out.exit_code, out.stderr.startswith("Error: bad name")) == (2, True), out.stderr
    listed = _wh("name", "ls", "--json", env=env)
    assert '"name": "x"' in listed.stdout and listed.stdout.count('"name"') == 1, listed.stdout
    assert _wh("name", "get", "x", env=env).stdout.strip() == first
    log = _wh("name", "log", "x", "--json", env=env).stdout
    assert log.count('"version"') == 1 and other not in log, log


def test_names_differ_by_case_and_composed_letters_are_refused(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Names are ASCII, so "é" composed and decomposed cannot be two names;
    ``Run`` and ``run`` are two."""
    first, other = _pdh(env, tmp_path, "first"), _pdh(env, tmp_path, "other")
    assert _wh("name", "set", "Run", first, env=env).exit_code == 0
    assert _wh("name", "set", "run", other, env=env).exit_code == 0
    assert _wh("name", "get", "Run", env=env).stdout.strip() == first
    assert _wh("name", "get", "run", env=env).stdout.strip() == other
    for bad in ("caf\u00e9", "cafe\u0301", "\u0440un"):  # the last: a Cyrillic "r"
        out = _wh("name", "set", bad, first, env=env)
        assert out.exit_code == 2 and out.stderr.startswith("Error: bad name"), out.stderr


def test_a_pdh_that_is_not_one_is_bad_input(env: dict[str, str], tmp_path: Path) -> None:
    """Embedded, ``wh name set n zz`` said "no collection zz" (exit 4)."""
    first = _pdh(env, tmp_path, "first")
    for bad in ("zz", first + "+Kx", first.upper(), first.replace("+", "+0")):
        out = _wh("name", "set", "n", bad, env=env)
        assert out.exit_code == 2, (bad, out.stderr)
        assert out.stderr == f"Error: PDH: {bad!r} is not a portable data hash\n"
    assert _wh("name", "get", "n", env=env).exit_code == 4
