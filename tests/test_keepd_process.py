"""`wh keepd` as a real process, and keepd with a controller.

The controller here is a small stand-in served on 127.0.0.1 that answers
exactly the requests keepd makes of the real one (its contract is in
docs/keepd.md); it is a test peer, not a copy of our controller.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from warehouse.blocks.locator import Locator
from warehouse.blocks.signing import Check, check_signature
from warehouse.blocks.volume import LocalVolume
from warehouse.errors import UsageError
from warehouse.remote import blockhttp, httpconn
from warehouse.server.keepd import ControllerTokenChecker, KeepConfig, create_app
from warehouse.server.lifeline import ID_FILE, server_id
from warehouse.server.serving import KEEPALIVE_SECONDS, ServerThread

WH_BIN = str(Path(sys.executable).with_name("wh"))
ADMIN = "keep-admin"


@dataclass
class Keepd:
    proc: subprocess.Popen[str]
    url: str
    stderr: Path

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait(10)


@contextmanager
def keepd(
    tmp_path: Path, volume: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[Keepd]:
    err = tmp_path / f"keepd-{time.monotonic_ns()}.err"
    argv = [WH_BIN, "keepd", "--volume", str(volume), "--listen", "127.0.0.1:0", *args]
    with err.open("w") as errf:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=errf, text=True, env={**os.environ, **(env or {})}
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    k = Keepd(proc, line.strip().removeprefix("keepd listening on "), err)
    try:
        assert line.startswith("keepd listening on http://127.0.0.1:"), (line, err.read_text())
        yield k
    finally:
        k.stop()
        proc.stdout.close()


def test_sigterm_shuts_down_cleanly(tmp_path: Path) -> None:
    with keepd(tmp_path, tmp_path / "vol", env={"WH_KEEP_ADMIN_TOKEN": ADMIN}) as k:
        r = httpx.put(
            f"{k.url}/{hashlib.md5(b'hi').hexdigest()}",
            content=b"hi",
            headers={"Authorization": "Bearer u"},
            verify=False,
        )
        assert r.status_code == 200
        k.proc.send_signal(signal.SIGTERM)
        assert k.proc.wait(15) == 0
        assert "Application shutdown complete" in k.stderr.read_text()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{k.url}/metrics", verify=False)


def test_sigkill_mid_put_leaves_no_block(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    data = os.urandom(6 * 1024 * 1024)
    h = hashlib.md5(data).hexdigest()
    env = {"WH_KEEP_ADMIN_TOKEN": ADMIN}
    with keepd(tmp_path, vol, env=env) as k:
        host, port = k.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                f"PUT /{h} HTTP/1.1\r\nHost: k\r\nAuthorization: Bearer u\r\n"
                f"Content-Length: {len(data)}\r\n\r\n".encode()
            )
            sock.sendall(data[: 4 * 1024 * 1024])
            deadline = time.monotonic() + 10
            while not any(p.is_file() for p in vol.rglob("*")):  # the write is under way
                assert time.monotonic() < deadline
                time.sleep(0.01)
            k.proc.send_signal(signal.SIGKILL)
            k.proc.wait(10)
    assert not (vol / h[:3] / h).exists()
    assert list(LocalVolume(vol).index()) == []
    with keepd(tmp_path, vol, env=env) as k2:
        r = httpx.get(
            f"{k2.url}/{h}+{len(data)}", headers={"Authorization": f"Bearer {ADMIN}"}, verify=False
        )
        assert r.status_code == 404
        assert (
            httpx.get(
                f"{k2.url}/index", headers={"Authorization": f"Bearer {ADMIN}"}, verify=False
            ).text
            == "\n"
        )


@dataclass
class StandIn:
    """What keepd needs of a controller: users, its keep settings, registration."""

    users: dict[str, tuple[str, bool]]
    key: str = "0123456789abcdef" * 4
    registered: list[str] = field(default_factory=list)
    user_lookups: int = 0

    def app(self) -> Starlette:
        def user(request: Request) -> tuple[str, bool] | None:
            auth = request.headers.get("authorization", "")
            return self.users.get(auth.removeprefix("Bearer "))

        async def current(request: Request) -> Response:
            self.user_lookups += 1
            u = user(request)
            if u is None:
                return JSONResponse({"error": "unknown token"}, 401)
            return JSONResponse({"name": u[0], "admin": u[1]})

        async def keep_config(request: Request) -> Response:
            u = user(request)
            if u is None or not u[1]:
                return JSONResponse({"error": "admin only"}, 403)
            return JSONResponse(
                {"blob_signing_key": self.key, "signature_ttl": 7200, "trash_lifetime": 60.5}
            )

        async def register(request: Request) -> Response:
            u = user(request)
            if u is None or not u[1]:
                return JSONResponse({"error": "admin only"}, 403)
            self.registered.append((await request.json())["url"])
            return JSONResponse({"id": "keep-1"})

        return Starlette(
            routes=[
                Route("/api/v1/users/current", current),
                Route("/api/v1/cluster/keep-config", keep_config),
                Route("/api/v1/keep_services", register, methods=["POST"]),
            ]
        )


def test_keepd_with_a_controller(tmp_path: Path) -> None:
    ctl = StandIn({ADMIN: ("keep", True), "alice-token": ("alice", False)})
    with (
        ServerThread(ctl.app()) as c,
        keepd(tmp_path, tmp_path / "vol", "--controller", c.url, env={"WH_TOKEN": ADMIN}) as k,
    ):
        assert ctl.registered == [k.url]  # the real port, before it said it listens
        alice = {"Authorization": "Bearer alice-token"}
        r = httpx.put(
            f"{k.url}/{hashlib.md5(b'data').hexdigest()}",
            content=b"data",
            headers=alice,
            verify=False,
        )
        loc = Locator.parse(r.text)
        assert check_signature(loc, "alice-token", ctl.key.encode(), 7200) is Check.OK
        assert httpx.get(f"{k.url}/{loc}", headers=alice, verify=False).content == b"data"
        assert httpx.get(f"{k.url}/index", headers=alice, verify=False).status_code == 403
        assert httpx.get(
            f"{k.url}/index", headers={"Authorization": f"Bearer {ADMIN}"}, verify=False
        ).text
        bad = httpx.put(
            f"{k.url}/{hashlib.md5(b'x').hexdigest()}",
            content=b"x",
            headers={"Authorization": "Bearer nobody"},
            verify=False,
        )
        assert bad.status_code == 401


def _keepd_once(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`wh keepd` on a fresh volume with ``args``, run to its end (a refusal)."""
    return subprocess.run(
        [WH_BIN, "keepd", "--volume", str(tmp_path / "v"), "--listen", "127.0.0.1:0", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_keepd_refuses_to_start_without_its_controller(tmp_path: Path) -> None:
    done = _keepd_once(tmp_path, "--controller", "http://127.0.0.1:9", WH_TOKEN=ADMIN)
    assert done.returncode != 0 and done.stdout == ""
    assert "cannot reach the controller" in done.stderr


@pytest.mark.parametrize(
    "option",
    [
        ("--trash-lifetime", "inf"),
        ("--trash-lifetime", "nan"),
        ("--trash-lifetime", "1e300"),
        ("--signature-ttl", "99999999999999999999"),
    ],
)
def test_keepd_refuses_lifetimes_it_cannot_write(tmp_path: Path, option: tuple[str, str]) -> None:
    # Once accepted: every PUT then failed with 500 (an expiry past 8 hex
    # digits) or every trash failed (a deadline that is no whole number).
    (tmp_path / "admin").write_text(ADMIN)
    (tmp_path / "key").write_text("key")
    done = _keepd_once(
        tmp_path,
        "--admin-token-file",
        str(tmp_path / "admin"),
        "--signing-key-file",
        str(tmp_path / "key"),
        *option,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert f"Invalid value for '{option[0]}'" in done.stderr


def test_controller_token_checks_are_cached_and_an_absent_controller_is_503(
    tmp_path: Path,
) -> None:
    ctl = StandIn({ADMIN: ("keep", True), "bob-token": ("bob", False)})
    with ServerThread(ctl.app()) as c:
        config = KeepConfig(
            volumes=[LocalVolume(tmp_path / "vol")],
            signing_key=b"k",
            tokens=ControllerTokenChecker(c.url),
        )
        ctl_url = c.url
        with ServerThread(create_app(config)) as k:
            bob = {"Authorization": "Bearer bob-token"}
            for data in (b"1", b"2", b"3"):
                r = httpx.put(
                    f"{k.url}/{hashlib.md5(data).hexdigest()}",
                    content=data,
                    headers=bob,
                    verify=False,
                )
                assert r.status_code == 200
            assert ctl.user_lookups == 1
            assert httpx.get(f"{k.url}/status", headers=bob, verify=False).status_code == 403
            c.stop()  # the controller goes away
            assert (
                httpx.get(f"{k.url}/status", headers=bob, verify=False).status_code == 403
            )  # cached
            r = httpx.get(
                f"{k.url}/status", headers={"Authorization": "Bearer new-token"}, verify=False
            )
            assert r.status_code == 503 and ctl_url in r.text


def test_idle_connections_are_dropped_before_the_server_drops_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Otherwise a request sent as the server closes an idle connection meets a reset.
    assert blockhttp.IDLE_SECONDS < KEEPALIVE_SECONDS
    clock = [1000.0]
    monkeypatch.setattr(httpconn.time, "monotonic", lambda: clock[0])
    with keepd(tmp_path, tmp_path / "vol") as k:
        client = blockhttp.BlockHttp("u", timeout=10)
        sockets = []
        for advance in (0.0, 1.0, blockhttp.IDLE_SECONDS + 1):
            clock[0] += advance
            assert client.request("GET", f"{k.url}/metrics").status == 200
            [[(_, conn)]] = client._conns._idle.values()
            sockets.append(conn.sock)
        client.close()
    assert sockets[0] is sockets[1], "a connection idle for 1 s is reused"
    assert sockets[2] is not sockets[1], "one idle past IDLE_SECONDS is not"


def test_a_server_id_file_left_empty_by_a_crash_gets_a_new_id(tmp_path: Path) -> None:
    # An empty id file once made every start fail at registration ("String
    # should match pattern"), and `wh serve --keep` restarted it forever.
    first = server_id(tmp_path)
    assert server_id(tmp_path) == first  # kept
    (tmp_path / ID_FILE).write_text("")
    fresh = server_id(tmp_path)
    assert fresh.startswith("keep-") and len(fresh) == 20 and fresh != first
    (tmp_path / ID_FILE).write_text("not an id\n")
    with pytest.raises(UsageError, match="holds no keep server id"):
        server_id(tmp_path)
