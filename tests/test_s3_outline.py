"""The S3 gateway's listing of a large collection from its outline
(docs/s3-gateway.md, "Large collections"): the same pages and entries as
the collection parsed whole, and memory bounded by the page and the
directories, not by the collection's files."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from cluster import KeepPool
from s3gw_helpers import gateway
from warehouse.blocks import Locator
from warehouse.collection.storedtext import StoredText
from warehouse.gateways import s3objects, s3outline
from warehouse.gateways.s3objects import Contents, Listable, encode_token, list_page, start_key
from warehouse.gateways.s3outline import OutlinedContents
from warehouse.manifest import FileEntry, FilePiece, Manifest, pages
from warehouse.manifest.pages import PagedFiles

_BLOCK = Locator.parse("0123456789abcdef0123456789abcdef+67108864")
# Names whose key order is not the directories' order: "." and "-" sort
# before "/", "0" after it; a directory holding only an empty one; spaces.
_PATHS = [
    "a.b", "a0", "a-b/c", "a/x", "a/y.q", "a/y/z", "a/y/w/v", "a/y-/k",
    "b/c d", "b.txt", "c/d/e/f", "c/d.e", "c/d0", "top",
    *(f"many/f{i:03}" for i in range(40)),
    *(f"many/s{i:02}/g" for i in range(12)),
]  # fmt: skip


def _manifest(paths: list[str]) -> Manifest:
    files = [FileEntry(p, 1, (FilePiece(_BLOCK, i, 1),)) for i, p in enumerate(paths)]
    return Manifest.from_files(files, ["e/only-empty", "many/hollow"])


def _stored(tmp_path: Path, pieces: list[bytes]) -> StoredText:
    text = StoredText(tmp_path)
    for piece in pieces:
        text.write(piece)
    return text.done()


def _all_pages(
    contents: Listable, prefix: str, delimiter: str, max_keys: int, start_after: str = ""
) -> list[tuple[list[str], list[str], bool]]:
    """Every page a client paging with continuation tokens is given."""
    pages = []
    token: str | None = None
    while True:
        page = list_page(contents, prefix, delimiter, start_key(token, start_after), max_keys)
        pages.append((page.keys, page.prefixes, page.truncated))
        if not page.truncated:
            return pages
        token = page.next_token
        assert len(pages) < 1000


@pytest.mark.parametrize(
    ("scratch", "paged"),
    [(False, False), (True, False), (True, True)],
    ids=["held", "scratch", "paged"],
)
def test_outlined_pages_and_entries_equal_the_whole_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch: bool, paged: bool
) -> None:
    if paged:
        # Directories of more than 5 files in pages of 7: "many" (40 files
        # and 12 subdirectories) is read from its sparse index.
        monkeypatch.setattr(s3outline, "PAGED_FROM", 5)
        monkeypatch.setattr(pages, "PAGE", 7)
    manifest = _manifest(_PATHS)
    text = manifest.portable_text().encode()
    whole = Contents(manifest, None)
    outlined = OutlinedContents(manifest.pdh, _stored(tmp_path, [text]) if scratch else text)
    try:
        if paged:
            assert isinstance(outlined.files("many"), PagedFiles)
        assert list(outlined.keys_from("")) == whole.keys == sorted(_PATHS)
        for prefix in ["", "a", "a/", "a/y", "a/y/", "b", "c/d", "many/", "many/s0", "zz"]:
            for delimiter in ["", "/", ".", "y", "/w/"]:
                for max_keys in [1, 2, 5, 1000]:
                    for after in ["", "a/x", "a/y/", "b.", "many/f020", "many/s05/g"]:
                        asked = (prefix, delimiter, max_keys, after)
                        got = _all_pages(outlined, prefix, delimiter, max_keys, after)
                        assert got == _all_pages(whole, prefix, delimiter, max_keys, after), asked
        for key in whole.keys:
            assert outlined.entry(key) == whole.entry(key)
        for absent in ["a", "a/y", "a//x", "/a.b", "a/x/", "e/only-empty", "nope/x", ""]:
            assert outlined.entry(absent) is None, absent
    finally:
        outlined.close()


def test_a_large_collection_is_listed_within_the_page_and_its_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 120 directories of 1,000 files (2 MB of text): parsed whole, some
    # 50 MB (400 bytes a file); from the outline, its directories and the
    # files of a few of them.
    monkeypatch.setattr(s3outline, "FILES_HELD", 3000)
    dirs, per_dir = 120, 1000

    def lines() -> list[bytes]:
        out = []
        for d in range(dirs):
            segments = " ".join(f"{d * per_dir + f}:1:f{f:04}" for f in range(per_dir))
            out.append(f"./d{d:03} {_BLOCK} {segments}\n".encode())
        return out

    text = _stored(tmp_path, lines())
    tracemalloc.start()
    try:
        outlined = OutlinedContents("pdh", text)
        first = list_page(outlined, "", "", start_key(None, ""), 1000)
        middle = list_page(outlined, "", "", start_key(None, "d050/f0499"), 1000)
        tops = list_page(outlined, "", "/", start_key(None, ""), 1000)
        inner = list_page(outlined, "d119/", "/", start_key(None, ""), 1000)
        entry = outlined.entry("d023/f0456")
        # Every page of every key, as `aws s3 ls --recursive` asks them.
        paged, least = 0, ""
        while True:
            page = list_page(outlined, "", "", least, 1000)
            paged += len(page.keys)
            if not page.truncated:
                break
            least = start_key(page.next_token, "")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    try:
        assert first.keys == [f"d000/f{f:04}" for f in range(per_dir)] and first.truncated
        assert middle.keys[0] == "d050/f0500" and middle.keys[-1] == "d051/f0499"
        assert tops.prefixes == [f"d{d:03}/" for d in range(dirs)] and not tops.truncated
        assert inner.keys == [f"d119/f{f:04}" for f in range(per_dir)] and not inner.truncated
        assert entry is not None and entry.size == 1 and entry.pieces[0].offset == 23456
        assert paged == dirs * per_dir
        assert outlined._held <= 3000 + per_dir
        # The bound: a few megabytes (the outline, the directories held, the
        # pages), where the collection's files parsed would be some 50 MB.
        assert peak < 12 << 20, peak
    finally:
        outlined.close()


def test_the_gateway_lists_and_reads_a_large_collection_from_its_outline(
    tmp_path: Path, keep_servers: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every collection counts as large here: through boto3, the same keys,
    # sizes and bytes as `wh`; a write into it still parses it whole.
    monkeypatch.setattr(s3objects, "OUTLINED_FROM", 0)
    data = tmp_path / "data"
    files = {p: f"{p}\n".encode() * (1 + len(p)) for p in _PATHS}
    for path, body in files.items():
        (data / path).parent.mkdir(parents=True, exist_ok=True)
        (data / path).write_bytes(body)
    with gateway(tmp_path / "c.db", keep_servers) as gw:
        alice = gw.user("alice")
        gw.wh(alice, "put", str(data), "--name", "big")
        s3 = gw.boto3(*gw.credential(alice))
        keys: list[str] = []
        sizes: dict[str, int] = {}
        token: dict[str, str] = {}
        while True:
            page = s3.list_objects_v2(Bucket="big", MaxKeys=7, **token)
            keys += [o["Key"] for o in page.get("Contents", [])]
            sizes.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
            if not page["IsTruncated"]:
                break
            token = {"ContinuationToken": page["NextContinuationToken"]}
        assert keys == sorted(files) and sizes == {p: len(b) for p, b in files.items()}
        top = s3.list_objects_v2(Bucket="big", Delimiter="/")
        assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["a-b/", "a/", "b/", "c/", "many/"]
        assert [o["Key"] for o in top["Contents"]] == ["a.b", "a0", "b.txt", "top"]
        for key in ["a/y/w/v", "many/s03/g", "b/c d"]:
            assert s3.get_object(Bucket="big", Key=key)["Body"].read() == files[key]
        head = s3.head_object(Bucket="big", Key="a/x")
        listed = next(o for o in s3.list_objects_v2(Bucket="big", Prefix="a/x")["Contents"])
        assert head["ETag"] == listed["ETag"] and head["ContentLength"] == len(files["a/x"])
        # A large collection's ETags read no listing: not alice's MD5 (shared block).
        assert head["ETag"].endswith('-1"')
        with pytest.raises(ClientError) as e:
            s3.head_object(Bucket="big", Key="a/y")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        s3.put_object(Bucket="big", Key="a/new.txt", Body=b"new\n")
        assert s3.get_object(Bucket="big", Key="a/new.txt")["Body"].read() == b"new\n"
        assert len(gw.wh(alice, "ls", "big").output.splitlines()) == len(files) + 1


def test_a_page_after_a_token_reads_a_few_pages_of_a_flat_directory() -> None:
    # A flat directory past PAGED_FROM: its index is made in one pass, then
    # a page of 1,000 keys after a continuation token reads the page its
    # bisect lands in and the pages it lists (some 1,000 files' text, 16
    # bytes each), not the directory.
    files = 3 * s3outline.PAGED_FROM
    segments = " ".join(f"{i}:1:f{i:06}" for i in range(files))
    text = f". {_BLOCK} {segments}\n".encode()
    outlined = OutlinedContents("pdh", text)
    read = outlined.collection.read
    bytes_read: list[int] = []

    def counted(start: int, end: int) -> bytes:
        bytes_read.append(end - start)
        return read(start, end)

    outlined.collection.read = counted  # type: ignore[method-assign]
    first = list_page(outlined, "", "", start_key(None, ""), 1000)
    assert isinstance(outlined.files(""), PagedFiles)
    assert first.keys[-1] == "f000999" and sum(bytes_read) >= len(text) - 100
    bytes_read.clear()
    token = encode_token("k", f"f{files // 2:06}")
    page = list_page(outlined, "", "", start_key(token, ""), 1000)
    assert page.keys == [f"f{i:06}" for i in range(files // 2 + 1, files // 2 + 1001)]
    assert sum(bytes_read) < (1000 + 2 * pages.PAGE) * 16, sum(bytes_read)
    entry = outlined.entry(f"f{files - 1:06}")
    assert entry is not None and entry.pieces[0].offset == files - 1
