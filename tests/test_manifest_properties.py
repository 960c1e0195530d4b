"""Property tests: round trips, and normalization never changes file bytes."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warehouse.blocks import Locator
from warehouse.manifest import FileEntry, FilePiece, Manifest, Segment, Stream

# Directory and file names come from separate pools so that no path is both
# a file and a directory. Both pools need escaping and non-ASCII handling.
DIR_NAMES = ["a", "a b", "b", "é", "日本", "x:y", "a.b", "back\\slash"]
FILE_NAMES = ["f", "f.txt", "with space", "tab\there", "new\nline", "café", "日本.txt", "c:d", "-"]

dir_paths = st.lists(st.sampled_from(DIR_NAMES), max_size=3).map("/".join)
file_paths = st.tuples(dir_paths, st.sampled_from(FILE_NAMES)).map(
    lambda t: f"{t[0]}/{t[1]}" if t[0] else t[1]
)
contents = st.binary(max_size=40)
SIGNATURE_HINTS = st.sampled_from(["", "+K1@east", "+K@west", "+A" + "ab" * 32 + "@65f1a2b3"])

Blocks = dict[str, bytes]


def store(blocks: Blocks, data: bytes) -> Locator:
    loc = Locator.for_data(data)
    blocks[loc.md5] = data
    return loc


def read(entry: FileEntry, blocks: Blocks) -> bytes:
    data = b"".join(blocks[p.locator.md5][p.offset : p.offset + p.length] for p in entry.pieces)
    assert len(data) == entry.size
    return data


def read_all(m: Manifest, blocks: Blocks) -> dict[str, bytes]:
    return {path: read(entry, blocks) for path, entry in m.files().items()}


@st.composite
def written_trees(draw: Callable[..., object]) -> tuple[Manifest, Blocks, dict[str, bytes]]:
    """Files packed into small blocks by a writer, as from_files would get them."""
    tree = draw(st.dictionaries(file_paths, contents, max_size=8))
    assert isinstance(tree, dict)
    empty_dirs = draw(st.lists(dir_paths, max_size=3))
    assert isinstance(empty_dirs, list)
    block_size = draw(st.integers(1, 16))
    assert isinstance(block_size, int)
    blocks: Blocks = {}
    entries = []
    for path, data in tree.items():
        pieces = []
        for start in range(0, len(data), block_size):
            chunk = data[start : start + block_size]
            pieces.append(FilePiece(store(blocks, chunk), 0, len(chunk)))
        entries.append(FileEntry(path, len(data), tuple(pieces)))
    return Manifest.from_files(entries, empty_dirs), blocks, tree


@st.composite
def messy_manifests(draw: Callable[..., object]) -> tuple[Manifest, Blocks, dict[str, bytes]]:
    """A non-normalized manifest plus the bytes each file must have.

    Streams draw their blocks from a shared pool (so blocks repeat within and
    across streams); segments point anywhere in a stream, name files with
    "/" in them, and a file may be split across segments and streams. The
    expected bytes are computed straight from the stream data, independently
    of the code under test.
    """
    pool_data = draw(st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=5))
    assert isinstance(pool_data, list)
    blocks: Blocks = {}
    pool = [store(blocks, data) for data in pool_data]
    n_streams = draw(st.integers(1, 4))
    assert isinstance(n_streams, int)
    streams: list[Stream] = []
    expected: dict[str, bytes] = {}
    for _ in range(n_streams):
        picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=5))
        assert isinstance(picks, list)
        hints = [draw(SIGNATURE_HINTS) for _ in picks]
        locators = tuple(Locator.parse(f"{pool[i]}{h}") for i, h in zip(picks, hints, strict=True))
        data = b"".join(blocks[loc.md5] for loc in locators)
        stream_dir = draw(dir_paths)
        assert isinstance(stream_dir, str)
        segments = []
        for _ in range(draw(st.integers(1, 6))):  # type: ignore[call-overload]
            rel = draw(file_paths)
            assert isinstance(rel, str)
            start = draw(st.integers(0, len(data)))
            assert isinstance(start, int)
            length = draw(st.integers(0, len(data) - start))
            assert isinstance(length, int)
            segments.append(Segment(start, length, rel))
            path = f"{stream_dir}/{rel}" if stream_dir else rel
            expected[path] = expected.get(path, b"") + data[start : start + length]
        if draw(st.booleans()):
            segments.append(Segment(0, 0, "sub/."))
        name = f"./{stream_dir}" if stream_dir else "."
        streams.append(Stream(name, locators, tuple(segments)))
    return Manifest(tuple(streams)), blocks, expected


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(written_trees())
def test_normalized_text_round_trips(case: tuple[Manifest, Blocks, dict[str, bytes]]) -> None:
    m, blocks, tree = case
    text = m.format()
    parsed = Manifest.parse(text)
    assert parsed == m
    assert parsed.format() == text
    assert Manifest.parse(text.encode("utf-8")) == m
    assert m.normalized() == m
    assert read_all(parsed, blocks) == tree


@SETTINGS
@given(messy_manifests())
def test_messy_manifest_text_round_trips(case: tuple[Manifest, Blocks, dict[str, bytes]]) -> None:
    m, _, _ = case
    assert Manifest.parse(m.format()) == m
    # The paths alone, unmade into entries, in the entries' order.
    assert list(Manifest.parse(m.format()).file_paths_in_order()) == list(m.files())


@SETTINGS
@given(messy_manifests())
def test_normalize_preserves_every_file(case: tuple[Manifest, Blocks, dict[str, bytes]]) -> None:
    m, blocks, expected = case
    assert read_all(m, blocks) == expected
    n = m.normalized()
    assert read_all(n, blocks) == expected
    # Depth first: a directory's files, then its subdirectories in name order.
    order = sorted(n.files(), key=lambda p: (p.split("/")[:-1], p.rpartition("/")[2]))
    assert list(n.files()) == order
    # Known normalized (as a put's own manifest is), its paths come without a table.
    bare = Manifest(n.streams)
    bare.__dict__["_normalized"] = bare
    assert list(bare.file_paths_in_order()) == order
    assert "_files" not in bare.__dict__
    assert n.size == m.size == sum(len(v) for v in expected.values())
    assert n.directories() == m.directories()
    assert n.empty_directories() == m.empty_directories()
    assert {loc.key for loc in n.blocks()} <= {loc.key for loc in m.blocks()}


@SETTINGS
@given(messy_manifests())
def test_normalize_is_idempotent(case: tuple[Manifest, Blocks, dict[str, bytes]]) -> None:
    m, _, _ = case
    n = m.normalized()
    assert n.normalized() == n
    assert Manifest.parse(n.format()).normalized() == n


@SETTINGS
@given(messy_manifests())
def test_normalized_streams_follow_the_rules(
    case: tuple[Manifest, Blocks, dict[str, bytes]],
) -> None:
    n = case[0].normalized()
    for stream in n.streams:
        keys = [loc.key for loc in stream.locators]
        assert len(keys) == len(set(keys))
        names = [seg.name for seg in stream.segments]
        assert all("/" not in name for name in names)
        assert names == sorted(names)


@SETTINGS
@given(messy_manifests())
def test_pdh_ignores_hints(case: tuple[Manifest, Blocks, dict[str, bytes]]) -> None:
    m, _, _ = case
    bare = Manifest(
        tuple(
            Stream(s.name, tuple(loc.without_hints() for loc in s.locators), s.segments)
            for s in m.streams
        )
    )
    assert bare.pdh == m.pdh
    assert bare.portable_text() == m.portable_text() == bare.format()
    data = m.portable_text().encode()
    assert m.pdh == f"{hashlib.md5(data).hexdigest()}+{len(data)}"
    assert m.normalized().pdh == bare.normalized().pdh
