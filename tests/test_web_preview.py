"""File previews and folders downloaded as zip or tar, over HTTP against a real server."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from test_web import sign_in
from warehouse.cli.web import sign_in_token
from warehouse.embedded import EmbeddedWarehouse
from warehouse.manifest.entries import FileEntry
from warehouse.server.serving import ServerThread
from warehouse.web import create_web_app
from warehouse.web.archive import PIECE, stream_tar, stream_zip
from warehouse.web.preview import PREVIEW_BYTES

# A 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f80f0000010101005f1a1c2d0000000049454e44ae426082"
)
EVIL = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, str, Path]]:
    root = tmp_path_factory.mktemp("preview")
    tree = root / "tree"
    (tree / "docs" / "deep").mkdir(parents=True)
    (tree / "docs" / "notes.txt").write_text(f"hello {EVIL}\n")
    (tree / "docs" / "deep" / "big.log").write_bytes(b"line\n" * 30_000)  # 150 kB
    (tree / "docs" / "deep" / "empty").write_bytes(b"")
    (tree / "docs" / "pic.png").write_bytes(PNG)
    (tree / "docs" / "void" / "hollow").mkdir(parents=True)  # empty directories
    (tree / "docs" / "new\nline.txt").write_text("two\nlines\n")
    (tree / "blob.bin").write_bytes(b"\0" + os.urandom(200_000))
    with EmbeddedWarehouse(root / "home", user="alice") as wh:
        pdh = wh.put([tree]).pdh
        with ServerThread(create_web_app(wh)) as server:
            client = sign_in(server.url, sign_in_token(wh))
            try:
                yield client, pdh, tree
            finally:
                client.close()


def test_text_preview_is_escaped_and_cut_at_64_kib(site: tuple[httpx.Client, str, Path]) -> None:
    client, pdh, _ = site
    page = client.get(f"/web/c/{pdh}/preview/docs/notes.txt").text
    assert "hello &lt;script&gt;alert(1)&lt;/script&gt;" in page and EVIL not in page
    page = client.get(f"/web/c/{pdh}/preview/docs/deep/big.log").text
    assert "The first 64.0 KiB of" in page
    assert page.count("line\n") == PREVIEW_BYTES // 5  # whole lines in the first 64 KiB
    assert "no preview" in client.get(f"/web/c/{pdh}/preview/blob.bin").text
    assert client.get(f"/web/c/{pdh}/preview/nothing").status_code == 404


def test_image_preview_uses_the_download_with_a_fixed_image_type(
    site: tuple[httpx.Client, str, Path],
) -> None:
    client, pdh, _ = site
    page = client.get(f"/web/c/{pdh}/preview/docs/pic.png").text
    assert f'src="/web/c/{pdh}/f/docs/pic.png?inline=1"' in page
    shown = client.get(f"/web/c/{pdh}/f/docs/pic.png?inline=1")
    assert shown.headers["content-type"] == "image/png"
    assert shown.headers["content-disposition"] == "inline"
    assert shown.headers["x-content-type-options"] == "nosniff"
    assert shown.content == PNG
    # Anything not an image stays an attachment of no type, inline or not.
    other = client.get(f"/web/c/{pdh}/f/docs/notes.txt?inline=1")
    assert other.headers["content-type"] == "application/octet-stream"
    assert other.headers["content-disposition"].startswith("attachment")


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_a_folder_downloads_as_zip_and_as_tar(site: tuple[httpx.Client, str, Path]) -> None:
    client, pdh, tree = site
    want = {f"docs/{k}": v for k, v in _files(tree / "docs").items()}
    answer = client.get(f"/web/c/{pdh}/archive", params={"path": "docs", "format": "zip"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/zip"
    assert 'filename="docs.zip"' in answer.headers["content-disposition"]
    with zipfile.ZipFile(io.BytesIO(answer.content)) as z:
        assert z.testzip() is None
        # Files here; empty directories in test_archives_keep_empty_directories.
        assert {n: z.read(n) for n in z.namelist() if not n.endswith("/")} == want
    answer = client.get(f"/web/c/{pdh}/archive", params={"path": "docs", "format": "tar"})
    with tarfile.open(fileobj=io.BytesIO(answer.content)) as t:
        got = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert got == want
    whole = client.get(f"/web/c/{pdh}/archive", params={"format": "tar"})
    with tarfile.open(fileobj=io.BytesIO(whole.content)) as t:
        assert len(t.getmembers()) == len(_files(tree)) + 1  # the empty directory


def _unpacked(into: Path) -> dict[str, bytes | None]:
    """Every path under ``into``: a file's bytes, None for a directory."""
    return {
        str(p.relative_to(into)): p.read_bytes() if p.is_file() else None
        for p in sorted(into.rglob("*"))
    }


def test_archives_keep_empty_directories(
    site: tuple[httpx.Client, str, Path], tmp_path: Path
) -> None:
    """An archive unpacks to the tree that was stored, empty directories too."""
    client, pdh, tree = site
    want = {f"docs/{k}": v for k, v in _unpacked(tree / "docs").items()} | {"docs": None}
    for fmt in ("zip", "tar"):
        answer = client.get(f"/web/c/{pdh}/archive", params={"path": "docs", "format": fmt})
        assert answer.status_code == 200
        into = tmp_path / fmt
        into.mkdir()
        if fmt == "zip":
            with zipfile.ZipFile(io.BytesIO(answer.content)) as z:
                assert z.testzip() is None
                z.extractall(into)
        else:
            with tarfile.open(fileobj=io.BytesIO(answer.content)) as t:
                t.extractall(into, filter="data")
        assert _unpacked(into) == want, fmt
    # A folder that is itself empty downloads as that one directory.
    answer = client.get(
        f"/web/c/{pdh}/archive", params={"path": "docs/void/hollow", "format": "tar"}
    )
    assert answer.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(answer.content)) as t:
        assert [(m.name, m.isdir()) for m in t.getmembers()] == [("hollow", True)]


def test_bad_archive_requests_are_refused(site: tuple[httpx.Client, str, Path]) -> None:
    client, pdh, _ = site
    assert client.get(f"/web/c/{pdh}/archive", params={"format": "rar"}).status_code == 400
    assert client.get(f"/web/c/{pdh}/archive", params={"path": "nowhere"}).status_code == 404


@pytest.mark.parametrize("stream", [stream_zip, stream_tar])
def test_archives_stream_before_the_input_ends(stream: object) -> None:
    """Bounded memory: output comes out while a large file is still being read."""
    read = 0
    chunk = os.urandom(1 << 16)

    def chunks(entry: FileEntry) -> Iterator[bytes]:
        nonlocal read
        for _ in range(256):  # 16 MiB
            read += len(chunk)
            yield chunk

    big = FileEntry("big", 256 * len(chunk), ())
    out = iter(stream([("big", big)], chunks))  # type: ignore[operator]
    first = b""
    while len(first) < (1 << 20):
        first += next(out)
    assert read < 4 << 20  # 1 MiB out after at most 4 MiB in, not all 16


@pytest.mark.parametrize("stream", [stream_zip, stream_tar])
def test_archives_of_many_small_files_come_in_few_pieces(stream: object) -> None:
    """Each piece of a body is a hop to a server thread and an HTTP chunk:
    5,000 files of 10 bytes come in pieces of about 64 KiB, not three or more
    a file; a tar passes a block-sized piece on as it is, not copied."""
    big = os.urandom(PIECE)
    names = [f"d/f{i:04d}" for i in range(5000)] + ["big", "last"]
    entries = [(n, FileEntry(n, len(big) if n == "big" else 10, ())) for n in names]

    def chunks(entry: FileEntry) -> Iterator[bytes]:
        yield big if entry.path == "big" else entry.path.encode().rjust(10)

    pieces = list(stream(entries, chunks))  # type: ignore[operator]
    whole = b"".join(pieces)
    assert len(pieces) <= len(whole) // PIECE + 3
    assert sum(len(p) < PIECE for p in pieces) <= 3  # before the big one, the end
    if stream is stream_tar:
        assert any(p is big for p in pieces)
        with tarfile.open(fileobj=io.BytesIO(whole)) as t:
            got = {n: t.extractfile(n).read() for n in ("d/f0042", "big", "last")}  # type: ignore[union-attr]
    else:
        with zipfile.ZipFile(io.BytesIO(whole)) as z:
            got = {n: z.read(n) for n in ("d/f0042", "big", "last")}
    assert got == {"d/f0042": b"   d/f0042", "big": big, "last": b"      last"}


def test_a_name_with_a_line_break_downloads_and_previews(
    site: tuple[httpx.Client, str, Path],
) -> None:
    """The page links such a file; the link must lead to it, not to a 404."""
    client, pdh, _ = site
    page = client.get(f"/web/c/{pdh}", params={"path": "docs"}).text
    link = f"/web/c/{pdh}/f/docs/new%0Aline.txt"
    assert f'href="{link}"' in page
    answer = client.get(link)
    assert answer.status_code == 200 and answer.content == b"two\nlines\n"
    assert "filename*=UTF-8''new%0Aline.txt" in answer.headers["content-disposition"]
    preview = client.get(f"/web/c/{pdh}/preview/docs/new%0Aline.txt")
    assert preview.status_code == 200 and "two\nlines" in preview.text
    assert client.get(f"/web/c/{pdh}/f/docs/new%0Anothing").status_code == 404


def test_a_backslash_in_a_name_cannot_climb_out_of_a_zip() -> None:
    """A zip's only separator is "/"; Windows extractors also split at "\\",
    so a name "..\\..\\evil.bat" would land above the folder. In a zip a
    backslash becomes "_"; a tar (POSIX names) keeps the name as it is."""
    name = "docs/..\\..\\evil.bat"
    entry = FileEntry(name, 3, ())
    entries = [(name, entry), ("docs/a\\b", None)]
    zipped = b"".join(stream_zip(entries, lambda e: [b"bad"]))
    with zipfile.ZipFile(io.BytesIO(zipped)) as z:
        assert z.namelist() == ["docs/.._.._evil.bat", "docs/a_b/"]
        assert z.read("docs/.._.._evil.bat") == b"bad"
    tarred = b"".join(stream_tar(entries, lambda e: [b"bad"]))
    with tarfile.open(fileobj=io.BytesIO(tarred)) as t:
        assert t.getnames() == [name, "docs/a\\b"]
