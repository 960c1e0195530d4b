"""A user's git: URL is fetched by the controller with none of its operator's
git setup (configuration, credential helpers, ~/.netrc), and only from the
schemes and hosts its admin allows (wh serve --git-allow; docs/security.md).

The repositories are served by `git http-backend` behind a small HTTP
server on 127.0.0.1; the private one asks for a password the operator's
credential helper and ~/.netrc know."""

from __future__ import annotations

import base64
import subprocess
import threading
from collections.abc import Iterator
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result

from cluster import Controller, KeepPool, controller
from warehouse import EMPTY_LOCATOR, catalog
from warehouse.cli import cli

SECRET = "the lab's private code\n"
PUBLIC = "anyone may read this\n"
PASSWORD = base64.b64encode(b"op:op-secret").decode()


def _repo(path: Path, text: str) -> Path:
    work = path.with_suffix(".work")
    work.mkdir(parents=True)
    (work / "f.py").write_text(text)
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "one"]):
        subprocess.run(
            ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
            check=True,
        )
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(path)], check=True)
    return path


class _GitHttp(BaseHTTPRequestHandler):
    """Smart HTTP through `git http-backend` (CGI); /private.git needs a password."""

    root = ""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._cgi()

    def do_POST(self) -> None:
        self._cgi()

    def _cgi(self) -> None:
        path, _, query = self.path.partition("?")
        if path.startswith("/private.git") and (
            self.headers.get("Authorization") != f"Basic {PASSWORD}"
        ):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="lab"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": self.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        done = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode().split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "served"
    _repo(root / "private.git", SECRET)
    _repo(root / "public.git", PUBLIC)
    handler = type("Handler", (_GitHttp,), {"root": str(root)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def operator_home(tmp_path: Path, git_server: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The operator's own git setup, which must not apply to users' fetches."""
    home = tmp_path / "operator"
    home.mkdir()
    helper = "!f() { echo username=op; echo password=op-secret; }; f"
    (home / ".gitconfig").write_text(
        f'[url "{git_server}/private.git"]\n'
        "\tinsteadOf = https://code.invalid/public.git\n"
        f"[credential]\n\thelper = {helper!r}\n".replace("'", '"')
    )
    (home / ".netrc").write_text("machine 127.0.0.1 login op password op-secret\n")
    (home / ".netrc").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM"):
        monkeypatch.delenv(name, raising=False)
    # The operator's setup works for the operator (the test would prove nothing else).
    done = subprocess.run(
        ["git", "ls-remote", "https://code.invalid/public.git"], capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return home


def _jobs(ctl: Controller) -> tuple[httpx.Client, str]:
    token = ctl.user("alice")
    client = httpx.Client(
        base_url=ctl.url, headers={"Authorization": f"Bearer {token}"}, timeout=120, verify=False
    )
    r = client.post("/api/v1/collections", json={"manifest_text": f". {EMPTY_LOCATOR} 0:0:f\n"})
    assert r.status_code == 200, r.text
    return client, r.json()["pdh"]


def _stored(ctl: Controller, text: str) -> bool:
    return any(c.size == len(text) for c in catalog.list_collections(ctl.state.engine))


def test_the_operators_git_setup_never_applies_to_a_users_fetch(
    tmp_path: Path, keep_servers: KeepPool, git_server: str, operator_home: Path
) -> None:
    allow = (git_server.rsplit(":", 1)[0], "https://*")  # http://127.0.0.1 and https
    with controller(tmp_path / "c.db", keep_servers, git_roots=(), git_allow=allow) as ctl:
        ctl.state.start_jobs(ctl.url, tmp_path / "controller-jobs", "local", cpus=1)
        client, one_file = _jobs(ctl)
        with closing(client):
            for url in (
                "https://code.invalid/public.git",  # the operator's url.insteadOf
                f"{git_server}/private.git",  # the operator's credential helper, ~/.netrc
            ):
                r = client.post(
                    "/api/v1/jobs", json={"function": f"git:{url}@main:f.py", "input": one_file}
                )
                assert r.status_code == 400, (url, r.text)
                assert "fatal:" in r.json()["error"], r.text
            assert not _stored(ctl, SECRET)
            # What anyone may read is fetched as before.
            r = client.post(
                "/api/v1/jobs",
                json={"function": f"git:{git_server}/public.git@main:f.py", "input": one_file},
            )
            assert r.status_code == 200, r.text
            assert _stored(ctl, PUBLIC)


def test_only_the_schemes_and_hosts_the_admin_allows_are_fetched(
    tmp_path: Path, keep_servers: KeepPool, git_server: str
) -> None:
    public = f"{git_server}/public.git"
    with controller(tmp_path / "c.db", keep_servers, git_roots=()) as ctl:  # the default
        ctl.state.start_jobs(ctl.url, tmp_path / "controller-jobs", "local", cpus=1)
        client, one_file = _jobs(ctl)
        with closing(client):
            for url in (
                public,  # http, and an address
                public.replace("http://", "https://"),  # https, but an address
                public.replace("127.0.0.1", "localhost"),
                "ext::sh -c touch% /tmp/pwned",
                "git@127.0.0.1:public.git",  # scp-like ssh
            ):
                r = client.post(
                    "/api/v1/jobs", json={"function": f"git:{url}@main:f.py", "input": one_file}
                )
                assert r.status_code == 403, (url, r.text)
                assert "--git-allow" in r.json()["error"]
            assert not _stored(ctl, PUBLIC)


def test_a_bad_git_allow_is_one_error_line(tmp_path: Path) -> None:
    # Through click in this process: a `wh serve` process loads the whole
    # server before it reads its options (about a second each).
    def serve(*args: str, home: Path) -> Result:
        env = {"WH_HOME": str(home)}
        return CliRunner().invoke(cli, ["serve", *args], env=env, catch_exceptions=False)

    for rule in ("ftp://example.org", "https://", "https://a/b", "https://a:99999"):
        done = serve("--listen", "127.0.0.1:0", "--git-allow", rule, home=tmp_path)
        assert done.exit_code == 2, done.stderr
        assert done.stderr.startswith("Error: --git-allow") and done.stderr.count("\n") == 1
    done = serve("--git-allow", "none", "--git-allow", "https://*", home=tmp_path / "h")
    assert done.exit_code == 2 and done.stderr.startswith("Error: --git-allow none"), done.stderr
