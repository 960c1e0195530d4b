"""Normalized manifest text checked and summed up stream by stream.

The streaming check must agree with the whole-manifest normalizer: text it
accepts normalizes to itself (hints aside), and every normalized text is
accepted, so a big put never falls back to the slow path for text a writer
made.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings

from test_manifest_properties import Blocks, messy_manifests, written_trees
from warehouse.blocks import Locator
from warehouse.cli import cli
from warehouse.embedded import EmbeddedWarehouse
from warehouse.manifest import Manifest, ManifestError
from warehouse.manifest.normal import iter_normal_files, normal_summary

A = Locator.for_data(b"0123456789")
B = Locator.for_data(b"abcdefghij")
E = "d41d8cd98f00b204e9800998ecf8427e+0"
# Fewer examples than the property tests of normalizing itself: those
# already cover the normalizer; these only compare with it.
SETTINGS = settings(max_examples=60, deadline=None)
SIG = "+A" + "ab" * 32 + "@65f1a2b3"


def _agrees(m: Manifest) -> None:
    n = m.normalized()
    summary = normal_summary(n.format())
    assert summary is not None, n.format()
    portable = n.portable_text().encode()
    assert summary.portable == portable
    assert summary.pdh == n.pdh
    assert summary.file_count == n.file_count()
    assert summary.size == n.size
    assert [loc.key for loc in summary.blocks] == [loc.key for loc in n.blocks()]
    files = list(iter_normal_files(portable))
    listed = [(p, s) for p, s in files if s is not None]
    assert listed == [(p, e.size) for p, e in n.files().items()]
    assert sorted(p for p, s in files if s is None) == n.empty_directories()


@SETTINGS
@given(written_trees())
def test_every_written_tree_is_taken_as_normalized(
    case: tuple[Manifest, Blocks, dict[str, bytes]],
) -> None:
    _agrees(case[0])


@SETTINGS
@given(messy_manifests())
def test_accepted_text_is_what_normalizing_gives(
    case: tuple[Manifest, Blocks, dict[str, bytes]],
) -> None:
    m = case[0]
    _agrees(m)
    summary = normal_summary(m.format())
    if summary is not None:  # taken as normalized: it must be so
        assert summary.portable == m.normalized().portable_text().encode()
        assert summary.file_count == m.file_count()


@pytest.mark.parametrize(
    "text",
    [
        f"./b {A} 0:1:f\n./a {A} 0:1:f\n",  # streams out of order
        f"./a {A} 0:1:f\n./a {A} 1:1:g\n",  # one directory, two streams
        f"./a {E} 0:0:\\056\n./a/b {A} 0:1:f\n",  # "empty" directory with a subdirectory
        f". {A} 0:1:g 1:1:f\n",  # files out of order
        f". {A} 0:1:f 1:1:f\n",  # adjacent segments not merged
        f". {A} 0:1:f 5:1:g 3:1:f\n",  # one file's segments apart
        f". {A} {B} 10:1:f\n",  # first block unused
        f". {A} {B} 10:1:f 0:1:g\n",  # blocks not in first-use order
        f". {A} {A} 0:1:f\n",  # a block twice
        f". {A} 0:1:a:b\n",  # ':' not escaped
        f". {A} 0:1:\\141\n",  # 'a' escaped
        f"./\\141 {A} 0:1:f\n",  # stream name escaped needlessly
        f". {A} 3:0:f 0:1:g\n",  # empty file not written 0:0
        f". {A} 0:1:d/f\n",  # file in a subdirectory of the stream
        f". {A} 0:1:f 0:0:\\056\n",  # marker in a stream of files
        f". {A} 0:0:f\n",  # a block no file uses
        f"./a {E}{SIG} 0:0:\\056\n",  # marker with a hint on the empty block
    ],
)
def test_text_not_normalized_is_left_to_the_whole_parse(text: str) -> None:
    assert normal_summary(text) is None
    m = Manifest.parse(text)
    assert m.normalized().portable_text() != text


def test_hints_are_stripped_from_what_is_stored() -> None:
    text = f"./a {A}{SIG} 0:10:f\n./b {B}+K@west 0:5:g 5:5:h\n"
    summary = normal_summary(text)
    assert summary is not None
    assert summary.portable == f"./a {A} 0:10:f\n./b {B} 0:5:g 5:5:h\n".encode()
    assert summary.pdh == Manifest.parse(text).pdh
    assert (summary.file_count, summary.size) == (3, 20)


@pytest.mark.parametrize(
    ("text", "line", "token"),
    [
        (f"./a {A} 0:1:f\n./b {A} 0:1:\n", 2, "0:1:"),
        (f"./a {A} 0:1:f\n./b xyz 0:1:g\n", 2, "xyz"),
        (f"./a {A} 0:1:b\n./a/b {A} 0:1:g\n", 1, "0:1:b"),  # b: file and directory
        (f"./a {A} 0:1:f\n./b {A} 0:1:g", 2, "0:1:g"),  # no final newline
    ],
)
def test_errors_name_the_line_and_token(text: str, line: int, token: str) -> None:
    with pytest.raises(ManifestError) as caught:
        normal_summary(text)
    assert (caught.value.line, caught.value.token) == (line, token)
    with pytest.raises(ManifestError) as whole:
        Manifest.parse(text)
    assert str(whole.value) == str(caught.value)


def test_wh_ls_of_a_stored_manifest_lists_what_the_file_table_holds(tmp_path: Path) -> None:
    """`wh ls` lists the stored text stream by stream; `wh ls --json` (and a
    sub-path) go through the whole file table: both must agree, on names that
    need escaping, a file in several segments, nested and empty directories."""
    a = Locator.for_data(b"abcdef")
    env = {"WH_HOME": str(tmp_path / "wh"), "WH_URL": None}
    with EmbeddedWarehouse(tmp_path / "wh") as wh:
        wh.store.put(b"abcdef")
        wh.store.flush()
    text = (
        f". {a} 0:2:b\\040c 2:1:split 4:1:split 0:0:two\\012lines\n"
        f"./d {a} 0:6:x\n"
        f"./d/e {E} 0:0:\\056\n"
        f"./d\\040f {a} 3:3:back\\134slash\n"
    )
    (tmp_path / "m.txt").write_text(text)
    runner = CliRunner()
    put = runner.invoke(cli, ["put", "--manifest", str(tmp_path / "m.txt")], env=env)
    assert put.exit_code == 0, put.output
    pdh = put.output.strip()
    assert normal_summary(text) is not None  # the streamed path is the one taken
    assert pdh == Manifest.parse(text).pdh
    listed = runner.invoke(cli, ["ls", "-l", pdh], env=env)
    assert listed.exit_code == 0, listed.output
    table = runner.invoke(cli, ["ls", "--json", pdh], env=env)
    assert table.exit_code == 0, table.output
    want = [
        (str(f["size"]) if not f["path"].endswith("/") else "-", f["path"])
        for f in json.loads(table.output)
    ]
    got = [tuple(line.split(None, 1)) for line in listed.output.splitlines()]
    assert got == [
        ("2", "b c"),
        ("2", "split"),
        ("0", "\\two\\nlines"),
        ("6", "d/x"),
        ("3", "d f/back\\slash"),
        ("-", "d/e/"),
    ]
    assert [(size, path.replace("\n", "\\n")) for size, path in want] == [
        (size, path.lstrip("\\") if path.startswith("\\two") else path) for size, path in got
    ]
    manifest = runner.invoke(cli, ["manifest", pdh], env=env)
    assert manifest.output == Manifest.parse(text).normalized().portable_text()
