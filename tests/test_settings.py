"""Settings from the environment and the config file, validated (docs/cli.md, "Settings")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from warehouse.cli import cli
from warehouse.settings import FIELDS


def wh(tmp_path: Path, *args: str, **env: str) -> tuple[int, str, str]:
    base: dict[str, str | None] = {f"WH_{n.upper()}": None for n in FIELDS}
    base.update({k: None for k in os.environ if k.startswith("WH_")})
    base["WH_HOME"] = str(tmp_path / "home")
    base["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    done = CliRunner().invoke(cli, list(args), env={**base, **env})
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    return done.exit_code, done.stdout, done.stderr


def write_config(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "xdg" / "warehouse" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("value", ["two", "9", "0"])
def test_a_bad_replication_is_refused_like_the_option(tmp_path: Path, value: str) -> None:
    code, out, err = wh(tmp_path, "ls", "x", WH_REPLICATION=value)
    assert code == 2 and out == ""
    assert err.startswith("Error: WH_REPLICATION: "), err
    opt_code, _, opt_err = wh(tmp_path, "put", "--replication", value or "x", str(tmp_path))
    assert opt_code == 2
    # The same rule, worded the same way.
    tail = err.strip().split(": ", 2)[-1]
    assert tail.rstrip(".") in opt_err, (tail, opt_err)


def test_other_bad_values_name_their_variable(tmp_path: Path) -> None:
    for var, value in [
        ("WH_WAIT", "soon"),
        ("WH_WAIT", "-3"),
        ("WH_URL", "ftp://x"),
        ("WH_FORK_SERVER", "maybe"),
        ("WH_KEEP_TIMEOUT", "0"),
        ("WH_KEEP_TIMEOUT", "soon"),
    ]:
        code, _, err = wh(tmp_path, "config", **{var: value})
        assert code == 2 and err.startswith(f"Error: {var}: "), (var, err)


def test_config_shows_each_setting_and_its_origin(tmp_path: Path) -> None:
    path = write_config(tmp_path, 'replication = 3\nwait = 5\ntoken = "s3cret"\n')
    code, out, err = wh(tmp_path, "config", "--json", WH_WAIT="7")
    assert code == 0, err
    shown = {s["variable"]: s for s in json.loads(out)["settings"]}
    assert shown["WH_REPLICATION"]["value"] == "3"
    assert shown["WH_REPLICATION"]["origin"] == f"config {path}"
    assert shown["WH_WAIT"]["value"] == "7.0" and shown["WH_WAIT"]["origin"] == "env WH_WAIT"
    assert shown["WH_TOKEN"]["value"] == "(set, hidden)"
    assert shown["WH_USER"]["origin"] == "default"
    assert "s3cret" not in out
    code, out, _ = wh(tmp_path, "config")
    assert out.splitlines()[1] == "variable\tvalue\torigin"
    assert f"WH_REPLICATION\t3\tconfig {path}" in out.splitlines()


def test_the_config_file_is_used_and_checked(tmp_path: Path) -> None:
    # The file's url is the one commands use: here, a controller not running.
    write_config(tmp_path, 'url = "http://127.0.0.1:9"\nwait = 0\n')
    code, _, err = wh(tmp_path, "ls", "x")
    assert code == 2 and err.startswith("Error: no token: set WH_TOKEN"), err
    path = write_config(tmp_path, "replication = 'x'\n")
    code, _, err = wh(tmp_path, "ls", "x")
    assert code == 2 and err.startswith(f"Error: {path}: replication: "), err
    write_config(tmp_path, "replicaton = 2\n")
    assert "unknown key 'replicaton'" in wh(tmp_path, "ls", "x")[2]
    write_config(tmp_path, "replication = \n")
    assert "not TOML" in wh(tmp_path, "ls", "x")[2]
    write_config(tmp_path, 'token = "s3cret"\n', mode=0o644)
    code, _, err = wh(tmp_path, "config")
    assert code == 2 and "others may read it" in err and "s3cret" not in err


def test_a_bad_type_is_worded_like_the_rest(tmp_path: Path) -> None:
    """Not pydantic's own "Input should be a valid boolean, unable to interpret input"."""
    code, _, err = wh(tmp_path, "config", WH_FORK_SERVER="maybe")
    assert code == 2
    assert err == "Error: WH_FORK_SERVER: 'maybe' is not a valid boolean (true or false)\n"
    path = write_config(tmp_path, "url = 5\n")
    code, _, err = wh(tmp_path, "config")
    assert code == 2 and err == f"Error: {path}: url: 5 is not a string\n", err
    write_config(tmp_path, "fork_server = 'sometimes'\n")
    code, _, err = wh(tmp_path, "config")
    assert code == 2
    assert err.endswith(": fork_server: 'sometimes' is not a valid boolean (true or false)\n")


def test_config_text_follows_the_listing_convention(tmp_path: Path) -> None:
    """Piped: tab-separated under the header, a missing value `-`, true/false as written."""
    write_config(tmp_path, "fork_server = false\n")
    code, out, err = wh(tmp_path, "config")
    assert code == 0, err
    rows = {line.split("\t")[0]: line.split("\t") for line in out.splitlines()[2:]}
    assert rows["WH_URL"] == ["WH_URL", "-", "default"]
    assert rows["WH_FORK_SERVER"][1] == "false"
    assert all(len(r) == 3 and r[1] for r in rows.values())
    code, out, err = wh(tmp_path, "config", "--json")
    shown = {s["variable"]: s for s in json.loads(out)["settings"]}
    assert shown["WH_FORK_SERVER"]["value"] == "false" and shown["WH_URL"]["value"] is None


def test_a_home_under_tilde_is_the_users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`home = "~/wh"` in the config file made a folder named `~` in the current one."""
    monkeypatch.chdir(tmp_path)
    user_home = tmp_path / "user"
    user_home.mkdir()
    write_config(tmp_path, 'home = "~/wh"\n')
    for env in ({"HOME": str(user_home)}, {"HOME": str(user_home), "WH_HOME": "~/wh"}):
        base = {"WH_HOME": "", **env}  # empty: unset, so the config file's
        code, _, err = wh(tmp_path, "put", str(tmp_path / "xdg"), "--name", "x", **base)
        assert code == 0, err
        assert (user_home / "wh").is_dir() and not (tmp_path / "~").exists()
    code, out, _ = wh(tmp_path, "config", HOME=str(user_home), WH_HOME="")
    assert f"WH_HOME\t{user_home / 'wh'}\t" in out, out


def test_a_url_with_blanks_is_refused(tmp_path: Path) -> None:
    """WH_URL='  ' was taken for a controller at '  '; a trailing blank joined its address."""
    for value in ("  ", "http://127.0.0.1:9 "):
        code, _, err = wh(tmp_path, "ls", "x", WH_URL=value, WH_TOKEN="t" * 32)
        assert code == 2 and err == f"Error: WH_URL: {value!r} has blanks around it\n", err
    write_config(tmp_path, 'url = ""\n')
    assert wh(tmp_path, "config")[0] == 0  # empty: the embedded warehouse


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("nonsense", "'nonsense' is not a catalog URL"),
        ("mysql://u:s3cret@h/db", "mysql://… is not a catalog URL"),
        ("postgresql://u:s3cret@h/db", "write postgresql+psycopg://"),
    ],
)
def test_a_bad_catalog_url_is_one_error_not_a_traceback(
    tmp_path: Path, url: str, said: str
) -> None:
    """SQLAlchemy's own refusal (no such driver, no URL at all) was a traceback."""
    for args, env, label in (
        (("user", "ls"), {"WH_DB_URL": url}, "WH_DB_URL: "),
        (("user", "ls", "--db", url), {}, ""),
        (("sql", "--db", url, "select 1"), {}, ""),
        (("serve", "--listen", "127.0.0.1:0", "--db", url), {}, "--db: "),
    ):
        code, _, err = wh(tmp_path, *args, **env)
        assert code == 2, (args, err)
        assert err.startswith(f"Error: {label}") and said in err, (args, err)
        assert "s3cret" not in err and "Traceback" not in err


def test_the_config_files_types_are_checked(tmp_path: Path) -> None:
    """`replication = true` was read as 1; `home = ""` was the current directory."""
    for text, said in (
        ("replication = true\n", "replication: true is not a valid integer"),
        ("wait = false\n", "wait: false is not a valid float"),
        ("home = 5\n", "home: 5 is not a string"),
    ):
        path = write_config(tmp_path, text)
        code, _, err = wh(tmp_path, "config", WH_HOME="")  # the file's home, not the test's
        assert code == 2 and err == f"Error: {path}: {said}\n", err
    write_config(tmp_path, 'home = ""\nurl = ""\n')
    code, out, err = wh(tmp_path, "config", WH_HOME="")
    assert code == 0, err
    assert "WH_HOME\t-\tdefault" in out and "WH_URL\t-\tdefault" in out, out


def test_wh_user_is_a_user_name(tmp_path: Path) -> None:
    """A tab or a blank name was recorded in names and accounting as given."""
    for value in ("bad\tuser", "   ", "x" * 300):
        code, _, err = wh(tmp_path, "put", str(tmp_path), WH_USER=value)
        assert code == 2 and err.startswith(f"Error: WH_USER: {value!r} is not a user name"), err
    code, _, err = wh(tmp_path / "ok", "config", WH_USER="alice.b@example")
    assert code == 0, err


@pytest.mark.parametrize(
    ("var", "value", "shown"),
    [
        ("WH_REPLICATION", "3", "3"),
        ("WH_REPLICATION", " 3 ", "3"),
        ("WH_REPLICATION", "+3.0", "3"),
        ("WH_WAIT", "1e3", "1000.0"),
        ("WH_WAIT", ".5", "0.5"),
        ("WH_KEEP_TIMEOUT", "3600", "3600.0"),
        ("WH_FORK_SERVER", "YES", "true"),
        ("WH_FORK_SERVER", "T", "true"),
        ("WH_FORK_SERVER", "off", "false"),
        ("WH_FORK_SERVER", "0", "false"),
    ],
)
def test_the_spellings_a_setting_takes(tmp_path: Path, var: str, value: str, shown: str) -> None:
    """The rules of docs/cli.md, "Settings": whole numbers, seconds, true or false."""
    code, out, err = wh(tmp_path, "config", "--json", **{var: value})
    assert code == 0, err
    assert {s["variable"]: s["value"] for s in json.loads(out)["settings"]}[var] == shown


@pytest.mark.parametrize(
    ("var", "value", "said"),
    [
        ("WH_REPLICATION", "3.5", "'3.5' is not a valid integer"),
        ("WH_REPLICATION", "3.", "'3.' is not a valid integer"),
        ("WH_REPLICATION", "0x3", "'0x3' is not a valid integer"),
        ("WH_REPLICATION", "\u0663", "'\u0663' is not a valid integer"),
        ("WH_WAIT", "\u0663", "'\u0663' is not a valid float"),
        ("WH_WAIT", "nan", "nan is not in the range 0<=x<=3600"),
        ("WH_WAIT", "inf", "inf is not in the range 0<=x<=3600"),
        ("WH_KEEP_TIMEOUT", "0", "0 is not in the range 0<x<=3600"),
        ("WH_DASK_WAIT", "3600.5", "3600.5 is not in the range 0<=x<=3600"),
        ("WH_FORK_SERVER", " true ", "' true ' is not a valid boolean (true or false)"),
        ("WH_FORK_SERVER", "2", "'2' is not a valid boolean (true or false)"),
    ],
)
def test_the_spellings_a_setting_refuses(tmp_path: Path, var: str, value: str, said: str) -> None:
    code, _, err = wh(tmp_path, "config", **{var: value})
    assert code == 2 and err == f"Error: {var}: {said}\n", err
