"""`wh serve --keep N`: a one-machine installation, started and stopped as a user would."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from cluster import WH_BIN, admin_and_alice, listening, wh_serve
from conftest import make_tree


def test_serve_with_local_keep_servers(tmp_path: Path) -> None:
    env = {**os.environ, "WH_HOME": str(tmp_path / "home")}
    env.pop("WH_URL", None)
    server = wh_serve(env, "--keep", "2")
    try:
        remote = admin_and_alice(env, listening(server, keep=2)[0])

        def wh(*args: str) -> str:
            done = subprocess.run([WH_BIN, *args], env=remote, capture_output=True, text=True)
            assert done.returncode == 0, (args, done.stderr)
            return done.stdout

        src = make_tree(tmp_path / "src")
        pdh = wh("put", str(src), "--name", "tree").strip()
        wh("get", "tree", str(tmp_path / "out"))
        assert (tmp_path / "out" / "sub" / "colon:name").read_bytes() == b"colon\n"
        assert wh("name", "get", "tree").strip() == pdh
        denied = subprocess.run(
            [WH_BIN, "user", "add", "mallory"], env=remote, capture_output=True, text=True
        )
        assert denied.returncode == 6, "alice is no admin"
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
        if server.stdout:
            server.stdout.close()
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path / "home")], capture_output=True)
    assert leftover.stdout == b"", "the keep servers stop with the controller"
