"""The native multi-buffer MD5 gives hashlib's digests, on every path."""

from __future__ import annotations

import hashlib
import mmap
import os
import platform
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disk_helpers import rot
from warehouse.native import md5 as native
from warehouse.native.md5 import md5_many, md5_many_hashlib

# Around the padding's edges (55/56: the length fits in the last block or
# not), a block's, and many blocks.
EDGES = [0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 121, 127, 128, 129, 1000, 150_000, 1 << 20]
WIDTHS = [16, 8, 1]  # AVX-512, AVX2, the plain C code (fewer if the CPU lacks them)


def _want(buffers: list[bytes]) -> list[bytes]:
    return [hashlib.md5(b).digest() for b in buffers]


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.parametrize("width", WIDTHS)
def test_each_length_at_an_edge(width: int) -> None:
    rnd = random.Random(width)
    buffers = [rnd.randbytes(n) for n in EDGES]
    assert md5_many(buffers, width=width) == _want(buffers)
    for n in EDGES:  # each alone, and a lane's worth of one length
        one = [rnd.randbytes(n)]
        assert md5_many(one, width=width) == _want(one)
        many = [rnd.randbytes(n) for _ in range(17)]
        assert md5_many(many, width=width) == _want(many)


@pytest.mark.parametrize("width", WIDTHS)
def test_every_count_of_buffers_up_to_past_two_passes_of_lanes(width: int) -> None:
    rnd = random.Random(7)
    buffers = [rnd.randbytes(rnd.randrange(0, 3000)) for _ in range(40)]
    for n in range(len(buffers) + 1):
        assert md5_many(buffers[:n], width=width) == _want(buffers[:n]), n


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(max_size=700), max_size=40),
    st.sampled_from(WIDTHS),
)
def test_mixed_lengths(buffers: list[bytes], width: int) -> None:
    assert md5_many(buffers, width=width) == _want(buffers)


def test_long_and_short_lanes_mixed() -> None:
    """Lanes end at very different times: each takes the next buffer."""
    rnd = random.Random(3)
    sizes = [rnd.choice([0, 5, 64, 200, 70_000, 300_000]) for _ in range(100)]
    buffers = [rnd.randbytes(n) for n in sizes]
    for width in WIDTHS:
        assert md5_many(buffers, width=width) == _want(buffers)


def test_buffers_of_every_kind(tmp_path: Path) -> None:
    """bytes, bytearray, memoryview slices and a read-only mmap (how a block is read)."""
    path = tmp_path / "block"
    path.write_bytes(os.urandom(200_000))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as pages:
        view = memoryview(pages)
        buffers = [pages, view, view[3:70_001], b"abc", bytearray(b"x" * 99), view[:0]]
        assert md5_many(buffers) == _want([bytes(b) for b in buffers])
        for b in buffers:  # the mapping closes only once no view holds it
            if isinstance(b, memoryview):
                b.release()


def test_a_buffer_not_contiguous_is_refused() -> None:
    data = memoryview(b"0123456789" * 10)[::2]
    if native.lanes():
        with pytest.raises(BufferError):
            md5_many([data] * 5)


def test_the_fallback_gives_the_same() -> None:
    rnd = random.Random(5)
    buffers = [rnd.randbytes(n) for n in EDGES]
    assert md5_many_hashlib(buffers) == md5_many(buffers) == _want(buffers)


def test_without_the_library_hashlib_gives_the_same() -> None:
    """``WH_NATIVE_MD5=0``: the library is left unused; the same digests."""
    code = (
        "import hashlib, random; from warehouse.native import md5;"
        "b = [random.randbytes(n) for n in (0, 56, 64, 100000, 3, 9)];"
        "assert md5.lanes() == 0 and not md5.can_read_fds();"
        "assert md5.md5_many(b) == [hashlib.md5(x).digest() for x in b]; print('ok')"
    )
    env = {**os.environ, "WH_NATIVE_MD5": "0"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


def test_the_library_is_used_when_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a C compiler is, the install built the library, and on a CPU
    with AVX2 it hashes (hashlib is not called)."""
    if shutil.which(os.environ.get("CC", "cc").split()[0]) is None:
        pytest.skip("no C compiler here, so the install built no native MD5 (hashlib is used)")
    assert native.LIBRARY.exists(), f"{native.LIBRARY} was not built: reinstall (make install)"
    if platform.machine() not in ("x86_64", "AMD64") or "avx2" not in _cpu_flags():
        pytest.skip("this CPU has no AVX2: the library hashes no quicker than hashlib")
    assert native.lanes() == (16 if "avx512f" in _cpu_flags() else 8)

    def refused(*args: object) -> None:
        raise AssertionError("hashlib used")

    buffers = [os.urandom(1000) for _ in range(20)]
    want = _want(buffers)
    monkeypatch.setattr(native.hashlib, "md5", refused)
    assert md5_many(buffers) == want


def test_files_mapped_and_hashed_in_one_call(tmp_path: Path) -> None:
    if not native.can_map():
        pytest.skip("the native library is not used here (files are mapped from Python)")
    rnd = random.Random(5)
    datas = [rnd.randbytes(n) for n in (1, 64, 150_000, 1 << 20, 3000)]
    paths = []
    for i, data in enumerate(datas):
        paths.append(str(tmp_path / f"b{i}"))
        Path(paths[-1]).write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    asked = [*paths, str(tmp_path / "missing"), paths[2], str(tmp_path / "empty")]
    sizes = [len(d) for d in datas] + [10, len(datas[2]) - 1, 0]
    found = native.map_md5(asked, sizes)
    for (view, digest), data in zip(found[: len(datas)], datas, strict=True):
        assert view.readonly and bytes(view) == data
        assert digest == hashlib.md5(data).digest()
    # Not there, not of the size asked, empty: not mapped.
    assert found[len(datas) :] == [None, None, None]
    kept = found[3][0][100:200]  # type: ignore[index]
    del found
    assert bytes(kept) == datas[3][100:200]  # a view keeps its mapping


# Around the edges of a piece read from a file (256 KiB) too.
FD_EDGES = [*EDGES, (256 << 10) - 1, 256 << 10, (256 << 10) + 1, 3 * (256 << 10) + 77]


def _open_files(tmp_path: Path, datas: list[bytes]) -> list[int]:
    fds = []
    for i, data in enumerate(datas):
        path = tmp_path / f"f{i}"
        path.write_bytes(data)
        fds.append(os.open(path, os.O_RDONLY))
    return fds


def test_files_read_in_pieces_and_hashed_side_by_side(tmp_path: Path) -> None:
    """Every count of files from one (the plain code) past two groups of
    lanes, lengths at every edge of padding, block and piece, mixed."""
    if not native.can_read_fds():
        pytest.skip("the native library is not used here")
    rnd = random.Random(7)
    datas = [rnd.randbytes(n) for n in FD_EDGES]
    fds = _open_files(tmp_path, datas)
    try:
        for count in range(1, len(datas) + 1):
            for start in (0, len(datas) - count):
                chosen = range(start, start + count)
                got = native.md5_fds([fds[i] for i in chosen], [len(datas[i]) for i in chosen])
                assert got == _want([datas[i] for i in chosen]), (count, start)
    finally:
        for fd in fds:
            os.close(fd)


def test_a_file_shorter_than_asked_gives_none_and_the_others_their_digests(
    tmp_path: Path,
) -> None:
    if not native.can_read_fds():
        pytest.skip("the native library is not used here")
    rnd = random.Random(8)
    datas = [rnd.randbytes(300_000) for _ in range(9)]
    fds = _open_files(tmp_path, datas)
    try:
        sizes = [len(d) for d in datas]
        sizes[4] += 1  # one byte past its end
        got = native.md5_fds(fds, sizes)
        want = _want(datas)
        assert got[4] is None
        assert got[:4] + got[5:] == want[:4] + want[5:]
        os.close(fds[2])  # not open any more: its read fails
        got = native.md5_fds(fds, [len(d) for d in datas])
        fds[2] = os.open(tmp_path / "f2", os.O_RDONLY)
        assert got[2] is None and got[:2] + got[3:] == want[:2] + want[3:]
    finally:
        for fd in fds:
            os.close(fd)


# The checking filesystem of a query step, over a real volume.


def _files(tmp_path: Path, count: int = 4, blocks: int = 5, named=None):  # type: ignore[no-untyped-def]
    """``count`` files of ``blocks`` blocks each, stored on a volume, added
    to a BlockFiles (``named``: which columns the query names); (BlockFiles,
    volume, [(path, data, [md5])])."""
    from warehouse.blocks.volume import LocalVolume
    from warehouse.query.blockfs import BlockFiles

    volume = LocalVolume(tmp_path / "vol")
    files = BlockFiles(volume)
    rnd = random.Random(11)
    made = []
    for n in range(count):
        parts = [rnd.randbytes(rnd.randrange(100, 9000)) for _ in range(blocks)]
        md5s = [hashlib.md5(p).hexdigest() for p in parts]
        for md5, part in zip(md5s, parts, strict=True):
            volume.put(md5, part)
        layout = [(m, len(p)) for m, p in zip(md5s, parts, strict=True)]
        path = files.add(f"t/part-{n}.parquet", layout, named)
        made.append((path.split("://", 1)[1], b"".join(parts), md5s))
    return files, volume, made


def test_a_touched_block_is_checked_with_its_siblings(tmp_path: Path) -> None:
    files, _, made = _files(tmp_path)
    path, data, _ = made[0]
    f = files.files[path]
    start = f.starts[2]
    assert files.read(f, start + 3, 50) == data[start + 3 : start + 53]
    # Block 2 of every file was checked in that one touch.
    assert {ms[2] for _, _, ms in made} <= set(files._kept)
    assert not {ms[1] for _, _, ms in made} & set(files._kept)
    for other, other_data, _ in made[1:]:
        g = files.files[other]
        assert files.read(g, 0, g.size) == other_data  # every byte, from checked blocks


def test_reads_at_the_end_and_across_blocks(tmp_path: Path) -> None:
    files, _, made = _files(tmp_path)
    path, data, _ = made[2]
    f = files.files[path]
    assert files.read(f, f.size, 10) == b""
    assert files.read(f, f.size - 3, 10) == data[-3:]
    assert files.read(f, 0, f.size + 100) == data
    got = files.read(f, f.starts[1] - 1, f.starts[4] - f.starts[1] + 2)
    assert type(got) is bytes and got == data[f.starts[1] - 1 : f.starts[4] + 1]


def test_a_read_over_several_blocks_checks_them_with_their_siblings(tmp_path: Path) -> None:
    files, _, made = _files(tmp_path)
    path, data, _ = made[0]
    f = files.files[path]
    start, end = f.starts[1] + 5, f.starts[3] + 7
    assert files.read(f, start, end - start) == data[start:end]
    # Blocks 1 to 3 of every file, in the one check of the first touch.
    assert {ms[j] for _, _, ms in made for j in (1, 2, 3)} <= set(files._kept)
    assert not {ms[j] for _, _, ms in made for j in (0, 4)} & set(files._kept)


def test_the_named_columns_of_other_row_groups_are_checked_along(tmp_path: Path) -> None:
    # A head, three row groups of four columns, a tail; the query names columns 0 and 2.
    files, _, made = _files(tmp_path, count=3, blocks=14, named=[True, False, True, False])
    path, data, _ = made[0]
    f = files.files[path]
    assert files.read(f, f.starts[1], 10) == data[f.starts[1] : f.starts[1] + 10]
    # Column 0 of every row group of every file, in the one check of the first touch.
    assert {ms[j] for _, _, ms in made for j in (1, 5, 9)} <= set(files._kept)
    others = (0, 2, 3, 4, 6, 7, 8, 10, 11, 12, 13)
    assert not {ms[j] for _, _, ms in made for j in others} & set(files._kept)
    # A read over columns 1 and 2: both here, and column 2 (named) elsewhere too.
    start, end = f.starts[6] + 5, f.starts[7] + 7
    assert files.read(f, start, end - start) == data[start:end]
    assert {ms[j] for _, _, ms in made for j in (3, 7, 11)} <= set(files._kept)
    assert made[0][2][6] in files._kept
    assert not {ms[j] for _, _, ms in made[1:] for j in (2, 10)} & set(files._kept)
    for other, other_data, _ in made:
        g = files.files[other]
        assert files.read(g, 0, g.size) == other_data  # every byte, from checked blocks


def test_blocks_not_cut_at_each_column_chunk_take_no_other_row_groups(tmp_path: Path) -> None:
    # Thirteen blocks: not a head and tail around row groups of four columns.
    files, _, made = _files(tmp_path, count=2, blocks=13, named=[True, False, True, False])
    f = files.files[made[0][0]]
    assert f.named is None
    files.read(f, f.starts[1], 10)
    assert set(files._kept) == {ms[1] for _, _, ms in made}


def test_a_bad_sibling_fails_only_the_read_that_touches_it(tmp_path: Path) -> None:
    from warehouse.errors import CorruptDataError

    files, volume, made = _files(tmp_path)
    bad = made[1][2][3]  # block 3 of file 1
    rot(volume.path_for(bad))
    f0 = files.files[made[0][0]]
    s = f0.starts[3]
    assert files.read(f0, s, 10) == made[0][1][s : s + 10]  # checked with the bad one
    assert files.error is None and volume.path_for(bad).exists()  # not read: not reported
    f1 = files.files[made[1][0]]
    with pytest.raises(CorruptDataError, match=r"it holds data of: t/part-1\.parquet"):
        files.read(f1, f1.starts[3], 10)
    assert isinstance(files.error, CorruptDataError)
    assert not volume.path_for(bad).exists()  # moved aside by the volume's check
    assert list(volume.path_for(bad).parent.glob(bad + ".corrupt.*"))


def test_threads_touching_the_same_blocks_all_get_checked_bytes(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    files, _, made = _files(tmp_path, count=8, blocks=9)

    def whole(item: tuple[str, bytes, list[str]]) -> bool:
        f = files.files[item[0]]
        got = b"".join(files.read(f, pos, 1000) for pos in range(0, f.size, 1000))
        return got == item[1]

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(whole, made * 3))
    assert not files._checking


def test_whole_blocks_are_verified_together(tmp_path: Path) -> None:
    """A query step's check of whole-block files: one answer per open block."""
    from warehouse.query.stepinputs import share_out, verify_open

    rnd = random.Random(13)
    blocks = []
    for n in range(9):
        data = rnd.randbytes(rnd.randrange(1, 50_000))
        path = tmp_path / f"b{n}"
        path.write_bytes(data)
        if n == 4:
            rot(path)
        blocks.append((os.open(path, os.O_RDONLY), hashlib.md5(data).hexdigest(), len(data)))
    try:
        assert verify_open(blocks) == [n != 4 for n in range(9)]
        shares = share_out(blocks, 2)
        assert sorted(b for share in shares for b in share) == sorted(blocks)
        assert [ok for share in shares for ok in verify_open(share)].count(False) == 1
    finally:
        for fd, _, _ in blocks:
            os.close(fd)


def _run_compile(
    tmp_path: Path, source: Path, target: Path, cc: str
) -> subprocess.CompletedProcess[str]:
    """hatch_build's compile step, run alone with ``CC=cc`` (hatchling, which
    only the build's own environment has, stood in for by its base class)."""
    stub = tmp_path / "stub" / "hatchling" / "builders" / "hooks" / "plugin"
    stub.mkdir(parents=True)
    (stub / "interface.py").write_text("class BuildHookInterface:\n    pass\n")
    root = Path(__file__).resolve().parents[1]
    code = (
        "import sys; from pathlib import Path; import hatch_build;"
        f"print(hatch_build._compile(Path({str(source)!r}), Path({str(target)!r}), 'hashlib'))"
    )
    env = {**os.environ, "CC": cc, "PYTHONPATH": f"{tmp_path / 'stub'}{os.pathsep}{root}"}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("broken", ["source", "compiler"])
def test_a_failed_build_leaves_no_earlier_library(tmp_path: Path, broken: str) -> None:
    """A library built from an earlier md5.c is not left to be loaded when
    the build of the current one fails (or finds no compiler): the package
    then hashes with hashlib, not with a kernel its source no longer is."""
    cc = os.environ.get("CC", "cc")
    if broken == "source" and shutil.which(cc.split()[0]) is None:
        pytest.skip("no C compiler here")
    source = tmp_path / "md5.c"
    source.write_text("this is not C\n" if broken == "source" else "int x;\n")
    target = tmp_path / "_md5.so"
    target.write_bytes(b"built from an earlier md5.c")
    done = _run_compile(tmp_path, source, target, cc if broken == "source" else "no-such-cc-here")
    assert done.returncode == 0 and done.stdout == "False\n", done.stderr
    assert "native md5.c not built" in done.stderr and ": hashlib" in done.stderr
    assert not target.exists()
