"""The keep server's pure decisions: no sockets, no files."""

from __future__ import annotations

import re

import pytest

from warehouse.blocks.locator import MAX_BLOCK_SIZE
from warehouse.blocks.signing import Check
from warehouse.errors import UsageError
from warehouse.server.keepd.auth import Principal, TtlCache, bearer_token
from warehouse.server.keepd.buffers import BufferPool
from warehouse.server.keepd.metrics import Metrics, VolumeGauge, render_prometheus
from warehouse.server.keepd.rules import (
    Refused,
    check_prefix,
    choose_volume,
    parse_pull_list,
    parse_put_target,
    parse_trash_list,
    put_length,
    read_refusal,
)
from warehouse.server.serving import parse_listen

MD5 = "5d41402abc4b2a76b9719d911017c592"


def status_of(fn, *args) -> int:
    with pytest.raises(Refused) as e:
        fn(*args)
    return e.value.status


def test_put_length() -> None:
    assert put_length("5", None) == 5
    assert put_length("5", 5) == 5
    assert put_length(str(MAX_BLOCK_SIZE), None) == MAX_BLOCK_SIZE
    assert status_of(put_length, None, None) == 411
    assert status_of(put_length, str(MAX_BLOCK_SIZE + 1), None) == 413
    assert status_of(put_length, "-1", None) == 400
    assert status_of(put_length, "5", 6) == 400


def test_put_target() -> None:
    assert parse_put_target(MD5) == (MD5, None)
    assert parse_put_target(f"{MD5}+5") == (MD5, 5)
    assert status_of(parse_put_target, MD5.upper()) == 400
    assert status_of(parse_put_target, "index") == 400


def test_choose_volume() -> None:
    assert choose_volume([10, 30, 20], 5, 0) == 1
    assert choose_volume([10, 30, 20], 5, 26) is None
    assert choose_volume([10, 30, 20], 15, 0) == 1
    assert choose_volume([], 1, 0) is None
    # Equal volumes take turns.
    assert {choose_volume([50, 50], 1, 0, turn) for turn in range(4)} == {0, 1}


def test_read_refusal() -> None:
    user, admin = Principal("u", False), Principal("a", True)
    assert read_refusal(Check.OK, None) is None
    assert read_refusal(Check.MISSING, admin) is None
    assert read_refusal(Check.BAD, admin) is None
    statuses = {c: r.status for c in Check if c is not Check.OK if (r := read_refusal(c, user))}
    assert statuses == {Check.MISSING: 401, Check.EXPIRED: 403, Check.BAD: 403}
    refusal = read_refusal(Check.BAD, None)
    assert refusal is not None and refusal.status == 401


def test_work_lists() -> None:
    trash = parse_trash_list([{"locator": f"{MD5}+5", "block_mtime": 7}])
    assert trash[0].locator.key == f"{MD5}+5" and trash[0].block_mtime == 7
    pull = parse_pull_list([{"locator": f"{MD5}+5", "servers": ["http://h:1/"]}])
    assert pull[0].servers == ("http://h:1",)
    for bad in ({}, [1], [{"locator": MD5, "block_mtime": 1}], [{"locator": f"{MD5}+5"}]):
        assert status_of(parse_trash_list, bad) == 400
    for bad in ([{"locator": f"{MD5}+5", "servers": []}], [{"locator": f"{MD5}+5"}]):
        assert status_of(parse_pull_list, bad) == 400
    assert status_of(parse_pull_list, [{"locator": f"{MD5}+5", "servers": ["ftp://h"]}]) == 400


def test_prefix() -> None:
    assert check_prefix("") == ""
    assert check_prefix("abc") == "abc"
    assert status_of(check_prefix, "xyz") == 400


def test_bearer_token() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("OAuth2 abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


def test_ttl_cache_expires_and_is_bounded() -> None:
    now = [0.0]
    cache: TtlCache[str, int | None] = TtlCache(2, clock=lambda: now[0])
    cache.put("a", 1, 60)
    cache.put("b", None, 10)
    assert cache.get("a") == (True, 1)
    assert cache.get("b") == (True, None)  # a cached "unknown token"
    now[0] = 11
    assert cache.get("b") == (False, None)
    cache.put("c", 3, 60)
    cache.put("d", 4, 60)  # evicts the least recently used
    assert len(cache) == 2 and cache.get("a") == (False, None)
    now[0] = 80
    assert cache.get("c") == (False, None)


def test_prometheus_text() -> None:
    m = Metrics()
    m.count_request("GET", 200, 10)
    m.count_request("GET", 200, 5)
    m.add(corrupt_reads=1)
    text = render_prometheus(m, [VolumeGauge('/v"1', 100, 200)])
    assert 'wh_keepd_requests_total{code="200",method="GET"} 2.0\n' in text
    assert "wh_keepd_bytes_out_total 15.0\n" in text
    assert "wh_keepd_corrupt_reads_total 1.0\n" in text
    assert 'wh_keepd_volume_free_bytes{device="",volume="/v\\"1"} 100.0\n' in text
    assert "process_resident_memory_bytes " in text  # the process's own metrics too
    sample = re.compile(r'[a-z_]+(\{([a-z]+="([^"\\]|\\.)*",?)+\})? [0-9.e+-]+')
    for line in text.splitlines():
        assert line.startswith("# ") or sample.fullmatch(line), line


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:80") == ("::1", 80)
    for bad in ("127.0.0.1", ":80", "h:x", "h:70000"):
        with pytest.raises(UsageError):
            parse_listen(bad)


def test_a_read_buffer_is_reused_only_once_no_view_of_it_is_left() -> None:
    pool = BufferPool(1000, keep=2)
    first = pool.take()
    assert len(first) == 1000
    sending = memoryview(first)[:10]  # as a transport holds a body it still sends
    pool.give(first)
    second = pool.take()
    assert second is not first, "a buffer still being sent was handed out again"
    assert len(first) == 1000, "checking it changed nothing"
    sending.release()
    assert pool.take() is first
    pool.give(second)
    pool.give(first)
    pool.give(bytearray(1000))  # over `keep`: dropped
    assert pool.idle() == 2
