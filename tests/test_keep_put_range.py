"""``KeepClient.put_range``: a block stored from a range of an open file,
read a piece at a time and streamed to each copy's server, which checks
its MD5 as it checks any PUT (real keep servers; hostile ones are the
small fakes of test_remote_hostile)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import KeepPool, pool_fixture
from test_remote_hostile import FakeKeep, client, servers
from warehouse.blocks import MAX_BLOCK_SIZE, Locator
from warehouse.errors import UsageError, WarehouseError
from warehouse.remote import keepclient
from warehouse.remote.blockhttp import FileRange
from warehouse.remote.keepclient import KeepClient, ReplicationError
from warehouse.remote.probe import Service

__all__ = ["servers"]  # the fixture of hostile servers, used here too

pool = pool_fixture("module")

# A block in the middle of a file, longer than the pieces it is read in.
HEAD, BLOCK, TAIL = b"h" * 1000, os.urandom(3 << 20) + b"end", b"t" * 5000


@pytest.fixture
def middle(tmp_path: Path) -> Iterator[int]:
    path = tmp_path / "text"
    path.write_bytes(HEAD + BLOCK + TAIL)
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def _keep(pool: KeepPool, replication: int = 2) -> KeepClient:
    services = [Service(f"keep{i}", s.url) for i, s in enumerate(pool.servers)]
    return KeepClient(services, pool.admin_token, replication=replication)


def test_a_range_is_stored_on_two_servers_and_reads_back(pool: KeepPool, middle: int) -> None:
    keep = _keep(pool)
    try:
        locator = keep.put_range(middle, len(HEAD), len(BLOCK))
        assert (locator.md5, locator.size) == (hashlib.md5(BLOCK).hexdigest(), len(BLOCK))
        assert keep.stats.puts == 1 and keep.stats.copies == 2
        # Signed, with the servers that hold it: a fresh client reads it.
        assert locator.hint("A") is not None
        assert keep.put_range(middle, len(HEAD), len(BLOCK)) == locator
        assert keep.stats.skipped == 1  # already stored: only checked
    finally:
        keep.close()
    fresh = _keep(pool)
    try:
        assert fresh.get(locator, cache=False) == BLOCK
        assert fresh.put(BLOCK).locator.without_hints() == locator.without_hints()
    finally:
        fresh.close()


def test_the_empty_range_and_one_over_the_bound(pool: KeepPool, middle: int) -> None:
    keep = _keep(pool)
    try:
        empty = keep.put_range(middle, 10, 0)
        assert empty.is_empty and keep.stats.puts == 0
        with pytest.raises(UsageError, match="over the"):
            keep.put_range(middle, 0, MAX_BLOCK_SIZE + 1)
    finally:
        keep.close()


def test_a_streamed_body_that_is_not_its_block_is_refused(pool: KeepPool, middle: int) -> None:
    """The server checks the MD5 of a body streamed from a file: a range
    whose bytes are not the block named (as if it changed after its MD5
    was taken) is refused, and nothing is stored."""
    keep = _keep(pool)
    try:
        named = hashlib.md5(b"x" + BLOCK[1:]).hexdigest()
        url = pool.servers[0].url
        body = FileRange(middle, len(HEAD), len(BLOCK))
        reply = keep.http.request("PUT", f"{url}/{named}", body)
        assert reply.status == 400, reply.text
        assert keep.http.request("HEAD", f"{url}/{named}+{len(BLOCK)}").status == 404
    finally:
        keep.close()


@pytest.mark.parametrize("servers", [["wrong-locator", "good"]], indirect=True)
def test_a_hostile_copy_is_not_counted(servers: list[FakeKeep], middle: int) -> None:
    keep = client(servers, replication=2)
    try:
        with pytest.raises(ReplicationError, match="stored 1 of 2"):
            keep.put_range(middle, len(HEAD), len(BLOCK))
    finally:
        keep.close()
    keep = client(servers, replication=1)
    try:
        locator = keep.put_range(middle, len(HEAD), len(BLOCK))
        assert locator.without_hints() == Locator(hashlib.md5(BLOCK).hexdigest(), len(BLOCK))
        # What the good server took is the block, streamed whole.
        assert servers[1].blocks[locator.md5] == BLOCK
    finally:
        keep.close()


def test_a_range_past_the_end_of_its_file_is_an_error(pool: KeepPool, middle: int) -> None:
    keep = _keep(pool)
    try:
        with pytest.raises(WarehouseError, match="ends at"):
            keep.put_range(middle, len(HEAD), len(HEAD + BLOCK + TAIL))
        assert keep.stats.puts == 0
    finally:
        keep.close()


def test_the_signed_locators_remembered_are_bounded(
    pool: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client remembers the signed locators of the last blocks it put,
    not all: one forgotten (no signature cache here) is sent again."""
    monkeypatch.setattr(keepclient, "_SIGNED_HELD", 4)
    keep = _keep(pool)
    try:
        blocks = [b"block %d\n" % i for i in range(10)]
        first = [keep.put(b).locator for b in blocks]
        assert len(keep._signed) <= 4
        assert keep.stats.puts == 10
        again = keep.put(blocks[0]).locator
        assert keep.stats.puts == 11 and keep.stats.skipped == 0
        assert again.without_hints() == first[0].without_hints()
        keep.put(blocks[-1])  # still remembered: only checked
        assert keep.stats.skipped == 1
        assert [keep.get(loc, cache=False) for loc in first] == blocks
    finally:
        keep.close()
