"""The page of a collection of 200,000 files, served in bounded memory.

A manifest of 201,050 files in 4,042 streams is stored with `wh put
--manifest`; `wh web` runs under an address-space limit (RLIMIT_AS, set
before it starts) and serves the collection's root, a directory of 100
subdirectories, a directory's files, a later page of a long directory, a
download and the manifest; each page is checked for its entries and
counts. Its peak resident size is checked when it has stopped.

A small collection of awkward names, nested and empty directories and files
over several blocks checks the outline's listing against the parsed manifest.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import signal
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memory_helpers import WH, limited
from test_web import sign_in
from warehouse.manifest import Manifest
from warehouse.web.tree import Entry, Outline, listing

TOPS = 40  # a00 … a39
SUBS = 100  # each with s000 … s099
PER_STREAM = 50  # files of 10 bytes each
ROOT_FILES = 50
BIG_FILES = 1_000  # ./big: five pages of 200
FILES = ROOT_FILES + TOPS * SUBS * PER_STREAM + BIG_FILES
STREAMS = 1 + TOPS * SUBS + 1

# Address space `wh web` may map, and its resident peak. Before the pages
# read an outline of the directories (building a table of every file), this
# server peaked at 208 MB resident here; after, at 88 MB.
LIMIT_AS = 480 << 20
MAX_RSS = 140 << 20


def _block(tag: int, files: int) -> bytes:
    return (b"%09d\n" % tag) * files  # files of 10 bytes, the stream's number


def _line(stream: str, loc: str, names: list[str]) -> str:
    return f"{stream} {loc} " + " ".join(f"{10 * j}:10:{n}" for j, n in enumerate(names)) + "\n"


def _store(home: Path) -> bytes:
    """Store every stream's block; the normalized manifest text naming them."""
    from warehouse.embedded import EmbeddedWarehouse

    lines = []
    with EmbeddedWarehouse(home) as wh:

        def put(tag: int, files: int) -> str:
            return str(wh.store.put(_block(tag, files)).locator)

        lines.append(_line(".", put(0, ROOT_FILES), [f"r{j:02d}" for j in range(ROOT_FILES)]))
        for t in range(TOPS):
            for s in range(SUBS):
                tag = 1 + t * SUBS + s
                names = [f"f{j:02d}" for j in range(PER_STREAM)]
                lines.append(_line(f"./a{t:02d}/s{s:03d}", put(tag, PER_STREAM), names))
        tag = 1 + TOPS * SUBS
        names = [f"g{j:04d}" for j in range(BIG_FILES)]
        lines.append(_line("./big", put(tag, BIG_FILES), names))
        wh.store.flush()
    return "".join(lines).encode()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_page_of_200k_files_is_served_in_bounded_memory(ram_dir: Path) -> None:
    _serve(ram_dir)


def _serve(tmp: Path) -> None:
    home = tmp / "wh"
    text = _store(home)
    assert text.count(b"\n") == STREAMS
    (tmp / "m.txt").write_bytes(text)
    env = {**os.environ, "WH_HOME": str(home), "MALLOC_ARENA_MAX": "2"}
    env.pop("WH_URL", None)
    put = subprocess.run(
        [WH, "put", "--manifest", str(tmp / "m.txt")], env=env, capture_output=True, check=True
    )
    pdh = put.stdout.decode().strip()
    assert pdh == f"{hashlib.md5(text).hexdigest()}+{len(text)}"

    peak = tmp / "peak"
    launch = limited(LIMIT_AS, peak, "web")
    proc = subprocess.Popen(launch, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        token = proc.stdout.readline().split()[-1]
        client = sign_in(url.removesuffix("/web/"), token)
        try:
            _check_pages(client, pdh, text)
        finally:
            client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        if proc.stdout:
            proc.stdout.close()
    assert code == 0
    rss = int(peak.read_text())
    assert rss < MAX_RSS, f"wh web peaked at {rss >> 20} MB"


def _rows(page: str) -> list[tuple[str, str, str]]:
    """(name, size, files) of each row of a page's listing."""
    rows = re.findall(
        r'<tr class="(?:dir|file)">\s*<td><a [^>]*>([^<]*)</a></td>\s*'
        r'<td class="num"[^>]*>([^<]*)</td><td(?: class="num")?>([^<]*)</td>',
        page,
    )
    return [(n, s.strip(), f.strip()) for n, s, f in rows]


def _check_pages(client: httpx.Client, pdh: str, text: bytes) -> None:
    base = f"/web/c/{pdh}"
    root = client.get(base)
    assert root.status_code == 200, root.text[-500:]
    assert f"in {FILES} files" in root.text  # the collection's and the root's own
    rows = _rows(root.text)
    # Directories first (a00 … a39, big), then the root's files; all on one page.
    assert [n for n, _, _ in rows[: TOPS + 1]] == [f"a{t:02d}/" for t in range(TOPS)] + ["big/"]
    assert rows[0][2] == str(SUBS * PER_STREAM)
    assert rows[TOPS][2] == str(BIG_FILES)
    assert [n for n, _, _ in rows[TOPS + 1 :]] == [f"r{j:02d}" for j in range(ROOT_FILES)]

    top = client.get(base, params={"path": "a07"}).text
    assert f"in {SUBS * PER_STREAM} files" in top
    rows = _rows(top)
    assert [n for n, _, _ in rows] == [f"s{s:03d}/" for s in range(SUBS)]
    assert {f for _, _, f in rows} == {str(PER_STREAM)}

    sub = client.get(base, params={"path": "a07/s042"}).text
    assert f"in {PER_STREAM} files" in sub
    rows = _rows(sub)
    assert [n for n, _, _ in rows] == [f"f{j:02d}" for j in range(PER_STREAM)]
    assert {s for _, s, _ in rows} == {"10 B"}
    assert f'href="{base}/f/a07/s042/f13"' in sub

    later = client.get(base, params={"path": "big", "page": 4}).text
    assert "page 4 of 5" in later
    assert [n for n, _, _ in _rows(later)] == [f"g{j:04d}" for j in range(600, 800)]

    assert client.get(base, params={"path": "a07/nothing"}).status_code == 404
    got = client.get(f"{base}/f/a07/s042/f13")
    assert got.status_code == 200 and got.content == b"%09d\n" % (1 + 7 * SUBS + 42)
    assert client.get(f"{base}/f/a07/s042/nothing").status_code == 404
    assert client.get(f"{base}/manifest").content == text
    _check_whole_archive(client, base)


class _Body(io.RawIOBase):
    """A streamed response body as a file tarfile can read in stream mode."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            self._left = next(self._chunks, b"")
            if not self._left:
                return 0
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n


def _check_whole_archive(client: httpx.Client, base: str) -> None:
    """The tar of the whole collection streams every file (the server makes
    no table of them: it stays under the memory bound)."""
    count, seen = 0, {}
    with client.stream("GET", f"{base}/archive", params={"format": "tar"}) as answer:
        assert answer.status_code == 200
        body = io.BufferedReader(_Body(answer.iter_bytes()), 1 << 16)
        with tarfile.open(fileobj=body, mode="r|") as tar:
            for member in tar:
                count += 1
                if member.name in ("a07/s042/f13", "big/g0600"):
                    seen[member.name] = tar.extractfile(member).read()  # type: ignore[union-attr]
    assert count == FILES
    assert seen["a07/s042/f13"] == b"%09d\n" % (1 + 7 * SUBS + 42)
    assert len(seen["big/g0600"]) == 10


_AWKWARD = """\
. {a} {b} 0:3:z 3:2:a\\040b 5:1:c 1000:4:split 0:2:split 1000:0:e
./d\\303\\251j\\303\\240 {b} 0:5:x
./deep/er/est {a} 0:0:leaf
./deep/er {b} 0:1:y
./hollow/inside {e} 0:0:\\056
./hollow {a} 2:2:w
"""


def _expected(manifest: Manifest, path: str) -> list[Entry]:
    """A directory's entries computed from every file: what the pages showed before."""
    files = manifest.files()
    prefix = path + "/" if path else ""
    dirs: dict[str, list[int]] = {}
    for d in manifest.directories():
        if d.startswith(prefix) and "/" not in d[len(prefix) :]:
            dirs[d] = [0, 0]
    for p, e in files.items():
        for d, sums in dirs.items():
            if p.startswith(d + "/"):
                sums[0] += e.size
                sums[1] += 1
    out = [Entry(d[len(prefix) :], d, True, s, n) for d, (s, n) in dirs.items()]
    out.sort(key=lambda e: e.name)
    own = [
        Entry(p[len(prefix) :], p, False, e.size, 1)
        for p, e in files.items()
        if p.startswith(prefix) and "/" not in p[len(prefix) :]
    ]
    return out + sorted(own, key=lambda e: e.name)


def test_the_outline_lists_what_the_manifest_holds() -> None:
    a = f"{hashlib.md5(bytes(1024)).hexdigest()}+1024"
    b = f"{hashlib.md5(bytes(6)).hexdigest()}+6"
    e = "d41d8cd98f00b204e9800998ecf8427e+0"
    manifest = Manifest.parse(_AWKWARD.format(a=a, b=b, e=e)).normalized()
    text = manifest.portable_text().encode()
    outline = Outline(text)
    for path in ["", *manifest.directories()]:
        span = outline.stream_span(path)
        stream = None if span is None else text[span[0] : span[1]]
        assert list(listing(outline, path, stream)) == _expected(manifest, path), path
        under = [f for p, f in manifest.files().items() if p.startswith(path + "/") or not path]
        assert outline.count(path) == len(under)
        assert outline.size(path) == sum(f.size for f in under)
    assert not outline.is_dir("nothing") and not outline.is_dir("z")
    assert listing(outline, "deep", None)[0] == Entry("er", "deep/er", True, 1, 2)


def test_a_manifest_stored_another_way_is_normalized_for_its_pages(tmp_path: Path) -> None:
    """Text not stored normalized (here with a hint, its streams out of order)
    is parsed whole and normalized: the same pages, and the manifest as stored."""
    from warehouse import catalog
    from warehouse.embedded import EmbeddedWarehouse
    from warehouse.web.site import Site

    with EmbeddedWarehouse(tmp_path / "wh") as wh:
        one = wh.store.put(b"abcdef").locator
        two = wh.store.put(b"0123456789").locator
        wh.store.flush()
        text = f"./sub {two}+Xhint 0:4:q 4:6:p\n. {one} 0:3:b 3:3:a\n".encode()
        manifest = Manifest.parse(text)
        stored = wh.store.put(text).locator
        wh.store.flush()
        pdh = manifest.pdh
        catalog.add_collection(wh.engine, pdh, str(stored), 16, 4, wh.user)
        site = Site.for_embedded(wh)
        assert site.outlined(pdh).normalized_here
        outline, root = site.listing(pdh, "")
        assert list(root) == [
            Entry("sub", "sub", True, 10, 2),
            Entry("a", "a", False, 3, 1),
            Entry("b", "b", False, 3, 1),
        ]
        assert [e.name for e in site.listing(pdh, "sub")[1]] == ["p", "q"]
        assert outline.count("") == 4 and outline.size("") == 16
        assert site.file_reader(pdh, "sub/q").read_file("sub/q") == b"0123"
        assert site.folder_reader(pdh, "sub").read_file("sub/p") == b"456789"
        assert site.manifest_text(pdh) == manifest.format().encode()


def test_outlines_are_kept_within_their_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last used outlines are kept within the byte budget; a text too big
    to keep with its outline is read again from its blocks for each page."""
    from warehouse.embedded import EmbeddedWarehouse
    from warehouse.web import site as site_module

    with EmbeddedWarehouse(tmp_path / "wh") as wh:
        pdhs = []
        for i in range(3):
            loc = wh.store.put(b"%09d\n" % i * 20).locator
            wh.store.flush()
            names = [f"f{j:02d}" for j in range(20)]
            text = _line(".", str(loc), [*names[1:], "top"]) + _line(f"./d{i}", str(loc), names)
            pdhs.append(wh.put_manifest(Manifest.parse(text)).pdh)
        site = site_module.Site.for_embedded(wh)
        costs = [site.outlined(pdh).cost for pdh in pdhs]
        assert len(set(costs)) == 1
        site = site_module.Site.for_embedded(wh)
        monkeypatch.setattr(site_module, "OUTLINE_BUDGET", 2 * costs[0])
        for pdh in pdhs:
            site.outlined(pdh)
        site.outlined(pdhs[1])  # used again: the first is the least recently used
        site.outlined(pdhs[0])
        assert list(site._outlined) == [pdhs[1], pdhs[0]]
        assert site._outlined_bytes == 2 * costs[0]

        # A budget too small for the text: the outline is kept without it.
        site = site_module.Site.for_embedded(wh)
        monkeypatch.setattr(site_module, "OUTLINE_BUDGET", costs[0] - 1)
        outlined = site.outlined(pdhs[2])
        assert outlined.text is None and list(site._outlined) == [pdhs[2]]
        outline, entries = site.listing(pdhs[2], "d2")
        assert [e.name for e in entries] == [f"f{j:02d}" for j in range(20)]
        assert outline.count("") == 40 and outline.size("") == 400
        assert site.file_reader(pdhs[2], "d2/f03").read_file("d2/f03") == b"%09d\n" % 2
        assert site.manifest_text(pdhs[2]) == wh.manifest_text(pdhs[2])


def test_requests_at_once_for_a_new_collection_make_one_outline(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from warehouse.embedded import EmbeddedWarehouse
    from warehouse.web.site import Site

    with EmbeddedWarehouse(tmp_path / "wh") as wh:
        loc = wh.store.put(b"x" * 10_000).locator
        wh.store.flush()
        lines = [_line(f"./d{i:04d}", str(loc), [f"f{j}" for j in range(10)]) for i in range(2000)]
        pdh = wh.put_manifest(Manifest.parse("".join(lines))).pdh
        site = Site.for_embedded(wh)
        with ThreadPoolExecutor(4) as pool:
            made = list(pool.map(site.outlined, [pdh] * 8))
        assert all(m is made[0] for m in made)
        assert made[0].outline.count("") == 20_000
