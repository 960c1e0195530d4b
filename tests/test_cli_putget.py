"""`wh put` / `wh get` and friends as a user runs them.

Every test runs twice: on the embedded warehouse and on a remote one (a
controller and 4 keep servers on 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import Runner, make_tree, wh_process
from installations import Installation
from warehouse.manifest import Manifest, md5sum_line


@pytest.fixture
def run(installation: Installation) -> Runner:
    return Runner()


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every directory (None) under root."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            out[os.path.normpath(os.path.join(rel, d))] = None
        for f in filenames:
            out[os.path.normpath(os.path.join(rel, f))] = Path(dirpath, f).read_bytes()
    return out


def test_put_get_reproduces_the_tree(tmp_path: Path, run: Runner) -> None:
    src = make_tree(tmp_path / "src")
    pdh = run("put", str(src)).stdout.strip()
    out = tmp_path / "out"
    run("get", pdh, str(out))
    assert snapshot(out) == snapshot(src)


def test_listing_matches_md5sum(tmp_path: Path, run: Runner) -> None:
    src = make_tree(tmp_path / "src")
    pdh = run("put", str(src)).stdout.strip()
    files = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    md5sum = subprocess.run(
        ["md5sum", "--", *files], cwd=src, capture_output=True, text=True, check=True
    ).stdout
    listing = run("get", "--no-write", pdh).stdout
    assert sorted(listing.splitlines()) == sorted(md5sum.splitlines())
    # And the listing checks the written files with md5sum -c.
    out = tmp_path / "out"
    written = run("get", pdh, str(out)).stdout
    check = subprocess.run(["md5sum", "-c", "--quiet", "-"], cwd=out, input=written, text=True)
    assert check.returncode == 0


def test_second_put_writes_no_block(tmp_path: Path, run: Runner) -> None:
    src = make_tree(tmp_path / "src")
    first = json.loads(run("put", str(src), "--json").stdout)
    again = json.loads(run("put", str(src), "--json").stdout)
    assert again["pdh"] == first["pdh"]
    assert first["blocks_new"] > 0 and again["blocks_new"] == 0 and again["bytes_new"] == 0
    rows = json.loads(run("accounting", "--json").stdout)
    assert rows == [
        {
            "user": "alice",
            "writes": first["blocks"] + again["blocks"],
            "new_blocks": first["blocks_new"],
            "bytes_written": first["bytes"] * 2,
            # Remote keep servers are shared by the tests: some blocks may be known.
            "bytes_new": first["bytes_new"],
        }
    ]


def test_corrupt_block_fails_get_with_code_5(
    tmp_path: Path, run: Runner, installation: Installation
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "victim one").write_bytes(b"precious " * 1000)
    (src / "victim two").write_bytes(b"data " * 1000)
    pdh = run("put", str(src)).stdout.strip()
    block = Manifest.parse(run("manifest", pdh).stdout).blocks()[0]
    copies = installation.copies(block.md5)
    assert copies
    for path in copies:  # every copy: no good one is left
        path.write_bytes(b"X" + path.read_bytes()[1:])
    out = tmp_path / "out"
    result = run("get", pdh, str(out), code=5)
    assert block.md5 in result.stderr
    assert "victim one" in result.stderr and "victim two" in result.stderr
    assert not any(p.is_file() for p in out.rglob("*")), "no corrupt data is written"
    assert run("get", "--no-write", pdh, code=5).stdout == ""
    run("cat", f"{pdh}/victim one", code=5)


def test_get_refuses_to_overwrite_without_force(tmp_path: Path, run: Runner) -> None:
    src = make_tree(tmp_path / "src")
    pdh = run("put", str(src)).stdout.strip()
    out = tmp_path / "out"
    out.mkdir()
    (out / "hello.txt").write_bytes(b"mine")
    result = run("get", pdh, str(out), code=1)
    assert "--force" in result.stderr
    assert snapshot(out) == {"hello.txt": b"mine"}, "a refused get writes nothing"
    run("get", "--force", pdh, str(out))
    assert (out / "hello.txt").read_bytes() == b"hello\n"


def test_get_refuses_to_write_through_a_symlink(tmp_path: Path, run: Runner) -> None:
    src = make_tree(tmp_path / "src")
    pdh = run("put", str(src)).stdout.strip()
    out = tmp_path / "out"
    outside = tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / "sub").symlink_to(outside)
    run("get", "--force", pdh, str(out), code=2)
    assert list(outside.iterdir()) == []


def test_get_sub_paths(tmp_path: Path, run: Runner) -> None:
    src = make_tree(tmp_path / "src")
    run("put", str(src), "--name", "tree")
    run("get", "tree/sub", str(tmp_path / "sub"))
    assert snapshot(tmp_path / "sub") == snapshot(src / "sub")
    run("get", "tree/hello.txt", str(tmp_path / "single.txt"))
    assert (tmp_path / "single.txt").read_bytes() == b"hello\n"
    assert run("cat", "tree/sub/colon:name").stdout == "colon\n"
    run("get", "tree/nope", str(tmp_path / "x"), code=4)
    run("get", "tree/../etc", str(tmp_path / "x"), code=2)
    assert "with space.txt" in run("ls", "tree/sub").stdout
    assert run("ls", "-l", "tree").stdout.count("\n") == 10


def test_names_through_put_and_name_set(tmp_path: Path, run: Runner) -> None:
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "f").write_bytes(b"a")
    (b / "f").write_bytes(b"b")
    pa = run("put", str(a), "--name", "data").stdout.strip()
    assert run("put", str(a), "--name", "data").stdout.strip() == pa, "same data: no change"
    run("put", str(b), "--name", "data", code=3)
    run("put", str(b), "--name", "data", "--create", code=3)
    pb = run("put", str(b), "--name", "data", "--expect", pa).stdout.strip()
    assert run("name", "get", "data").stdout.strip() == pb
    run("name", "set", "data", pa, "--expect", pa, code=3)
    run("name", "set", "data", pa, "--expect", pb)
    log = json.loads(run("name", "log", "data", "--json").stdout)
    assert [(c["old_pdh"], c["new_pdh"]) for c in log] == [(None, pa), (pa, pb), (pb, pa)]
    assert [n["name"] for n in json.loads(run("name", "ls", "--json").stdout)] == ["data"]
    run("name", "get", "nothing", code=4)
    run("name", "set", "other", "0" * 32 + "+5", code=4)


def test_twenty_processes_compare_and_swap(
    tmp_path: Path, run: Runner, installation: Installation
) -> None:
    pdhs = []
    for i in range(21):
        d = tmp_path / f"d{i}"
        d.mkdir()
        (d / "f").write_text(str(i))
        pdhs.append(run("put", str(d)).stdout.strip())
    run("name", "set", "N", pdhs[0])

    def attempt(i: int) -> subprocess.CompletedProcess[str]:
        return wh_process("name", "set", "N", pdhs[i], "--expect", pdhs[0], env=installation.env)

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(attempt, range(1, 21)))
    codes = sorted(r.returncode for r in results)
    assert codes == [0] + [3] * 19, [r.stderr for r in results]
    assert all(
        "conflict" in r.stderr.lower() or "holds" in r.stderr for r in results if r.returncode
    )
    log = run("name", "log", "N").stdout.splitlines()
    assert log[0] == "version\told_pdh\tnew_pdh\tby\tat"
    assert len(log) == 3, "one creation and exactly one change"
    winner = next(i for i, r in enumerate(results, 1) if r.returncode == 0)
    assert run("name", "get", "N").stdout.strip() == pdhs[winner]


EMPTY = "d41d8cd98f00b204e9800998ecf8427e+0"
BAD_MANIFESTS = [
    (b". d41d8cd98f00b204e9800998ecf8427e+0 0:0:a", 1, "0:0:a"),
    (b". d41d8cd98f00b204e9800998ecf8427g+0 0:0:a\n", 1, "d41d8cd98f00b204e9800998ecf8427g+0"),
    (b". 3d21727381c6ae437586dc649592dbde+5 0:6:x\n", 1, "0:6:x"),
    (
        f". {EMPTY} 0:0:a\n./.. {EMPTY} 0:0:b\n".encode(),
        2,
        "./..",
    ),
    (b". d41d8cd98f00b204e9800998ecf8427e+0 0:0:a//b\n", 1, "0:0:a//b"),
    (b". 0:0:a\n", 1, "0:0:a"),
]


@pytest.mark.parametrize(("text", "line", "token"), BAD_MANIFESTS)
def test_bad_manifest_is_refused_and_nothing_stored(
    run: Runner, installation: Installation, text: bytes, line: int, token: str
) -> None:
    before = installation.stored_blocks()
    result = run("put", "--manifest", "-", "--name", "bad", input=text, code=2)
    assert f"line {line}" in result.stderr and token in result.stderr
    assert json.loads(run("name", "ls", "--json").stdout) == []
    assert installation.stored_blocks() == before


def test_every_malformed_manifest_changes_nothing(tmp_path: Path, home: Path) -> None:
    """The parser's whole table of bad manifests, through `wh put --manifest`."""
    from test_manifest_bad import BAD
    from warehouse.blocks.volume import LocalVolume

    runner = Runner()
    for text, line, token, _ in BAD:
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
        result = runner("put", "--manifest", "-", "--name", "bad", input=data, code=2)
        assert f"line {line}" in result.stderr, (data, result.stderr)
        assert repr(token)[1:-1][:40] in result.stderr or token == "", (token, result.stderr)
    assert runner("name", "ls").stdout == "name\tpdh\tversion\tupdated_at\tupdated_by\n"
    assert list(LocalVolume(home / "blocks").index()) == []


def test_an_unreadable_catalog_is_a_clear_error(tmp_path: Path, home: Path) -> None:
    """A damaged warehouse.db stops every command with its path and the cause,
    exit code 1, and leaves the file as it was."""
    home.mkdir()
    (home / "warehouse.db").write_bytes(b"not a database\n" * 100)
    src = make_tree(tmp_path / "src")
    runner = Runner()
    for args in (("put", str(src)), ("name", "ls"), ("ls", "0" * 32 + "+0")):
        result = runner(*args, code=1)
        assert f"cannot open the catalog {home / 'warehouse.db'}" in result.stderr, result.stderr
        assert "file is not a database" in result.stderr
        assert "Traceback" not in result.stderr
    assert (home / "warehouse.db").read_bytes() == b"not a database\n" * 100


def test_file_and_directory_of_one_name_is_refused_when_stored(run: Runner, tmp_path: Path) -> None:
    src = tmp_path / "s"
    src.mkdir()
    (src / "hello").write_bytes(b"hello")
    stored = run("manifest", run("put", str(src)).stdout.strip()).stdout
    locator = stored.split()[1]  # signed for us when the warehouse is remote
    for text in (f". {locator} 0:5:a 0:5:a/b\n", f". {locator} 0:5:a 0:0:a/\\056\n"):
        refused = run("put", "--manifest", "-", "--name", "n", input=text.encode(), code=2)
        assert "'0:5:a'" in refused.stderr and "is a file and also a directory" in refused.stderr
    run("name", "get", "n", code=4)


def test_manifest_with_missing_blocks_is_refused(run: Runner, installation: Installation) -> None:
    text = b". 3d21727381c6ae437586dc649592dbde+5 0:5:x\n"
    # Embedded: the block is not stored. Remote: it carries no signature for us.
    run("put", "--manifest", "-", input=text, code=4 if installation.kind == "embedded" else 6)


def test_usage_errors(run: Runner, tmp_path: Path) -> None:
    run("put", code=2)
    run("put", str(tmp_path), "--expect", "x", code=2)
    run("put", str(tmp_path / "missing"), code=4)
    run("get", "0" * 32 + "+3", code=4)
    run("get", "not a name!", code=2)


def test_manifest_of_a_sub_path_is_refused(tmp_path: Path, run: Runner) -> None:
    """The whole manifest printed for KEY/sub would read as the sub-path's own."""
    pdh = run("put", str(make_tree(tmp_path / "src"))).stdout.strip()
    refused = run("manifest", f"{pdh}/sub", code=2)
    assert refused.stdout == "" and refused.stderr.startswith("Error: ")
    assert len(refused.stderr.splitlines()) == 1 and "give KEY without /sub" in refused.stderr
    assert run("manifest", f"{pdh}/").stdout == run("manifest", pdh).stdout


def test_an_empty_dest_is_refused_not_taken_for_the_current_directory(
    tmp_path: Path, run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdh = run("put", str(make_tree(tmp_path / "src"))).stdout.strip()
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    refused = run("get", pdh, "", code=2)
    assert refused.stdout == "" and refused.stderr == (
        "Error: DEST is empty: give a directory or a file name\n"
    )
    assert list(here.iterdir()) == []
    run("get", f"{pdh}/hello.txt", "", code=2)
    assert list(here.iterdir()) == []
    # "-" is standard output elsewhere: pointed at `wh cat`, not made a file.
    refused = run("get", f"{pdh}/hello.txt", "-", code=2)
    assert "wh cat" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert list(here.iterdir()) == []
    run("get", f"{pdh}/hello.txt", "./-")
    assert [p.name for p in here.iterdir()] == ["-"]


def test_recorded_and_recomputed_digests_agree(tmp_path: Path, run: Runner) -> None:
    src = make_tree(tmp_path / "src")
    pdh = run("put", str(src)).stdout.strip()
    recorded = run("get", "--no-write", pdh).stdout
    assert run("get", "--no-write", "--rehash", pdh).stdout == recorded
    # A collection recorded from manifest text has no digests: they are computed.
    text = run("manifest", pdh).stdout.replace("hello.txt", "renamed.txt")
    other = run("put", "--manifest", "-", input=text.encode()).stdout.strip()
    assert other != pdh
    listing = run("get", "--no-write", other).stdout
    assert listing == recorded.replace("hello.txt", "renamed.txt")


def test_remote_commands_never_load_the_database_library(
    tmp_path: Path, installation: Installation
) -> None:
    """SQLAlchemy costs a fifth of a second at start-up; a remote client, and a
    step reporting back, need none of it."""
    if installation.kind != "remote":
        pytest.skip("the embedded warehouse is a database")
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('loaded:', 'sqlalchemy' in sys.modules, file=sys.stderr))\n"
        "from warehouse.cli import main\n"
        "sys.argv[0] = 'wh'\n"
        "main()\n"
    )
    src = make_tree(tmp_path / "src")

    def wh(*args: str, **env: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", probe, *args],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, **env},
        )
        assert done.returncode == 0, done.stderr
        assert "loaded: False" in done.stderr, (args, done.stderr)
        return done.stdout

    pdh = wh("put", str(src), "--name", "light").strip()
    wh("get", "light", str(tmp_path / "out"))
    wh("ls", "-l", pdh)
    wh("name", "log", "light")
    wh("cat", f"{pdh}/hello.txt")
    wh("job", "ls", "--json")
    # What a step reports goes to its result file, through no catalog.
    result = tmp_path / "result"
    wh("step", "queue", "--level", "1", "a", WH_RESULT=str(result))
    assert json.loads(result.read_text()) == {"op": "queue", "level": 1, "input": "a"}


# Sub-paths of make_tree's tree: directories (with subdirectories, empty
# ones, names to escape), single files, and the whole collection.
SUB_PATHS = [
    "",
    "sub",
    "sub/deeper",
    "a",
    "a b",
    "empty dir",
    "empty dir/inner empty",
    "hello.txt",
    "empty",
    "sub/deeper/tab\tand\nnewline",
    "a b/x",
]


def test_a_get_read_from_the_stored_text_lists_and_writes_what_the_parsed_manifest_does(
    tmp_path: Path, run: Runner
) -> None:
    import warehouse
    from warehouse.collection.extract import extract

    src = make_tree(tmp_path / "src")
    pdh = run("put", str(src)).stdout.strip()
    with warehouse.open() as wh:
        for sub in SUB_PATHS:
            key = f"{pdh}/{sub}" if sub else pdh
            streamed = wh.reader(key, one_pass=True)
            assert streamed.normal_text is not None, "a get reads the stored text"
            parsed = wh.reader(key)
            assert parsed.normal_text is None
            expected = extract(parsed, None, subpath=sub)
            assert extract(streamed, None, subpath=sub) == expected, sub
            assert expected or sub.startswith("empty dir"), sub
            for rehash in (False, True):
                got = extract(wh.reader(key, one_pass=True), None, subpath=sub, rehash=rehash)
                assert got == expected, (sub, rehash)
            # Written: into a new path (a single file takes its name) and into
            # a directory that exists.
            for i, made in enumerate((False, True)):
                a, b = tmp_path / "a" / f"{sub}-{i}", tmp_path / "b" / f"{sub}-{i}"
                if made:
                    a.mkdir(parents=True)
                    b.mkdir(parents=True)
                assert extract(wh.reader(key), a, subpath=sub) == extract(
                    wh.reader(key, one_pass=True), b, subpath=sub
                )
                assert snapshot(tmp_path / "a") == snapshot(tmp_path / "b"), sub
            # The command prints the same, as lines and as JSON.
            lines = "".join(md5sum_line(f.md5, f.path) + "\n" for f in expected)
            assert run("get", "--no-write", key).stdout == lines, sub
            as_dicts = [{"path": f.path, "md5": f.md5, "size": f.size} for f in expected]
            printed = run("get", "--no-write", "--json", key).stdout
            assert printed == json.dumps(as_dicts, indent=2, sort_keys=True) + "\n", sub
        for missing in ("nope", "sub/nope", "hello.txt/x", "su"):
            with pytest.raises(warehouse.errors.NotFoundError):
                extract(wh.reader(f"{pdh}/{missing}", one_pass=True), None, subpath=missing)
            run("get", "--json", "--no-write", f"{pdh}/{missing}", code=4)


def test_get_json_after_a_failure_lists_the_files_written(tmp_path: Path, run: Runner) -> None:
    src = make_tree(tmp_path / "src")
    pdh = run("put", str(src)).stdout.strip()
    out = tmp_path / "out"
    out.mkdir()
    (out / "hello.txt").write_bytes(b"mine")
    refused = run("get", "--json", pdh, str(out), code=1)
    assert refused.stdout == "", "nothing is listed when nothing is written"
    assert json.loads(run("get", "--json", "--no-write", f"{pdh}/empty dir").stdout) == []


def test_the_controller_sends_the_stored_manifest_signed_as_the_whole_one(
    tmp_path: Path, run: Runner
) -> None:
    import re

    import httpx

    if "WH_URL" not in os.environ:
        pytest.skip("the controller's requests")
    src = make_tree(tmp_path / "src")
    pdh = run("put", str(src)).stdout.strip()
    api = os.environ["WH_URL"].rstrip("/") + "/api/v1/collections/"
    auth = {"Authorization": f"Bearer {os.environ['WH_TOKEN']}"}
    whole = httpx.get(api + pdh, headers=auth).json()
    streamed = httpx.get(api + pdh + "/manifest", headers=auth)
    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/plain")
    # The same text but for the signatures' expiry times (made a moment apart).
    expiry = re.compile(r"\+A[0-9a-f]+@[0-9a-f]+")
    assert expiry.sub("+A", streamed.text) == expiry.sub("+A", whole["manifest_text"])
    assert "+A" in streamed.text
    listing = httpx.get(api + pdh + "/listing", headers=auth)
    assert listing.json() == whole["file_md5s"]
    assert list(listing.json()) == list(Manifest.parse(streamed.text).files())
    # A collection recorded from manifest text has no listing: no content.
    text = run("manifest", pdh).stdout.replace("hello.txt", "renamed.txt")
    other = run("put", "--manifest", "-", input=text.encode()).stdout.strip()
    assert httpx.get(api + other + "/listing", headers=auth).status_code == 204
    for missing in ("/manifest", "/listing"):
        assert httpx.get(api + "0" * 32 + "+1" + missing, headers=auth).status_code == 404


def _store_unparsable(installation: Installation, text: bytes) -> str:
    """Record a collection whose stored text hashes to its PDH but does not
    parse (damage, or a text an older version let through); its PDH."""
    import hashlib

    from warehouse.collection.records import store_portable
    from warehouse.embedded import EmbeddedWarehouse

    pdh = f"{hashlib.md5(text).hexdigest()}+{len(text)}"
    if installation.controller is None:
        with EmbeddedWarehouse(Path(installation.env["WH_HOME"]), user="alice") as wh:
            store_portable(wh.store, wh.engine, pdh, text, size=2, file_count=2, user="alice")
    else:
        state = installation.controller.state
        store_portable(state.keep(), state.engine, pdh, text, size=2, file_count=2, user="alice")
    return pdh


def test_a_stored_manifest_that_does_not_parse_is_reported_as_corrupt(
    tmp_path: Path, run: Runner, installation: Installation
) -> None:
    """Over a controller too: not "cannot reach the controller" from a stream
    broken after its 200, but the damage, exit 5, and nothing written."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"x")
    run("put", str(src))  # the block of "x" is stored
    block = "9dd4e461268c8034f5c8564e155c67a6+1"
    # Each line well formed; "a" is a file and also a directory, found at the end.
    text = f". {block} 0:1:a\n./a {block} 0:1:b\n".encode()
    pdh = _store_unparsable(installation, text)
    out = tmp_path / "out"
    for args in (("get", pdh, str(out)), ("get", "--no-write", pdh), ("ls", pdh)):
        failed = run(*args, code=5)
        # ls lists as it reads; what it printed before the last line stays.
        assert failed.stdout == "" or args[0] == "ls", args
        errors = failed.stderr.strip().splitlines()
        assert len(errors) == 1 and errors[0].startswith("Error: "), (args, errors)
        assert "cannot reach" not in errors[0] and "file and also a directory" in errors[0]
    assert not out.exists()


def test_a_listing_larger_than_one_piece_arrives_whole(tmp_path: Path, run: Runner) -> None:
    """The controller sends a caller's listing in pieces of 256 Ki
    characters; one of more than a piece is still one JSON object, in
    manifest order, with every non-ASCII name intact across the cuts."""
    import httpx

    if "WH_URL" not in os.environ:
        pytest.skip("the controller's requests")
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3000):  # about 330,000 characters of listing
        (src / f"{i:05d}-Übergrößé-{'x' * 40}").write_bytes(b"")
    pdh = run("put", str(src)).stdout.strip()
    api = os.environ["WH_URL"].rstrip("/") + "/api/v1/collections/" + pdh
    auth = {"Authorization": f"Bearer {os.environ['WH_TOKEN']}"}
    listing = httpx.get(api + "/listing", headers=auth)
    assert listing.status_code == 200 and len(listing.text) > 1 << 18
    got = listing.json()
    assert list(got) == sorted(p.name for p in src.iterdir())
    assert set(got.values()) == {"d41d8cd98f00b204e9800998ecf8427e"}
    assert got == httpx.get(api, headers=auth).json()["file_md5s"]


def test_ls_never_prints_two_names_alike(tmp_path: Path, run: Runner) -> None:
    """A line of `wh ls` starting with a backslash is always escaped, so a
    name that starts with one cannot pass for an escaped name."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "a\nb").write_bytes(b"1")  # a newline in the name
    (src / "\\a\\nb").write_bytes(b"2")  # backslashes, and the letter n
    (src / "\\lead").write_bytes(b"3")
    (src / "d" / "\\x").write_bytes(b"4")  # not at the start of the line
    (src / "plain").write_bytes(b"5")
    pdh = run("put", str(src)).stdout.strip()
    lines = run("ls", pdh).stdout.splitlines()
    # The leading backslash says "escaped", then each backslash is doubled.
    want = ["\\a\\nb", "\\" + "\\\\a\\\\nb", "\\" + "\\\\lead", "plain", "d/\\x"]
    assert sorted(lines) == sorted(want)
    longer = [line.split(None, 1)[1] for line in run("ls", "-l", pdh).stdout.splitlines()]
    assert longer == lines
    assert run("ls", f"{pdh}/d").stdout == "\\" + "\\\\x\n"  # here the name starts the line


def test_a_file_got_into_a_new_dest_ending_in_a_slash_goes_inside_it(
    tmp_path: Path, run: Runner
) -> None:
    """`DEST/` says a directory, as it does to cp: the file goes inside."""
    pdh = run("put", str(make_tree(tmp_path / "src"))).stdout.strip()
    listed = run("get", f"{pdh}/hello.txt", str(tmp_path / "new") + "/").stdout
    assert (tmp_path / "new" / "hello.txt").read_bytes() == b"hello\n"
    assert listed == md5sum_line("b1946ac92492d2347c6235b4d2611184", "hello.txt") + "\n"
    # Without the slash a new DEST is the file's new name, as documented.
    run("get", f"{pdh}/hello.txt", str(tmp_path / "renamed"))
    assert (tmp_path / "renamed").read_bytes() == b"hello\n"
    (tmp_path / "file").write_bytes(b"mine")
    run("get", f"{pdh}/hello.txt", str(tmp_path / "file") + "/", code=1)
    assert (tmp_path / "file").read_bytes() == b"mine"
