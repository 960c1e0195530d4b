"""Manifests: literal examples, escaping, files, directories, PDH, normal form."""

from __future__ import annotations

import hashlib
import pickle

import pytest

import warehouse.manifest as manifest_pkg
from warehouse.blocks import EMPTY_LOCATOR, Locator
from warehouse.errors import UsageError
from warehouse.manifest import (
    FileEntry,
    FilePiece,
    Manifest,
    ManifestError,
    Segment,
    Stream,
    escape_name,
    md5sum_line,
    normalize,
    unescape_name,
)

EMPTY = "d41d8cd98f00b204e9800998ecf8427e+0"
HELLO = Locator.for_data(b"hello world" + b"x" * 22)  # 33 bytes
A = Locator.for_data(b"aaaa")
B = Locator.for_data(b"bbbbbb")

EXAMPLE = (
    f". {HELLO} 0:0:empty 0:11:hello.txt 11:22:name\\040with\\040space\n./docs {EMPTY} 0:0:\\056\n"
)


def piece(loc: Locator, offset: int, length: int) -> FilePiece:
    return FilePiece(loc, offset, length)


# --- escaping -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "escaped"),
    [
        ("plain.txt", "plain.txt"),
        ("with space", "with\\040space"),
        ("a:b", "a\\072b"),
        ("back\\slash", "back\\134slash"),
        ("tab\there", "tab\\011here"),
        ("new\nline", "new\\012line"),
        ("cr\r", "cr\\015"),
        ("\x01\x1f", "\\001\\037"),
        ("café", "café"),
        ("日本", "日本"),
        ("dir/sub", "dir/sub"),
        ("", ""),
    ],
)
def test_escape_round_trip(name: str, escaped: str) -> None:
    assert escape_name(name) == escaped
    assert unescape_name(escaped) == name


def test_unescape_accepts_escaped_utf8_bytes() -> None:
    # Another writer may escape the UTF-8 bytes of "é" one by one.
    assert unescape_name("caf\\303\\251") == "café"
    assert unescape_name("\\346\\227\\245\\346\\234\\254") == "日本"
    assert unescape_name("\\141") == "a"


@pytest.mark.parametrize("bad", ["\\", "\\0", "\\09", "\\400", "a\\9999", "\\\\", "\\377"])
def test_unescape_refuses(bad: str) -> None:
    with pytest.raises(ValueError):
        unescape_name(bad)


# --- parsing and formatting -----------------------------------------------


def test_example_round_trip() -> None:
    m = Manifest.parse(EXAMPLE)
    assert m.format() == EXAMPLE
    assert m.streams[0] == Stream(
        ".",
        (HELLO,),
        (Segment(0, 0, "empty"), Segment(0, 11, "hello.txt"), Segment(11, 22, "name with space")),
    )
    assert m.streams[1].segments[0].is_directory_marker
    assert m.normalized() == m
    assert m.size == 33
    assert m.streams[0].size == 33


def test_parse_bytes_equals_parse_text() -> None:
    assert Manifest.parse(EXAMPLE.encode()) == Manifest.parse(EXAMPLE)


def test_empty_manifest() -> None:
    m = Manifest.parse("")
    assert m.streams == ()
    assert m.format() == ""
    assert m.portable_text() == ""
    assert m.pdh == EMPTY
    assert m.files() == {}
    assert m.directories() == []
    assert m.blocks() == []
    assert m.size == 0
    assert m.normalized() == m
    assert Manifest.from_files([]) == m
    assert Manifest.parse(b"") == m


def test_non_ascii_names_round_trip() -> None:
    text = f"./日本 {A} 0:4:café\\040au\\040lait 0:0:\\134x\\072y\n"
    m = Manifest.parse(text)
    assert m.format() == text
    assert set(m.files()) == {"日本/café au lait", "日本/\\x:y"}


def test_format_writes_escaped_non_ascii_as_utf8() -> None:
    m = Manifest.parse(f". {A} 0:4:caf\\303\\251\n")
    assert m.format() == f". {A} 0:4:café\n"


def test_raw_colon_in_file_name_is_accepted_and_escaped() -> None:
    m = Manifest.parse(f". {A} 0:4:a:b\n")
    assert list(m.files()) == ["a:b"]
    assert m.format() == f". {A} 0:4:a\\072b\n"


# --- PDH ------------------------------------------------------------------


def test_pdh_of_known_manifest() -> None:
    text = f". {A}+K06@cluster {B} 0:4:a.txt 4:6:b.txt\n"
    portable = f". {A.key} {B.key} 0:4:a.txt 4:6:b.txt\n".encode()
    expected = hashlib.md5(portable).hexdigest() + "+" + str(len(portable))
    m = Manifest.parse(text)
    assert m.portable_text() == portable.decode()
    assert m.pdh == expected
    assert m.format() == text


def test_pdh_counts_utf8_bytes() -> None:
    m = Manifest.parse(f". {A} 0:4:日本\n")
    data = m.portable_text().encode()
    assert m.pdh == f"{hashlib.md5(data).hexdigest()}+{len(data)}"
    assert len(data) > len(m.portable_text())


def test_pdh_ignores_hints() -> None:
    plain = Manifest.parse(f". {A} 0:4:a\n")
    signed = Manifest.parse(f". {A}+A{'ab' * 32}@65f1a2b3+K1@x 0:4:a\n")
    assert plain != signed
    assert plain.pdh == signed.pdh


# --- files, directories, blocks --------------------------------------------


def test_files_span_block_boundaries() -> None:
    m = Manifest.parse(f"./d {A} {B} 2:6:x 0:2:y 6:4:y\n")
    files = m.files()
    assert list(files) == ["d/x", "d/y"]
    assert files["d/x"] == FileEntry("d/x", 6, (piece(A, 2, 2), piece(B, 0, 4)))
    # Two segments of one file that touch in the same block become one piece.
    assert files["d/y"] == FileEntry("d/y", 6, (piece(A, 0, 2), piece(B, 2, 4)))


def test_files_merge_touching_pieces_and_concatenate_across_streams() -> None:
    text = f". {A} 0:2:f 2:2:f 0:0:f\n. {B} 0:3:f\n"
    files = Manifest.parse(text).files()
    assert files["f"] == FileEntry("f", 7, (piece(A, 0, 4), piece(B, 0, 3)))


def test_files_skip_empty_blocks_inside_a_stream() -> None:
    m = Manifest.parse(f". {A} {EMPTY} {B} 0:10:f\n")
    assert m.files()["f"].pieces == (piece(A, 0, 4), piece(B, 0, 6))


def test_repeated_block_in_stream() -> None:
    m = Manifest.parse(f". {A} {A} 2:4:f\n")
    assert m.files()["f"].pieces == (piece(A, 2, 2), piece(A, 0, 2))
    assert m.blocks() == [A]


def test_files_result_is_a_copy() -> None:
    m = Manifest.parse(EXAMPLE)
    m.files().clear()
    assert len(m.files()) == 3


def test_directories_and_empty_directories() -> None:
    text = (
        f". {A} 0:4:top 0:0:x/y/\\056\n"
        f"./a {EMPTY} 0:0:f 0:0:e/\\056\n"
        f"./a/b {EMPTY} 0:0:\\056\n"
        f"./c {EMPTY} 0:0:\\056\n"
    )
    m = Manifest.parse(text)
    assert m.directories() == ["a", "a/b", "a/e", "c", "x", "x/y"]
    assert m.empty_directories() == ["a/b", "a/e", "c", "x/y"]
    assert list(m.files()) == ["top", "a/f"]


def test_blocks_distinct_in_first_use_order_keeping_first_hints() -> None:
    text = f". {B}+K1@x {A} 0:10:f\n./d {EMPTY} {A}+K2@y {B} 0:10:g\n"
    assert Manifest.parse(text).blocks() == [B.with_hint("K1@x"), A]


# --- normalization --------------------------------------------------------


def test_normalized_example_from_the_docs() -> None:
    text = (
        f"./a\\040b {A} 0:4:z\n"
        f"./a {B} 0:6:b/y 0:3:x\n"
        f". {A} {B} 4:6:top 0:4:top 0:0:docs/\\056 0:0:a/b/\\056\n"
    )
    expected = (
        f". {B} {A} 0:10:top\n"
        f"./a {B} 0:3:x\n"
        f"./a/b {B} 0:6:y\n"
        f"./a\\040b {A} 0:4:z\n"
        f"./docs {EMPTY} 0:0:\\056\n"
    )
    m = Manifest.parse(text)
    n = m.normalized()
    assert n.format() == expected
    assert normalize(m) == n
    assert n.normalized() == n


def test_normalize_lists_each_block_once_per_stream_and_merges() -> None:
    # One file written as four segments over blocks A, B, A: one block list
    # entry each, and consecutive bytes merged even across A|B.
    m = Manifest.parse(f". {A} {B} {A} 0:2:f 2:2:f 4:6:f 10:4:g\n")
    assert m.normalized().format() == f". {A} {B} 0:10:f 0:4:g\n"


def test_normalize_all_empty_files_lists_empty_block() -> None:
    m = Manifest.parse(f"./d {A} 0:0:z 0:0:e\n")
    assert m.normalized().format() == f"./d {EMPTY} 0:0:e 0:0:z\n"


def test_normalize_drops_markers_where_directory_has_content() -> None:
    m = Manifest.parse(f"./d {EMPTY} 0:0:\\056\n./d/e {A} 0:4:f\n. {EMPTY} 0:0:\\056\n")
    assert m.normalized().format() == f"./d/e {A} 0:4:f\n"


def test_normalize_keeps_hints_of_first_use() -> None:
    m = Manifest.parse(f". {A}+K1@x 0:4:b\n. {A}+K2@y 0:4:a\n")
    assert m.normalized().format() == f". {A}+K2@y 0:4:a 0:4:b\n"


def test_from_files_builds_normalized_manifest() -> None:
    files = [
        FileEntry("z/b.txt", 6, (piece(B, 0, 6),)),
        FileEntry("a.txt", 4, (piece(A, 0, 2), piece(A, 2, 2))),
        FileEntry("z/empty", 0, ()),
    ]
    m = Manifest.from_files(files, empty_dirs=["z", "q/r/"])
    assert m.format() == (
        f". {A} 0:4:a.txt\n./q/r {EMPTY} 0:0:\\056\n./z {B} 0:6:b.txt 0:0:empty\n"
    )


@pytest.mark.parametrize(
    "entry",
    [
        FileEntry("../x", 0, ()),
        FileEntry("/abs", 0, ()),
        FileEntry("a//b", 0, ()),
        FileEntry("a/./b", 0, ()),
        FileEntry("a/", 0, ()),
        FileEntry("nul\x00", 0, ()),
        FileEntry("surrogate\udcff", 0, ()),
        FileEntry("x", 5, (piece(A, 0, 4),)),
        FileEntry("x", 4, (piece(A, 1, 4),)),
        FileEntry("x", 0, (piece(A, -1, 1),)),
    ],
)
def test_from_files_refuses(entry: FileEntry) -> None:
    with pytest.raises(UsageError):
        Manifest.from_files([entry])


def test_from_files_refuses_duplicate_paths() -> None:
    with pytest.raises(UsageError, match="twice"):
        Manifest.from_files([FileEntry("x", 0, ()), FileEntry("x", 0, ())])


def test_stream_order_is_depth_first_not_plain_sort() -> None:
    files = [FileEntry(p, 0, ()) for p in ["a b/f", "a/b/f", "a/f", "a.b/f", "f"]]
    names = [s.name for s in Manifest.from_files(files).streams]
    assert names == [".", "./a", "./a/b", "./a b", "./a.b"]
    assert sorted(names) != names


# --- errors, md5sum, API --------------------------------------------------


def test_manifest_error_message_and_pickle() -> None:
    with pytest.raises(ManifestError) as info:
        Manifest.parse(f". {A} 0:4:a\n. {A} 0:9:b\n")
    err = info.value
    assert (err.line, err.token) == (2, "0:9:b")
    assert str(err) == "manifest line 2: segment past the end of its stream: '0:9:b'"
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.line, copy.token, copy.reason, str(copy)) == (
        err.line,
        err.token,
        err.reason,
        str(err),
    )
    assert isinstance(err, UsageError)


def test_manifest_error_shortens_long_tokens() -> None:
    long_name = "n" * 200
    with pytest.raises(ManifestError) as info:
        Manifest.parse(f". {A} 0:9:{long_name}\n")
    assert info.value.token == f"0:9:{long_name}"
    assert "..." in str(info.value)
    assert len(str(info.value)) < 160


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("a/b.txt", "d41d8cd98f00b204e9800998ecf8427e  a/b.txt"),
        ("with space", "d41d8cd98f00b204e9800998ecf8427e  with space"),
        ("back\\slash", "\\d41d8cd98f00b204e9800998ecf8427e  back\\\\slash"),
        ("new\nline", "\\d41d8cd98f00b204e9800998ecf8427e  new\\nline"),
        ("cr\rx", "\\d41d8cd98f00b204e9800998ecf8427e  cr\\rx"),
        ("tab\tx", "d41d8cd98f00b204e9800998ecf8427e  tab\tx"),
    ],
)
def test_md5sum_line(path: str, line: str) -> None:
    assert md5sum_line(EMPTY_LOCATOR.md5, path) == line


def test_public_names() -> None:
    assert set(manifest_pkg.__all__) == {
        "FileEntry",
        "FilePiece",
        "Manifest",
        "ManifestError",
        "Segment",
        "Stream",
        "escape_name",
        "md5sum_line",
        "normalize",
        "unescape_name",
    }
    for name in manifest_pkg.__all__:
        assert getattr(manifest_pkg, name) is not None


def test_large_manifest_round_trips() -> None:
    block = Locator.for_data(b"z" * 1000)
    files = [
        FileEntry(f"d{i % 50}/f{i}", 100, (piece(block, (i * 100) % 1000, 100),))
        for i in range(100_000)
    ]
    m = Manifest.from_files(files)
    text = m.format()
    again = Manifest.parse(text)
    assert len(again.files()) == 100_000
    assert again == m


def test_examples_in_formats_doc_are_true() -> None:
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "formats.md").read_text("utf-8")
    hello = Locator.for_data(b"hello\n")
    todo = Locator.for_data(b"buy milk\n")
    m = Manifest.from_files(
        [
            FileEntry("hello.txt", 6, (piece(hello.with_hint("K1@east"), 0, 6),)),
            FileEntry("notes/todo list.txt", 9, (piece(todo, 0, 9),)),
        ],
        ["empty"],
    )
    for line in m.format().splitlines() + m.portable_text().splitlines():
        assert line in doc
    assert len(m.portable_text().encode()) == 167
    assert f"the PDH\n   is `{m.pdh}`" in doc
    messy = (
        ". e80b5017098950fc58aad83c8c14978e+6 d16fb36f0911f878998c136191af705e+3"
        " 0:3:docs/a.txt 6:3:readme 3:3:docs/a.txt 0:0:docs/\\056 0:0:tmp/\\056\n"
        "./docs e80b5017098950fc58aad83c8c14978e+6 0:2:b.txt 2:1:b.txt\n"
    )
    assert messy in doc
    assert Manifest.parse(messy).normalized().format() in doc
