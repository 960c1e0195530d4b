"""A flat directory of many files through the S3 gateway and WebDAV on a
real controller (docs/s3-gateway.md "Large collections", docs/webdav.md
"A directory of many files"): every key through boto3's paging and every
member through one PROPFIND, equal to the names in order, with the
server's memory bounded by the pages it reads, not by the directory.

The server runs in this process, so tracemalloc sees its allocations; the
client side keeps only a count (a page of keys, a streamed XML parse)."""

from __future__ import annotations

import tracemalloc
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from botocore.exceptions import ClientError

from cluster import KeepPool
from s3gw_helpers import Gateway, gateway
from warehouse.gateways import s3objects, s3outline
from warehouse.gateways.webdav import with_webdav
from warehouse.mount import _tree
from warehouse.server.controller.app import create_app
from warehouse.server.serving import ServerThread

# Past this many files a directory is read in pages, a collection listed
# from its outline (20,000 and 100,000 as shipped: lowered here, so that a
# directory ten times past it is listed in a few seconds).
PAGED_FROM = 2000
FILES = 10 * PAGED_FROM
DAV = "{DAV:}"
# The peak while listing, collections' text and outlines made included:
# measured 4.6 MB (S3) and 6.3 MB (PROPFIND) in pages; 11.9 MB with the
# directory parsed whole for S3, 23.8 MB with wsgidav building the PROPFIND
# answer whole (a resource object a member).
BOUND = 9 << 20


def _name(i: int) -> str:
    return f"f{i:06}"


@contextmanager
def _webdav(gw: Gateway) -> Iterator[str]:
    """The same controller's state with WebDAV, as `wh serve` serves it."""
    server = ServerThread(with_webdav(create_app(gw.state.config, gw.state), gw.state)).start()
    try:
        yield server.url + "/webdav"
    finally:
        server.stop()


def _flat(gw: Gateway, token: str, tmp_path: Path) -> None:
    """A collection "flat" of FILES one-byte files in its top directory,
    all in one block, made from manifest text (a put of as many files
    would take most of the test's time)."""
    data = tmp_path / "bytes"
    data.write_bytes(bytes(i % 251 for i in range(FILES)))
    pdh = gw.wh(token, "put", str(data)).output.strip()
    line = gw.wh(token, "manifest", pdh).output.split("\n")[0]
    locator = line.split(" ")[1]
    segments = " ".join(f"{i}:1:{_name(i)}" for i in range(FILES))
    manifest = tmp_path / "flat.manifest"
    manifest.write_text(f". {locator} {segments}\n")
    gw.wh(token, "put", "--manifest", str(manifest), "--name", "flat")


def _s3_keys(s3: object) -> int:
    """Every key of bucket "flat" through ListObjectsV2's continuation
    tokens, checked against the names in order; their count."""
    seen = 0
    asked: dict[str, str] = {}
    while True:
        page = s3.list_objects_v2(Bucket="flat", **asked)  # type: ignore[attr-defined]
        keys = [o["Key"] for o in page.get("Contents", [])]
        assert keys == [_name(i) for i in range(seen, seen + len(keys))]
        seen += len(keys)
        if not page["IsTruncated"]:
            return seen
        assert len(keys) == 1000
        asked = {"ContinuationToken": page["NextContinuationToken"]}


def _propfind_members(url: str, token: str) -> int:
    """Every member of a PROPFIND (Depth 1) of ``url``, parsed as it
    streams in and checked against the names in order; their count."""
    body = (
        b'<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:prop>'
        b"<D:getcontentlength/><D:resourcetype/></D:prop></D:propfind>"
    )
    headers = {"Depth": "1", "Authorization": f"Bearer {token}"}
    parser = ET.XMLPullParser(events=("start", "end"))
    root: ET.Element | None = None
    seen = -1  # the directory itself comes first
    with httpx.stream("PROPFIND", url, headers=headers, content=body, timeout=120) as r:
        assert r.status_code == 207, r.read()
        for chunk in r.iter_bytes():
            parser.feed(chunk)
            for event, element in parser.read_events():
                if event == "start":
                    root = element if root is None else root
                    continue
                if element.tag != f"{DAV}response":
                    continue
                href = unquote(urlsplit(element.findtext(f"{DAV}href", "")).path)
                if seen >= 0:
                    assert href.rsplit("/", 1)[1] == _name(seen), (seen, href)
                    assert element.findtext(f".//{DAV}getcontentlength") == "1"
                seen += 1
                assert root is not None
                root.remove(element)  # the client holds none it has seen

    parser.close()
    return seen


def test_a_flat_directory_is_listed_in_pages_by_s3_and_webdav(
    tmp_path: Path, keep_servers: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3objects, "OUTLINED_FROM", PAGED_FROM)
    monkeypatch.setattr(s3outline, "PAGED_FROM", PAGED_FROM)
    monkeypatch.setattr(_tree, "PAGED_FROM", PAGED_FROM)
    with gateway(tmp_path / "c.db", keep_servers) as gw, _webdav(gw) as dav:
        alice, bob = gw.user("alice"), gw.user("bob")
        gw.wh(gw.admin, "perms-mode", "private")
        _flat(gw, alice, tmp_path)
        s3 = gw.boto3(*gw.credential(alice))
        tracemalloc.start()
        try:
            assert _s3_keys(s3) == FILES
            s3_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
            # Pages that begin inside the directory: after a key, after a
            # token, with a prefix.
            after = s3.list_objects_v2(Bucket="flat", StartAfter=_name(FILES // 2), MaxKeys=3)
            assert [o["Key"] for o in after["Contents"]] == [
                _name(FILES // 2 + i) for i in (1, 2, 3)
            ]
            token = after["NextContinuationToken"]
            more = s3.list_objects_v2(Bucket="flat", ContinuationToken=token, MaxKeys=2)
            assert [o["Key"] for o in more["Contents"]] == [_name(FILES // 2 + i) for i in (4, 5)]
            middle = s3.list_objects_v2(Bucket="flat", Prefix=_name(4567)[:-1], MaxKeys=5)
            assert [o["Key"] for o in middle["Contents"]] == [_name(4560 + i) for i in range(5)]
            got = s3.get_object(Bucket="flat", Key=_name(FILES - 3))["Body"].read()
            assert got == bytes([(FILES - 3) % 251])
            tracemalloc.reset_peak()
            assert _propfind_members(f"{dav}/by_name/flat/", alice) == FILES
            dav_peak = tracemalloc.get_traced_memory()[1]

        finally:
            tracemalloc.stop()
        assert s3_peak < BOUND, f"S3 listing peak {s3_peak / 1e6:.1f} MB"
        assert dav_peak < BOUND, f"PROPFIND peak {dav_peak / 1e6:.1f} MB"
        # Permissions as for any listing: in private mode bob reads none of alice's.
        r = httpx.request(
            "PROPFIND",
            f"{dav}/by_name/flat/",
            headers={"Depth": "1", "Authorization": f"Bearer {bob}"},
            timeout=60,
        )
        assert r.status_code == 404
        with pytest.raises(ClientError, match="NoSuchBucket"):
            gw.boto3(*gw.credential(bob)).list_objects_v2(Bucket="flat")
