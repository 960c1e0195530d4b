"""Talking to keep servers as their admin: indexes, trash and pull lists, reads.

Used by the controller's GC. Every failure to read an index is raised as
``GcAborted`` naming the server: a run never acts on a partial view.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx

from warehouse.gc.mark import GcAborted
from warehouse.gc.plan import Copy, PullEntry
from warehouse.remote.blockhttp import BlockHttp, TransportError, request_budget
from warehouse.remote.probe import Service
from warehouse.remote.tls import verify_for

__all__ = ["KeepAdmin", "parse_index"]


def parse_index(text: str, url: str) -> list[Copy]:
    """``md5+size mtime_ns`` lines ending with an empty line (else it was cut short)."""
    if not text.endswith("\n\n") and text != "\n":
        raise GcAborted(f"the index of keep server {url} is incomplete (no final empty line)")
    out = []
    for n, line in enumerate(text[:-2].split("\n") if text != "\n" else [], 1):
        try:
            key, mtime = line.split(" ")
            md5, size = key.split("+")
            if len(md5) != 32:
                raise ValueError(md5)
            out.append(Copy(md5, int(size), int(mtime)))
        except ValueError:
            raise GcAborted(
                f"the index of keep server {url} has a bad line {n}: {line!r}"
            ) from None
    return out


class KeepAdmin:
    """``timeout``: seconds a server may send nothing; reading an index or a
    copy also has the block client's whole-request deadline, ``timeout`` plus
    one second per 64 KiB that came (docs/storage.md)."""

    def __init__(self, services: Sequence[Service], token: str, *, timeout: float = 300.0) -> None:
        self.services = list(services)
        self.by_id = {s.id: s for s in self.services}
        self.timeout = timeout
        self.http = httpx.Client(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout, connect=min(10.0, timeout)),
            verify=verify_for(*(s.url for s in self.services)),
        )
        self.blocks = BlockHttp(token, timeout)

    def close(self) -> None:
        self.http.close()
        self.blocks.close()

    def __enter__(self) -> KeepAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, url: str, **kw: object) -> httpx.Response:
        try:
            return self.http.request(method, url, **kw)  # type: ignore[arg-type]
        except httpx.HTTPError as e:
            raise GcAborted(f"keep server {url}: {e}") from e

    def _read_index(self, url: str) -> tuple[int, str]:
        """The status and body of ``GET url``, within ``request_budget`` of what
        came: a server trickling its index, never silent for the timeout, is
        cut off once it falls behind MIN_RATE on top of the timeout."""
        started = time.monotonic()
        try:
            with self.http.stream("GET", url) as r:
                got = 0
                pieces = []
                for piece in r.iter_bytes():
                    got += len(piece)
                    pieces.append(piece)
                    budget = request_budget(self.timeout, got)
                    if time.monotonic() - started > budget:
                        raise GcAborted(
                            f"keep server {url}: GET {url}: not over within {budget:.0f} s "
                            f"({got} bytes came; docs/storage.md, keep_timeout)"
                        )
                return r.status_code, b"".join(pieces).decode("utf-8", "replace")
        except httpx.HTTPError as e:
            raise GcAborted(f"keep server {url}: {e}") from e

    def index(self, s: Service) -> list[Copy]:
        try:
            status, text = self._read_index(f"{s.url}/index")
        except GcAborted as e:
            # Most often a server gone for good (its disk lost, so it came
            # back under a new id): say what takes it off the list.
            raise GcAborted(
                f"{e}; if keep server {s.id} is gone for good, "
                f"`wh keep retire {s.id}` (then `wh balance`)"
            ) from e
        if status != 200:
            raise GcAborted(
                f"cannot read the index of keep server {s.url}: HTTP {status} {text.strip()[:200]}"
            )
        return parse_index(text, s.url)

    def indexes(self) -> dict[str, list[Copy]]:
        """Every server's index, or GcAborted for the first one that fails."""
        found, failed = self.indexes_found()
        if failed:
            raise next(iter(failed.values()))
        return found

    def indexes_found(self) -> tuple[dict[str, list[Copy]], dict[str, GcAborted]]:
        """The index of every server that gives it, and why each other did not."""
        if not self.services:
            raise GcAborted("no keep servers are registered")

        def one(s: Service) -> list[Copy] | GcAborted:
            try:
                return self.index(s)
            except GcAborted as e:
                return e

        with ThreadPoolExecutor(min(8, len(self.services))) as pool:
            answers = list(pool.map(one, self.services))
        found: dict[str, list[Copy]] = {}
        failed: dict[str, GcAborted] = {}
        for s, answer in zip(self.services, answers, strict=True):
            if isinstance(answer, GcAborted):
                failed[s.id] = answer
            else:
                found[s.id] = answer
        return found, failed

    def _send(self, s: Service, what: str, items: list[dict[str, object]]) -> None:
        r = self._call("PUT", f"{s.url}/{what}", json=items)
        if r.status_code != 200:
            raise GcAborted(f"keep server {s.url} refused the {what} list: HTTP {r.status_code}")

    def send_trash(self, sid: str, copies: Sequence[Copy]) -> None:
        items: list[dict[str, object]] = [
            {"locator": c.key, "block_mtime": c.mtime_ns} for c in copies
        ]
        self._send(self.by_id[sid], "trash", items)

    def send_pull(self, sid: str, entries: Sequence[PullEntry]) -> None:
        items: list[dict[str, object]] = [
            {"locator": e.key, "servers": list(e.sources)} for e in entries
        ]
        self._send(self.by_id[sid], "pull", items)

    def busy(self, only: Collection[str] | None = None) -> int:
        """Trash and pull items the servers (those with ids ``only``, if given)
        still have queued or in hand."""
        total = 0
        for s in self.services:
            if only is not None and s.id not in only:
                continue
            r = self._call("GET", f"{s.url}/status")
            if r.status_code == 200:
                queues = r.json().get("queues", {})
                total += int(queues.get("trash", 0)) + int(queues.get("pull", 0))
        return total

    def wait_idle(self, timeout: float, only: Collection[str] | None = None) -> bool:
        """Wait until every server (with an id in ``only``, if given) has worked
        through its lists; False on timeout."""
        deadline = time.monotonic() + timeout
        while self.busy(only):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def verify(self, sid: str, copy: Copy) -> bool | None:
        """Read a copy and check it: True good, False corrupt, None gone meanwhile.

        A server that stops answering, or refuses the admin token, raises
        GcAborted: its copies are not known to be corrupt, and fsck must not
        say they are.
        """
        url = self.by_id[sid].url
        try:
            r = self.blocks.request("GET", f"{url}/{copy.key}", limit=copy.size)
        except TransportError as e:
            raise GcAborted(f"keep server {url}: {e}") from e
        if r.status == 404:
            return None
        # 502: the server found its copy corrupt; 503: it could not read it (EIO).
        if r.status in (502, 503):
            return False
        if r.status != 200:
            raise GcAborted(
                f"keep server {url} refused to read block {copy.key}: "
                f"HTTP {r.status} {r.text.strip()[:200]}"
            )
        return len(r.body) == copy.size and hashlib.md5(r.body).hexdigest() == copy.md5
