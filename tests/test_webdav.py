"""WebDAV at ``/webdav`` (docs/webdav.md) on a real controller and keep
servers, asked with plain HTTP (PROPFIND, GET with Range) and with rclone
(``rclone copy`` and ``rclone check`` over a webdav remote): listings equal
``wh get``'s, bytes are exact, writes are refused, a token is needed, and in
private mode a user sees only what it may read."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from click.testing import CliRunner, Result

from cluster import Controller, KeepPool, admin_and_alice, controller, listening, wh_serve
from conftest import WH_BIN
from warehouse.cli import cli
from warehouse.gateways.webdav import with_webdav
from warehouse.server.controller.app import create_app
from warehouse.server.serving import ServerThread

DAV = "{DAV:}"


def _wh(ctl: Controller, token: str, *args: str) -> Result:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("WH_")}
    env.update(WH_URL=ctl.url, WH_TOKEN=token)
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output, result.stderr)
    return result


@contextmanager
def _served(tmp_path: Path, keep_servers: KeepPool) -> Iterator[tuple[Controller, str]]:
    """A controller, and the same state's app with WebDAV as `wh serve` serves it."""
    with controller(tmp_path / "c.db", keep_servers) as ctl:
        app = with_webdav(create_app(ctl.state.config, ctl.state), ctl.state)
        server = ServerThread(app).start()
        try:
            yield ctl, server.url + "/webdav"
        finally:
            server.stop()


def _tree(root: Path) -> dict[str, bytes]:
    files = {
        "a.txt": b"alpha\n",
        "empty": b"",
        "sub/b.bin": os.urandom(300_000),
        "sub/deeper/c with space.txt": b"gamma\n",
        "sub/deeper/d\u00e9j\u00e0.txt": b"delta\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def _propfind(url: str, auth: httpx.Auth | None = None, token: str = "") -> dict[str, int | None]:
    """Each member of a collection (depth 1, itself left out): its size, None for a collection."""
    headers = {"Depth": "1"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    r = httpx.request("PROPFIND", url, headers=headers, auth=auth, timeout=60)
    assert r.status_code == 207, (r.status_code, r.text)
    out: dict[str, int | None] = {}
    base = unquote(urlsplit(url).path).rstrip("/")
    for response in ET.fromstring(r.content).iter(f"{DAV}response"):
        href = unquote(urlsplit(response.findtext(f"{DAV}href", "")).path).rstrip("/")
        if href == base:
            continue
        is_dir = response.find(f".//{DAV}resourcetype/{DAV}collection") is not None
        length = response.findtext(f".//{DAV}getcontentlength")
        out[href[len(base) + 1 :]] = None if is_dir else int(length or -1)
    return out


def test_listings_bytes_ranges_and_refusals_over_http(
    tmp_path: Path, keep_servers: KeepPool
) -> None:
    with _served(tmp_path, keep_servers) as (ctl, dav):
        alice = ctl.user("alice")
        (tmp_path / "run").mkdir()
        files = _tree(tmp_path / "run")
        pdh = _wh(ctl, alice, "put", str(tmp_path / "run"), "--name", "run42").output.split()[-1]
        basic = httpx.BasicAuth("anyone", alice)

        assert _propfind(f"{dav}/", basic) == {"by_id": None, "by_name": None}
        assert _propfind(f"{dav}/by_name/", basic) == {"run42": None}
        # A name in a project (lab/run7) is a folder lab holding run7.
        _wh(ctl, alice, "name", "set", "lab/run7", pdh)
        assert _propfind(f"{dav}/by_name/", basic) == {"lab": None, "run42": None}
        assert _propfind(f"{dav}/by_name/lab/", basic) == {"run7": None}
        r = httpx.get(f"{dav}/by_name/lab/run7/a.txt", auth=basic, timeout=60)
        assert r.content == b"alpha\n"
        assert _propfind(f"{dav}/by_name/run42/", token=alice) == {
            "a.txt": 6,
            "empty": 0,
            "sub": None,
        }
        assert _propfind(f"{dav}/by_id/{pdh}/sub/deeper/", basic) == {
            "c with space.txt": 6,
            "d\u00e9j\u00e0.txt": 6,
        }
        for rel, data in files.items():
            r = httpx.get(f"{dav}/by_id/{pdh}/{rel}", auth=basic, timeout=60)
            assert r.status_code == 200 and r.content == data, rel
        big = files["sub/b.bin"]
        r = httpx.get(
            f"{dav}/by_name/run42/sub/b.bin", auth=basic, headers={"Range": "bytes=1000-200999"}
        )
        assert r.status_code == 206 and r.content == big[1000:201000]
        r = httpx.get(f"{dav}/by_name/run42/sub/b.bin", auth=basic, headers={"Range": "bytes=-7"})
        assert r.status_code == 206 and r.content == big[-7:]

        # Everything below a folder at once is refused (Depth missing means infinity).
        for depth in ({"Depth": "infinity"}, {}):
            r = httpx.request("PROPFIND", f"{dav}/by_name/", auth=basic, headers=depth)
            assert r.status_code == 403 and b"propfind-finite-depth" in r.content
        # No token, a wrong one: 401, asking for Basic.
        for auth in (None, httpx.BasicAuth("alice", "not-a-token")):
            r = httpx.request("PROPFIND", f"{dav}/by_name/", auth=auth, headers={"Depth": "1"})
            assert r.status_code == 401 and "Basic" in r.headers["WWW-Authenticate"]
        # Writes are refused and change nothing.
        for method in ("PUT", "DELETE", "MKCOL", "MOVE", "COPY", "PROPPATCH", "LOCK"):
            r = httpx.request(method, f"{dav}/by_name/run42/a.txt", auth=basic, content=b"x")
            assert r.status_code in (403, 405), (method, r.status_code)
        r = httpx.request("PUT", f"{dav}/by_name/run42/new.txt", auth=basic, content=b"x")
        assert r.status_code in (403, 405)
        assert "new.txt" not in _propfind(f"{dav}/by_name/run42/", basic)
        assert httpx.get(f"{dav}/by_name/run42/a.txt", auth=basic).content == b"alpha\n"
        # Paths that are not there, or try to climb out, are 404.
        for bad in ("by_name/nothing/", f"by_id/{pdh}/nope", "by_id/not-a-pdh/", "elsewhere"):
            assert httpx.get(f"{dav}/{bad}", auth=basic).status_code == 404, bad
        r = httpx.get(f"{dav}/by_name/run42/..%2f..%2fby_name", auth=basic)
        assert r.status_code in (400, 403, 404)


def test_in_private_mode_bob_sees_none_of_alices(tmp_path: Path, keep_servers: KeepPool) -> None:
    with _served(tmp_path, keep_servers) as (ctl, dav):
        alice, bob = ctl.user("alice"), ctl.user("bob")
        _wh(ctl, ctl.admin_token, "perms-mode", "private")
        for who, token in (("alices", alice), ("bobs", bob)):
            (tmp_path / who).mkdir()
            (tmp_path / who / "f.txt").write_text(f"{who}\n")
            _wh(ctl, token, "put", str(tmp_path / who), "--name", who)
        pdh = _wh(ctl, alice, "name", "get", "alices").output.strip()
        as_bob = httpx.BasicAuth("bob", bob)
        assert _propfind(f"{dav}/by_name/", as_bob) == {"bobs": None}
        assert httpx.get(f"{dav}/by_name/alices/f.txt", auth=as_bob).status_code == 404
        assert httpx.get(f"{dav}/by_id/{pdh}/f.txt", auth=as_bob).status_code == 404
        as_alice = httpx.BasicAuth("alice", alice)
        assert httpx.get(f"{dav}/by_id/{pdh}/f.txt", auth=as_alice).content == b"alices\n"
        # Shared, bob reads it; unshared, he no longer does (checked on each request).
        _wh(ctl, alice, "share", "alices", "bob")
        assert httpx.get(f"{dav}/by_id/{pdh}/f.txt", auth=as_bob).content == b"alices\n"
        _wh(ctl, alice, "unshare", "alices", "bob")
        assert httpx.get(f"{dav}/by_id/{pdh}/f.txt", auth=as_bob).status_code == 404


def _rclone() -> str:
    found = shutil.which("rclone")
    if found is None:
        problem = "no rclone (`make install-s3-clients` installs Debian's)"
        if os.environ.get("CI"):
            pytest.fail(f"WebDAV rclone test: {problem}; CI must run it", pytrace=False)
        pytest.skip(problem)
    return found


def test_rclone_copy_and_check_equal_wh_get(tmp_path: Path, keep_servers: KeepPool) -> None:
    rclone = _rclone()
    with _served(tmp_path, keep_servers) as (ctl, dav):
        alice = ctl.user("alice")
        (tmp_path / "run").mkdir()
        files = _tree(tmp_path / "run")
        _wh(ctl, alice, "put", str(tmp_path / "run"), "--name", "run42")
        _wh(ctl, alice, "get", "run42", str(tmp_path / "got"))
        env = {
            **os.environ,
            "RCLONE_CONFIG": str(tmp_path / "rclone.conf"),
            "RCLONE_CONFIG_WH_TYPE": "webdav",
            "RCLONE_CONFIG_WH_URL": dav,
            "RCLONE_CONFIG_WH_VENDOR": "other",
            "RCLONE_CONFIG_WH_BEARER_TOKEN": alice,
        }

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [rclone, *args], env=env, capture_output=True, text=True, timeout=300
            )

        done = run("copy", "wh:by_name/run42", str(tmp_path / "copied"))
        assert done.returncode == 0, done.stderr
        copied = {
            str(p.relative_to(tmp_path / "copied")): p.read_bytes()
            for p in (tmp_path / "copied").rglob("*")
            if p.is_file()
        }
        assert copied == files
        # rclone check compares the remote with wh get's copy, byte for byte.
        done = run("check", "--download", "wh:by_name/run42", str(tmp_path / "got"))
        assert done.returncode == 0, done.stderr
        (tmp_path / "got" / "a.txt").write_bytes(b"changed\n")
        done = run("check", "--download", "wh:by_name/run42", str(tmp_path / "got"))
        assert done.returncode != 0 and "a.txt" in done.stderr
        listed = run("lsl", "wh:by_name/run42").stdout
        sizes = {line.split()[-1]: int(line.split()[0]) for line in listed.splitlines()}
        assert sizes["sub/b.bin"] == len(files["sub/b.bin"])
        assert hashlib.md5(copied["sub/b.bin"]).digest() == hashlib.md5(files["sub/b.bin"]).digest()


def test_wh_serve_answers_webdav_with_its_keep_servers(tmp_path: Path) -> None:
    """The command as a user runs it: `wh serve --keep 2` serves /webdav."""
    env = {**os.environ, "WH_HOME": str(tmp_path / "home")}
    env.pop("WH_URL", None)
    server = wh_serve(env, "--keep", "2", "--executor", "none")
    try:
        url, _ = listening(server, keep=2)
        alice = admin_and_alice(env, url)
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / "x.txt").write_bytes(b"served\n")
        put = subprocess.run(
            [WH_BIN, "put", str(tmp_path / "d"), "--name", "served"],
            env=alice,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert put.returncode == 0, put.stderr
        auth = httpx.BasicAuth("alice", alice["WH_TOKEN"])
        assert _propfind(f"{url}/webdav/by_name/served/", auth) == {"x.txt": 7}
        r = httpx.get(f"{url}/webdav/by_name/served/x.txt", auth=auth, timeout=60)
        assert r.content == b"served\n"
        assert httpx.get(f"{url}/webdav/by_name/served/x.txt").status_code == 401
    finally:
        server.terminate()
        assert server.wait(60) == 0
        if server.stdout:
            server.stdout.close()
