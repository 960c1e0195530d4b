"""`wh serve --keep N` as an operator runs it: restarted, its keep servers
killed, itself killed. Real processes throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from cluster import WH_BIN
from conftest import make_tree
from warehouse.cli import cli
from warehouse.remote.api import ApiClient


def children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out |= {int(c) for c in text}
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def until(cond: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


class Serve:
    def __init__(self, proc: subprocess.Popen[str], url: str, keeps: list[str], log: Path) -> None:
        self.proc = proc
        self.url = url
        self.keeps = keeps
        self.log = log

    def line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()


@contextmanager
def serving(env: dict[str, str], log: Path, keep: int = 2) -> Iterator[Serve]:
    with open(log, "a") as err:
        proc = subprocess.Popen(
            [WH_BIN, "serve", "--listen", "127.0.0.1:0", "--keep", str(keep), "--executor", "none"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().split()
        assert first[:3] == ["controller", "listening", "on"], first
        keeps = [
            proc.stdout.readline().strip().removeprefix("keepd listening on ") for _ in range(keep)
        ]
        yield Serve(proc, first[3], keeps, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        if proc.stdout:
            proc.stdout.close()


def wh(env: dict[str, str], *args: str, code: int = 0) -> str:
    """`wh` in-process (as a user would call it, without the interpreter start)."""
    done = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert done.exit_code == code, (args, done.exit_code, done.output, done.stderr)
    return done.output


@pytest.mark.slow
def test_restarts_keep_identity_and_address_and_keep_retire(tmp_path: Path) -> None:
    env = {**os.environ, "WH_HOME": str(tmp_path / "home")}
    env.pop("WH_URL", None)
    log = tmp_path / "serve.log"
    admin = wh(env, "user", "add", "admin", "--admin").strip()
    src = make_tree(tmp_path / "src")
    with serving(env, log) as s:
        remote = {**env, "WH_URL": s.url, "WH_TOKEN": admin}
        pdh = wh(remote, "put", str(src), "--name", "tree").strip()
        before = json.loads(wh(remote, "keep", "ls", "--json"))
        assert sorted(k["url"] for k in before) == sorted(s.keeps)
    with serving(env, log) as s:
        remote = {**env, "WH_URL": s.url, "WH_TOKEN": admin}
        after = json.loads(wh(remote, "keep", "ls", "--json"))
        # Same ids (kept on the volumes), same addresses, no stale rows.
        assert sorted((k["id"], k["url"]) for k in after) == sorted(
            (k["id"], k["url"]) for k in before
        )
        assert sorted(s.keeps) == sorted(k["url"] for k in before)
        for action in ("gc", "fsck", "balance"):
            wh(remote, action)
        wh(remote, "get", "tree", str(tmp_path / "out"))
        # A server that is gone for good: GC stops on it until it is retired.
        api = ApiClient(s.url, admin)
        try:
            api.post("/keep_services", {"url": "http://127.0.0.1:9"})
        finally:
            api.close()
        assert "127.0.0.1:9" in wh(remote, "gc", code=1) + wh(remote, "keep", "ls")
        assert wh(remote, "keep", "retire", "http://127.0.0.1:9").startswith("retired keep-")
        wh(remote, "keep", "retire", "http://127.0.0.1:9", code=4)
        wh(remote, "gc")
        assert "clean" in wh(remote, "fsck")
        made = subprocess.run(  # (`wh user add` leaves its API client open in-process)
            [WH_BIN, "user", "add", "alice"], env=remote, capture_output=True, text=True
        )
        alice = made.stdout.strip()
        wh({**remote, "WH_TOKEN": alice}, "keep", "retire", before[0]["id"], code=6)
        assert wh(remote, "name", "get", "tree").strip() == pdh


@pytest.mark.slow
def test_keep_servers_are_restarted_and_die_with_the_controller(tmp_path: Path) -> None:
    env = {**os.environ, "WH_HOME": str(tmp_path / "home")}
    env.pop("WH_URL", None)
    log = tmp_path / "serve.log"
    with serving(env, log) as s:
        keeps = children(s.proc.pid)
        assert len(keeps) == 2
        victim = min(keeps)
        os.kill(victim, signal.SIGKILL)
        line = s.line()  # the restarted server announces itself, at the same address
        assert line.removeprefix("keepd listening on ") in s.keeps
        until(lambda: "exited with status -9" in log.read_text(), "the exit is logged")
        assert f"pid {victim}" in log.read_text()
        now = children(s.proc.pid)
        assert len(now) == 2 and victim not in now
        # The controller killed outright: its keep servers stop by themselves.
        os.kill(s.proc.pid, signal.SIGKILL)
        s.proc.wait(10)
        until(lambda: not any(alive(p) for p in now), "keep servers exit with the controller", 30)
