"""A get through a controller that answers the manifest and listing
requests wrongly (a server of the test's own before a real controller): one
`Error:` line, nothing under the destination, no scratch file left; or, for
an answer the client may take some other way, the right files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cluster import (
    Controller,
    ctl_fixture,
    pool_fixture,
)
from frontserver import Answer, Front, serving
from memory_helpers import WH

# The keep servers are shared by the module's tests (each has a controller of
# its own): none stops them or counts what they hold.
pool = pool_fixture("module")
ctl = ctl_fixture()


class _Front(Front):
    """Passes every request on to the controller behind it; ``answer``
    rewrites the answer to a GET of one collection's manifest or listing."""

    def __init__(self, behind: str) -> None:
        super().__init__(behind)
        self.change: Callable[[str, Answer], Answer] = lambda path, answer: answer

    def reply(self, command: str, path: str, relay: Callable[[], Answer]) -> Answer:
        answer = relay()
        return self.change(path, answer) if command == "GET" else answer

    def answer(self, pdh: str, which: str, change: Callable[[Answer], Answer]) -> None:
        """GET /collections/``pdh``/``which`` (manifest, listing) is answered
        ``change(what the controller answered)``."""
        suffix = f"/collections/{pdh}/{which}"
        self.change = lambda path, sent: change(sent) if path.endswith(suffix) else sent


def _body(edit: Callable[[bytes], bytes], *, short: bool = False) -> Callable[[Answer], Answer]:
    """The controller's answer with its body rewritten by ``edit``; ``short``:
    saying a longer body than it sends (a body that stops midway)."""

    def change(sent: Answer) -> Answer:
        status, kind, body, _ = sent
        return (status, kind, edit(body), short)

    return change


@pytest.fixture
def front(ctl: Controller) -> Iterator[_Front]:
    with serving(_Front(ctl.url)) as server:
        yield server


def _src(root: Path) -> Path:
    for d in ("a", "b"):
        (root / d).mkdir(parents=True)
        for i in range(5):
            (root / d / f"f é {i}").write_bytes(b"%s %d\n" % (d.encode(), i))
    return root


def _want(src: Path) -> list[str]:
    return [
        f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.relative_to(src)}"
        for p in sorted(src.rglob("*"))
        if p.is_file()
    ]


class _Client:
    def __init__(self, tmp_path: Path, ctl: Controller, front: _Front) -> None:
        self.scratch = tmp_path / "scratch"
        self.scratch.mkdir()
        self.env = {
            **os.environ,
            "WH_URL": front.url,
            "WH_TOKEN": ctl.user("alice"),
            "WH_HOME": str(tmp_path / "home"),
            "TMPDIR": str(self.scratch),
        }

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [WH, *args], env=self.env, capture_output=True, text=True, check=False, timeout=300
        )


@pytest.fixture
def client(tmp_path: Path, ctl: Controller, front: _Front) -> _Client:
    return _Client(tmp_path, ctl, front)


def _refused(client: _Client, pdh: str, dest: Path, code: int, said: str) -> None:
    for args in (("get", pdh, str(dest)), ("get", "--no-write", pdh)):
        done = client(*args)
        assert done.returncode == code, (args, done.stderr)
        assert done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
        assert said in lines[0], lines[0]
        assert not dest.exists()
        assert list(client.scratch.iterdir()) == []


def _other_manifest(client: _Client, tmp_path: Path) -> bytes:
    other = tmp_path / "other"
    (other / "a").mkdir(parents=True)
    (other / "a" / "f é 0").write_bytes(b"not the same\n")
    pdh = client("put", "--no-progress", str(other)).stdout.strip()
    done = client("manifest", pdh)
    assert done.returncode == 0, done.stderr
    return done.stdout.encode()


def test_a_manifest_that_is_not_the_pdhs_is_refused(
    tmp_path: Path, client: _Client, front: _Front
) -> None:
    pdh = client("put", "--no-progress", str(_src(tmp_path / "src"))).stdout.strip()
    other = _other_manifest(client, tmp_path)
    front.answer(pdh, "manifest", lambda sent: (200, "text/plain", other, False))
    _refused(client, pdh, tmp_path / "out", 5, "whose PDH is")


@pytest.mark.parametrize("which", ["manifest", "listing"])
def test_a_body_that_stops_midway_is_one_error(
    tmp_path: Path, client: _Client, front: _Front, which: str
) -> None:
    pdh = client("put", "--no-progress", str(_src(tmp_path / "src"))).stdout.strip()
    front.answer(pdh, which, _body(lambda body: body[: len(body) // 2], short=True))
    _refused(client, pdh, tmp_path / "out", 1, "the controller at")


@pytest.mark.parametrize(
    "listing",
    [
        pytest.param(lambda body: b"<html>a login page</html>", id="not-json"),
        pytest.param(lambda body: body[: body.rindex(b"}") + 1][:-1] + b"]", id="not-closed"),
        pytest.param(lambda body: b"[]", id="a-list"),
        pytest.param(lambda body: b"", id="empty"),
    ],
)
def test_a_listing_that_is_not_one_is_one_error(
    tmp_path: Path, client: _Client, front: _Front, listing: Callable[[bytes], bytes]
) -> None:
    pdh = client("put", "--no-progress", str(_src(tmp_path / "src"))).stdout.strip()
    front.answer(pdh, "listing", _body(listing))
    dest = tmp_path / "out"
    for args in (("get", pdh, str(dest)), ("get", "--no-write", pdh)):
        done = client(*args)
        assert not dest.exists(), sorted(str(p) for p in dest.rglob("*"))
        assert list(client.scratch.iterdir()) == []
        assert done.returncode == 1 and done.stdout == "", (args, done)
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: the controller at"), done.stderr


def test_a_listing_in_another_order_gives_the_right_digests(
    tmp_path: Path, client: _Client, front: _Front
) -> None:
    src = _src(tmp_path / "src")
    pdh = client("put", "--no-progress", str(src)).stdout.strip()

    def reverse(body: bytes) -> bytes:
        items = json.loads(body)
        if isinstance(items, dict):
            items = dict(reversed(list(items.items())))
        else:
            items.reverse()
        return json.dumps(items).encode()

    front.answer(pdh, "listing", _body(reverse))
    done = client("get", "--no-write", pdh)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == _want(src)
    out = tmp_path / "out"
    done = client("get", pdh, str(out))
    assert done.returncode == 0, done.stderr
    assert (out / "b" / "f é 4").read_bytes() == b"b 4\n"


def test_a_manifest_longer_than_its_pdh_says_is_not_read_to_its_end(
    tmp_path: Path, client: _Client, front: _Front
) -> None:
    """An endless line (48 MiB, no newline) sent as the manifest of a
    collection whose PDH says a few hundred bytes: the client stops reading
    it past that length, so the front could not send it all."""
    pdh = client("put", "--no-progress", str(_src(tmp_path / "src"))).stdout.strip()
    endless = b". " + b"x" * (48 << 20)
    front.answer(pdh, "manifest", lambda sent: (200, "text/plain", endless, False))
    done = client("get", "--no-write", pdh)
    assert "Traceback" not in done.stderr
    assert front.cut_short == 1


@pytest.mark.parametrize("edit", ["missing", "extra"])
def test_a_listing_with_entries_missing_or_extra_gives_the_right_digests(
    tmp_path: Path, client: _Client, front: _Front, edit: str
) -> None:
    """A file the listing leaves out is hashed as it is read; an entry for
    no file is never used."""
    src = _src(tmp_path / "src")
    pdh = client("put", "--no-progress", str(src)).stdout.strip()

    def missing_or_extra(body: bytes) -> bytes:
        items = json.loads(body)
        if edit == "missing":
            del items["a/f é 2"]
        else:
            items = {"a/f é 11": "0" * 32, **items, "c": "1" * 32}
        return json.dumps(items, ensure_ascii=False).encode()

    front.answer(pdh, "listing", _body(missing_or_extra))
    done = client("get", "--no-write", pdh)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == _want(src)
    out = tmp_path / "out"
    done = client("get", pdh, str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == _want(src)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == sorted(
        str(p.relative_to(src)) for p in src.rglob("*") if p.is_file()
    )


_PROXY_ERROR: Answer = (500, "text/html", b"<html>proxy error</html>", False)


# An empty listing is in test_a_listing_that_is_not_one_is_one_error.
@pytest.mark.parametrize(
    ("which", "answer"),
    [
        pytest.param("manifest", _PROXY_ERROR, id="manifest-500"),
        pytest.param("listing", _PROXY_ERROR, id="listing-500"),
        pytest.param("manifest", (200, "text/plain", b"", False), id="manifest-empty"),
    ],
)
def test_an_error_or_empty_answer_is_one_error(
    tmp_path: Path, client: _Client, front: _Front, which: str, answer: Answer
) -> None:
    pdh = client("put", "--no-progress", str(_src(tmp_path / "src"))).stdout.strip()

    front.answer(pdh, which, lambda sent: answer)
    dest = tmp_path / "out"
    for args in (("get", pdh, str(dest)), ("get", "--no-write", pdh)):
        done = client(*args)
        assert not dest.exists()
        assert list(client.scratch.iterdir()) == []
        assert done.returncode in (1, 5) and done.stdout == "", (args, done)
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
