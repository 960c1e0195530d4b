"""A stream of many files is one long manifest line (a flat directory of a
million files: 19 MB). Text kept in a scratch file reads such a line a
piece at a time, its segments in parts (docs/storage.md, "Collections"):
what a get, `wh ls` and `wh manifest` give is byte for byte what the line
read whole gives, and a fault in it is reported as the whole line's is."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Runner
from installations import Installation
from warehouse.collection import storedtext
from warehouse.collection.extract import extract
from warehouse.collection.reader import CollectionReader, stored_text_damage
from warehouse.collection.storedtext import StoredText
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import CorruptDataError, UsageError
from warehouse.manifest import FileEntry
from warehouse.manifest.parse import (
    LONG_LINE_VAR,
    ManifestError,
    iter_raw_parts,
    iter_raw_streams,
)

_BLOCK = "9dd4e461268c8034f5c8564e155c67a6+100000"
_OTHER = "0cc175b9c0f1b6a831c399e269772661+100000"


def _stored(data: bytes, tmp_path: Path) -> StoredText:
    text = StoredText(tmp_path)
    text.write(data)
    return text.done()


def _flat(count: int, *, name: str = ".") -> str:
    """One stream of ``count`` files; every seventh in two segments."""
    tokens: list[str] = []
    pos = 0
    for i in range(count):
        for _ in range(2 if i % 7 == 0 else 1):
            tokens.append(f"{pos}:3:f{i:05d}")
            pos += 3
    return f"{name} {_BLOCK} {_OTHER} " + " ".join(tokens)


def test_line_spans_give_long_lines_by_where_they_lie(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storedtext, "_PIECE", 7)  # lines cut across many pieces
    lines = ["a", "Übergrößé 日本 " * 20, "", "b" * 30, "c" * 31, "日" * 11]
    data = "".join(line + "\n" for line in lines).encode()
    with _stored(data, tmp_path) as text:
        got = list(text.line_spans(30))
        assert [g for g in got if isinstance(g, str)] == ["a", "", "b" * 30]
        spans = [g for g in got if isinstance(g, tuple)]
        assert [b"".join(text.pieces(5, *span)).decode() for span in spans] == [
            lines[1],
            lines[4],
            lines[5],
        ]
        assert [isinstance(g, str) for g in got] == [True, False, True, True, False, False]


@pytest.mark.parametrize("limit", ["1", "100", "5000", "1000000000"])
def test_parts_are_the_whole_lines_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str
) -> None:
    """Joined, the parts are the streams of the lines read whole; no file's
    segments are split between two parts; short lines come whole."""
    monkeypatch.setattr("warehouse.manifest.longlines._SPAN_PIECE", 301)
    monkeypatch.setenv(LONG_LINE_VAR, limit)
    text = "".join(
        line + "\n"
        for line in (
            _flat(3000),
            f"./d {_BLOCK} 0:1:a 1:1:b\\040c",
            _flat(500, name="./d/e\\040f"),
            f"./g {_BLOCK} 0:0:.",
            # One file of segments over many pieces, between two short ones.
            f"./m {_BLOCK} 0:1:a " + " ".join(f"{i}:2:big" for i in range(900)) + " 0:1:z",
        )
    ).encode()
    with _stored(text, tmp_path) as stored:
        whole = [raw for _, raw in iter_raw_streams(stored)]
        parts = list(iter_raw_parts(stored))
    joined: list[tuple[str, tuple[object, ...], list[tuple[int, int, str]]]] = []
    for name, locators, segments in parts:
        if joined and joined[-1][0] == name:
            assert joined[-1][2][-1][2] != segments[0][2]  # a file lies in one part
            joined[-1][2].extend(segments)
        else:
            joined.append((name, locators, list(segments)))
    assert joined == whole
    assert (len(parts) > len(whole)) == (int(limit) < 10**6)


def _fault(text: StoredText, parts: bool) -> str:
    with pytest.raises(ManifestError) as caught:
        for _ in iter_raw_parts(text) if parts else iter_raw_streams(text):
            pass
    return str(caught.value)


def _damaged() -> list[bytes]:
    line = _flat(3000)
    tokens = line.split(" ")
    mid = len(tokens) // 2

    def at(i: int, *new: str) -> str:
        return " ".join([*tokens[:i], *new, *tokens[i:]])

    lines = [
        at(mid, "5:x:y"),  # a bad token in the middle
        at(mid, "0:1:a/b") + " 9:1:f00000/c",  # a file and a directory in one line
        at(2, "garbage+1"),  # a bad locator
        at(mid, _BLOCK),  # a locator after segments
        at(mid, "0:99999999:big"),  # past the end of its stream
        at(mid, "0:1:a\\q"),  # a bad escape
        at(mid, "0:1:../up"),
        at(len(tokens), "0:1:tab\tx"),  # a control character after a bad token
        at(mid, "5:x:y") + " 0:1:\x01",
        at(mid, ""),  # two spaces
        " " + line,
        line + " ",
        f"./x {' '.join([_BLOCK] * 3000)}",  # no segment
        f"./x {' '.join(tokens[3:])}",  # no locator
        "bad " + " ".join(tokens[1:]),
        "./a/../b " + " ".join(tokens[1:]),
    ]
    texts = [(entry + "\n").encode() for entry in lines]
    texts.append(at(mid, "0:1:\xe9").encode("latin-1") + b"\n")  # not UTF-8
    # Not UTF-8 in a line with a bad stream name, after a line with a fault:
    # a whole reading decodes every line before it parses one.
    texts.append(f"./x {_BLOCK} 5:x:y\n./a\\q {' '.join(tokens[1:])} 0:1:\xe9\n".encode("latin-1"))
    texts.append(f"./f00009 {_BLOCK} 0:1:x\n{line}\n".encode())  # a clash across lines
    texts.append(f"{line}\n./f00009 {_BLOCK} 0:1:x\n".encode())
    return texts


@pytest.mark.parametrize("index", range(len(_damaged())))
def test_a_fault_in_a_long_line_is_reported_as_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: int
) -> None:
    monkeypatch.setattr("warehouse.manifest.longlines._SPAN_PIECE", 997)
    monkeypatch.setenv(LONG_LINE_VAR, "1000")
    with _stored(_damaged()[index], tmp_path) as text:
        assert _fault(text, parts=True) == _fault(text, parts=False)


def test_tokens_over_many_pieces_read_as_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token many pieces long (a long stream name, a long escaped file
    name, one huge bad token) is read as the whole line reads it; the
    pieces it spans are joined once, not once a piece."""
    monkeypatch.setattr("warehouse.manifest.longlines._SPAN_PIECE", 7)
    monkeypatch.setenv(LONG_LINE_VAR, "100")
    long_name = "n\\040" * 40 + "e"
    good = f"./{'d' * 90} {_BLOCK} {_OTHER} 0:1:a 1:2:{long_name} 3:4:z\n".encode()
    with _stored(good, tmp_path) as text:
        parts = list(iter_raw_parts(text))
        assert len(parts) > 1
        whole = [raw for _, raw in iter_raw_streams(text)]
    assert [(n, loc) for n, loc, _ in parts] == [whole[0][:2]] * len(parts)
    assert [seg for _, _, segs in parts for seg in segs] == list(whole[0][2])
    for bad in (f". {'a' * 5000} 0:0:x\n", f". {_BLOCK} 0:1:{'x' * 5000}\t 1:1:y\n"):
        with _stored(bad.encode(), tmp_path) as text:
            assert _fault(text, parts=True) == _fault(text, parts=False)


def test_a_get_of_a_damaged_long_line_fails_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a reader, as a get goes: the same damage error either way."""
    errors = []
    with EmbeddedWarehouse(tmp_path / "home", user="alice") as wh:
        for limit in ("1000", "1000000000"):
            monkeypatch.setenv(LONG_LINE_VAR, limit)
            text = _stored(_damaged()[0], tmp_path)
            with (
                CollectionReader(wh.store, None, normal_text=text, pdh="x+1") as reader,
                pytest.raises(CorruptDataError) as caught,
                stored_text_damage("x+1"),
            ):
                extract(reader, None)
            errors.append(str(caught.value))
    assert errors[0] == errors[1]
    assert "manifest line 1: segment length is not a decimal number: '5:x:y'" in errors[0]


def test_a_bad_long_line_setting_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LONG_LINE_VAR, "ten")
    with (
        _stored((_flat(10) + "\n").encode(), tmp_path) as text,
        pytest.raises(UsageError, match=f"{LONG_LINE_VAR}: 'ten' is not a whole number"),
    ):
        list(iter_raw_parts(text))


def _md5sum_line(md5: str, path: str) -> str:
    # As md5sum writes a name with a backslash: escaped, the line marked.
    if "\\" not in path:
        return f"{md5}  {path}"
    return "\\" + md5 + "  " + path.replace("\\", "\\\\")


def test_get_ls_and_manifest_of_a_flat_directory_are_as_whole(
    installation: Installation,
    run: Runner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """3,000 files in one directory (one line of 60 KB): read in parts of
    a few hundred files, every output is what the line read whole gives."""
    monkeypatch.setattr("warehouse.manifest.longlines._SPAN_PIECE", 4001)
    src = tmp_path / "src"
    (src / "flat").mkdir(parents=True)
    for i in range(3000):
        (src / "flat" / f"Übergrößé {i:05d}").write_bytes(b"%d\n" % i * (i % 5))
    (src / "flat" / "\\lead").write_bytes(b"lead")
    (src / "other").mkdir()
    (src / "other" / "one").write_bytes(b"one")
    pdh = run("put", str(src)).stdout.strip()
    want = sorted(
        _md5sum_line(hashlib.md5(p.read_bytes()).hexdigest(), p.relative_to(src).as_posix())
        for p in src.rglob("*")
        if p.is_file()
    )
    runs = []
    for limit in ("1000000000", "1000"):
        monkeypatch.setenv(LONG_LINE_VAR, limit)
        out = tmp_path / f"out{limit}"
        got = {
            "no-write": run("get", "--no-write", pdh).stdout,
            "json": run("get", "--no-write", "--json", pdh).stdout,
            "get": run("get", pdh, str(out)).stdout,
            "sub": run("get", f"{pdh}/flat", str(out / "sub")).stdout,
            "one": run("get", f"{pdh}/flat/Übergrößé 02999", str(out / "one")).stdout,
            # Without the signatures a controller adds, which differ each time.
            "manifest": re.sub(r"\+A[0-9a-f]+@[0-9a-f]+", "", run("manifest", pdh).stdout),
        }
        for key in (pdh, f"{pdh}/flat", f"{pdh}/flat/Übergrößé 01234", f"{pdh}/flat/\\lead"):
            for flags in ((), ("-l",), ("--json",)):
                got[f"ls {key} {flags}"] = run("ls", *flags, key).stdout
        assert sorted(got["get"].splitlines()) == want
        assert len(json.loads(got["json"])) == len(want)
        assert (out / "one").read_bytes() == b"2999\n" * 4
        assert sorted(
            p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()
        ) == sorted(
            [p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()]
            + [f"sub/{p.name}" for p in (src / "flat").iterdir()]
            + ["one"]
        )
        runs.append(got)
    assert runs[0] == runs[1]


def test_a_reader_reads_few_files_ahead_of_a_block_of_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All the files lie in one block: the reader reads no more than its
    bound of pieces ahead of the file it gives (it looked for the next
    blocks through every file of this one), and gives every byte."""
    from warehouse.collection import reader as reader_module

    monkeypatch.setattr(reader_module, "_AHEAD_PIECES", 50)
    src = tmp_path / "src"
    src.mkdir()
    for i in range(1000):
        (src / f"f{i:04d}").write_bytes(b"%d\n" % i)
    with EmbeddedWarehouse(tmp_path / "home", user="alice") as wh:
        pdh = wh.put([src]).pdh
        with wh.reader(pdh) as reader:
            entries = list(reader.files.values())
            taken = 0

            def counted() -> Iterator[FileEntry]:
                nonlocal taken
                for entry in entries:
                    taken += 1
                    yield entry

            data = b""
            for given, (entry, chunk) in enumerate(reader.iter_chunks(counted()), 1):
                assert taken - given <= 50
                data += chunk
                assert entry is entries[given - 1]
    assert data == b"".join(b"%d\n" % i for i in range(1000))


def _normal_cases() -> list[str]:
    segments = " ".join(f"{i * 10}:10:f{i:05d}" for i in range(3000))
    block = "d5e8c9e0d5b95b09fd5c5ed3a3b06cae+30000"
    empty = "d41d8cd98f00b204e9800998ecf8427e+0"
    return [
        f". {block} {segments}\n./d {block} 0:30000:a\\040b\n./e {empty} 0:0:\\056\n",
        f". {block}+K@x {segments}\n",  # a hint: the portable form drops it
        f". {block} {segments} 0:0:a\n",  # not sorted
        f". {block} {segments} {segments}\n",  # every file twice
        ". " + block + " " + segments.replace("f01500", "f01500\\040z") + "\n",
        ". " + block + " " + segments.replace("f01500", "f01500\\172") + "\n",  # not as written
        f"./e {empty} 0:0:\\056 0:0:x\n",
        f". {block} {block} {segments}\n",  # a block named twice
    ]


@pytest.mark.parametrize("index", range(len(_normal_cases())))
def test_the_normal_form_and_pdh_of_a_long_line_are_as_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: int
) -> None:
    """What a get through a controller checks of the text it is sent:
    the same answer whatever the lines read in pieces."""
    from warehouse.manifest.normal import normal_pdh

    monkeypatch.setattr("warehouse.manifest.longlines._SPAN_PIECE", 997)
    data = _normal_cases()[index].encode()
    got = []
    for limit in ("1000000000", "1000", "1"):
        monkeypatch.setenv(LONG_LINE_VAR, limit)
        with _stored(data, tmp_path) as text:
            got.append(normal_pdh(text))
    assert got[0] == got[1] == got[2]
    assert (got[0] is not None) == (index in (0, 1, 4))
