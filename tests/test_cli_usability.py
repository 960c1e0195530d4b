"""The CLI as a new user meets it: clear errors for missing settings, waiting
for a starting controller, Ctrl-C (docs/cli.md)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

from click.testing import CliRunner

from cluster import controller, keep_pool
from conftest import WH_BIN
from warehouse import catalog
from warehouse.catalog import auth
from warehouse.cli import cli


def _closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"WH_HOME": str(tmp_path / "home"), **extra}


class _Done:
    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = code, stdout, stderr


def _run(env: dict[str, str], *args: str) -> _Done:
    """`wh` in-process (the interpreter's start is slow on a busy machine)."""
    # CliRunner sets variables over os.environ; None removes one.
    full = {k: None for k in os.environ if k.startswith("WH_")} | env
    done = CliRunner().invoke(cli, list(args), env=full)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    return _Done(done.exit_code, done.stdout, done.stderr)


def test_an_empty_or_missing_token_is_one_clear_error(tmp_path: Path) -> None:
    for token in (None, "", "  "):
        env = _env(tmp_path, WH_URL=_closed_url())
        if token is not None:
            env["WH_TOKEN"] = token
        for args in (("ls", "x"), ("user", "ls"), ("keep", "ls")):
            done = _run(env, *args)
            assert done.returncode == 2, (args, done.stderr)
            assert done.stderr.startswith("Error: no token: set WH_TOKEN"), done.stderr
            assert "Traceback" not in done.stderr
    done = _run(_env(tmp_path, WH_URL=_closed_url(), WH_TOKEN="a b"), "ls", "x")
    assert done.returncode == 2 and "WH_TOKEN is not a token" in done.stderr


def test_a_controller_that_never_starts_fails_after_wh_wait(tmp_path: Path) -> None:
    url = _closed_url()
    env = _env(tmp_path, WH_URL=url, WH_TOKEN="t" * 32, WH_WAIT="1")
    # The client gives up by itself (the per-test timeout bounds the wait; no
    # wall-clock figure is asserted), and says which wait it kept.
    done = _run(env, "ls", "x")
    assert done.returncode == 1, done.stderr
    assert f"waiting up to 1 s for the controller at {url}" in done.stderr
    assert f"Error: cannot reach the controller at {url}" in done.stderr
    assert "waited 1 s; $WH_WAIT" in done.stderr
    # The first user of a new installation: the same bounded wait.
    done = _run(_env(tmp_path, WH_URL=url, WH_WAIT="0"), "user", "add", "alice", "--admin")
    assert done.returncode == 1 and "cannot reach the controller" in done.stderr
    assert done.stdout == ""


def test_a_bad_wh_wait_names_the_variable(tmp_path: Path) -> None:
    for bad in ("soon", "-1", "1e9"):
        done = _run(_env(tmp_path, WH_URL=_closed_url(), WH_WAIT=bad), "user", "add", "a")
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("Error: WH_WAIT: "), done.stderr


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_exits_130_saying_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env.update(_env(tmp_path, WH_URL=_closed_url(), WH_WAIT="120"))
    proc = subprocess.Popen(
        [WH_BIN, "user", "add", "alice"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As from a terminal: a suite run in the background (`make test &`) passes
        # SIGINT on ignored, and Python then never turns it into KeyboardInterrupt.
        preexec_fn=_sigint_default,
    )
    assert proc.stderr is not None
    # Interrupted while it waits for the controller, as a user would.
    assert proc.stderr.readline().startswith("waiting up to 120 s")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert out == "" and err == "", err


def test_ls_shows_a_backslash_once(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "back\\slash").write_bytes(b"x")
    (src / "two\nlines").write_bytes(b"y")
    env = _env(tmp_path)
    assert _run(env, "put", str(src), "--name", "bs").returncode == 0
    done = _run(env, "ls", "bs")
    assert done.returncode == 0, done.stderr
    # Only a name with a line break is escaped, md5sum's way.
    assert done.stdout.splitlines() == ["back\\slash", "\\two\\nlines"]


def _complete(env: dict[str, str], words: str) -> list[str]:
    full = {k: None for k in os.environ if k.startswith("WH_")} | env
    full.update(
        _WH_COMPLETE="bash_complete", COMP_WORDS=words, COMP_CWORD=str(len(words.split()) - 1)
    )
    done = CliRunner().invoke(cli, [], prog_name="wh", env=full)
    lines = [line for line in done.stdout.splitlines() if line]
    assert all("," in line for line in lines), done.stdout
    return [line.split(",", 1)[1] for line in lines]


def test_shell_completion_offers_names_and_job_ids(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("data\n")
    env = _env(tmp_path)
    for name in ("run42", "run43", "other"):
        assert _run(env, "put", str(src), "--name", name).returncode == 0
    assert _complete(env, "wh name get ru") == ["run42", "run43"]
    assert _complete(env, "wh ls o") == ["other"]
    assert _complete(env, "wh ls other/") == []
    done = _run(env, "job", "submit", "builtin:zhash", "--input", "run42", "--wait")
    assert done.returncode == 0, done.stderr
    assert _complete(env, "wh job show 1") == ["1"]
    assert _complete(env, "wh job show 9") == []
    # No warehouse to ask: nothing offered, no error in the command line.
    broken = _env(tmp_path, WH_URL=_closed_url(), WH_TOKEN="t" * 32, WH_WAIT="0")
    assert _complete(broken, "wh name get ru") == []


def test_output_to_a_reader_that_went_away_stops_quietly(tmp_path: Path) -> None:
    """`wh ls | head`: 141 (as SIGPIPE ends a command in a shell) and nothing
    said; a full disk behind standard output is still an error."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3000):  # more than a pipe holds: the writes meet the closed end
        (src / f"f{i:05d}").write_bytes(b"x")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env.update(_env(tmp_path))
    assert _run(_env(tmp_path), "put", str(src), "--name", "many").returncode == 0
    for args in (["ls", "many", "--json"], ["get", "many", "--no-write"], ["ls", "many"]):
        read, write = os.pipe()
        os.close(read)
        try:
            done = subprocess.run(
                [WH_BIN, *args], env=env, stdout=write, stderr=subprocess.PIPE, text=True
            )
        finally:
            os.close(write)
        assert (done.returncode, done.stderr) == (141, ""), (args, done.stderr)
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [WH_BIN, "get", "many", "--no-write"],
            env=env,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert done.returncode == 1
    assert done.stderr.startswith("Error: ") and len(done.stderr.splitlines()) == 1


def test_every_option_says_what_it_does() -> None:
    """`wh serve --help` listed `--replication INTEGER [default: 2]` and nothing more."""
    import click

    ctx = click.Context(cli)

    def commands(cmd: click.Command, path: str) -> list[tuple[str, click.Command]]:
        found = [(path, cmd)]
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, name
                found += commands(sub, f"{path} {name}")
        return found

    for path, cmd in commands(cli, "wh"):
        assert cmd.help, path
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                assert p.help, (path, p.opts)


def test_serve_replication_has_the_range_of_the_others(tmp_path: Path) -> None:
    for value in ("0", "9"):
        done = _run(_env(tmp_path), "serve", "--listen", "127.0.0.1:0", "--replication", value)
        assert done.returncode == 2 and "1<=x<=8" in done.stderr, done.stderr


def test_completing_creates_no_warehouse(tmp_path: Path) -> None:
    """TAB in a shell whose $WH_HOME does not exist yet offers nothing and makes nothing."""
    env = {"WH_HOME": str(tmp_path / "not-yet")}
    assert _complete(env, "wh ls ru") == []
    assert _complete(env, "wh job show 1") == []
    assert not (tmp_path / "not-yet").exists()


def test_job_watch_draws_no_bar_when_piped(tmp_path: Path) -> None:
    """A bar is for a terminal: piped, `wh job watch` says only how the job ended."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("data\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env.update(_env(tmp_path))
    assert _run(_env(tmp_path), "put", str(src), "--name", "in").returncode == 0
    assert _run(_env(tmp_path), "job", "submit", "builtin:zhash", "--input", "in").returncode == 0
    done = subprocess.run(
        [WH_BIN, "job", "watch", "1"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("job 1: complete: ") and done.stderr == "", done.stderr


def test_counts_of_cpus_and_attempts_start_at_one(tmp_path: Path) -> None:
    """`wh job manager --cpus 0` ran nothing and said nothing; `wh serve --job-cpus 0`
    started a controller that could never run a step."""
    env = _env(tmp_path)
    for args, option in (
        (("job", "submit", "builtin:zhash", "--input", "x", "--cpus", "0"), "--cpus"),
        (("job", "submit", "builtin:zhash", "--input", "x", "--attempts", "0"), "--attempts"),
        (("job", "manager", "--cpus", "0"), "--cpus"),
        (("serve", "--listen", "127.0.0.1:0", "--job-cpus", "-1"), "--job-cpus"),
    ):
        done = _run(env, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert f"Invalid value for '{option}'" in done.stderr, done.stderr


def test_logs_of_a_job_or_step_not_there_is_not_found(tmp_path: Path) -> None:
    """`wh job logs 999` printed nothing and exited 0."""
    env = _env(tmp_path)
    done = _run(env, "job", "logs", "999")
    assert (done.returncode, done.stderr) == (4, "Error: no job 999\n"), done.stderr
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("data\n")
    assert _run(env, "put", str(src), "--name", "in").returncode == 0
    assert _run(env, "job", "submit", "builtin:zhash", "--input", "in", "--wait").returncode == 0
    assert _run(env, "job", "logs", "1").returncode == 0
    done = _run(env, "job", "logs", "1", "--step", "99")
    assert (done.returncode, done.stderr) == (4, "Error: job 1 has no step 99\n"), done.stderr


def test_adding_a_user_twice_says_how_to_get_a_token(tmp_path: Path) -> None:
    """The README's recipe pasted a second time meets the user it made the first."""
    env = _env(tmp_path)
    assert _run(env, "user", "add", "alice", "--admin").returncode == 0
    done = _run(env, "user", "add", "alice", "--admin")
    assert done.returncode == 3
    assert done.stderr == (
        "Error: user 'alice' exists: `wh token create alice` prints a new token for it\n"
    )
    again = _run(env, "token", "create", "alice")
    assert again.returncode == 0 and again.stdout.strip(), again.stderr


def test_a_first_user_made_on_a_catalog_the_controller_does_not_use_is_refused(
    tmp_path: Path,
) -> None:
    """`wh serve --db URL` and then the README's `wh user add` without --db: the
    user lands in $WH_HOME's catalog, which the controller never reads."""
    with keep_pool(tmp_path / "keep", 0) as pool, controller(tmp_path / "other.db", pool) as c:
        env = _env(tmp_path, WH_URL=c.url)
        done = _run(env, "user", "add", "alice", "--admin")
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        assert done.stderr.splitlines()[-1].startswith(
            f"Error: the controller at {c.url} does not use the catalog alice was added to ("
        ), done.stderr
        assert "--db URL or $WH_DB_URL" in done.stderr
        # The token it made there is revoked: nothing usable is left behind.
        home = catalog.open_engine(f"sqlite:///{tmp_path / 'home' / 'controller.db'}")
        try:
            assert [t.user for t in auth.list_tokens(home)] == []
        finally:
            home.dispose()
        # Given the controller's catalog, the same command works.
        done = _run(
            env, "user", "add", "alice", "--admin", "--db", f"sqlite:///{tmp_path / 'other.db'}"
        )
        assert done.returncode == 0, done.stderr
        token = done.stdout.strip()
        shown = _run({**env, "WH_TOKEN": token}, "user", "ls")
        assert shown.returncode == 0 and "alice\tyes" in shown.stdout, shown.stderr
