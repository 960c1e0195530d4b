"""`wh put`'s resume cache: an unchanged file is not read again (docs/cli.md).

The tests run as root too, where an unreadable file can still be read, so a
read is seen another way: a file is rewritten with other bytes of the same
size and its mtime set back. The cache (keyed by path, size, mtime and inode)
cannot tell, so a put that did not read it stores the old bytes; one that
read it (--no-cache) stores the new ones.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from click.testing import CliRunner

from installations import Installation
from warehouse.cli import cli
from warehouse.manifest import Manifest

ORIGINAL = {
    "big.bin": os.urandom(3 << 20),
    "a.txt": b"alpha\n",
    "b.txt": b"bravo\n",
    "d/c.txt": b"charlie\n",
    "d/e/empty": b"",
}


def wh(tmp_path: Path, *args: str, home: Path | None = None) -> tuple[int, str, str]:
    """``wh`` on the test's installation, or on the embedded one in ``home``."""
    env: dict[str, str | None] = {}
    if home is not None:
        env = {k: None for k in os.environ if k.startswith("WH_")} | {"WH_HOME": str(home)}
    done = CliRunner().invoke(cli, list(args), env=env)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    return done.exit_code, done.stdout, done.stderr


def put(tmp_path: Path, *args: str) -> dict[str, object]:
    code, out, err = wh(tmp_path, "put", "--json", *args)
    assert code == 0, err
    result: dict[str, object] = json.loads(out)
    return result


def make_tree(root: Path) -> Path:
    for rel, data in ORIGINAL.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def tamper(path: Path) -> None:
    """Other bytes, same size, same inode, mtime set back: unseen without a read."""
    st = path.stat()
    with path.open("r+b") as f:
        f.write(bytes(b ^ 0xFF for b in path.read_bytes()))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_ino == st.st_ino


def stored(tmp_path: Path, pdh: str, where: str) -> dict[str, bytes]:
    code, _, err = wh(tmp_path, "get", pdh, str(tmp_path / where))
    assert code == 0, err
    out = tmp_path / where
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def test_unchanged_files_are_not_read_again_and_a_changed_one_is(
    installation: Installation, tmp_path: Path
) -> None:
    src = make_tree(tmp_path / "src")
    first = put(tmp_path, str(src))
    assert first["cached_files"] == 0 and first["bytes_read"] == first["bytes"]
    for rel, data in ORIGINAL.items():
        if data:
            tamper(src / rel)

    again = put(tmp_path, str(src))
    assert again["pdh"] == first["pdh"]  # the old bytes: nothing was read
    assert again["cached_files"] == len(ORIGINAL) and again["bytes_read"] == 0
    assert again["bytes"] == first["bytes"] and again["blocks_new"] == 0
    # Without the cache the same put reads the rewritten files: another PDH.
    uncached = put(tmp_path, "--no-cache", str(src))
    assert uncached["pdh"] != first["pdh"] and uncached["cached_files"] is None

    (src / "a.txt").write_bytes(b"ALPHA, longer now\n")
    changed = put(tmp_path, str(src))
    assert changed["cached_files"] == len(ORIGINAL) - 1
    assert changed["bytes_read"] == len(b"ALPHA, longer now\n")
    assert changed["pdh"] not in (first["pdh"], uncached["pdh"])
    expected = ORIGINAL | {"a.txt": b"ALPHA, longer now\n"}
    assert stored(tmp_path, str(changed["pdh"]), "out") == expected
    # What was learnt is kept: the same tree again reads nothing, same PDH.
    assert put(tmp_path, str(src))["pdh"] == changed["pdh"]

    cache_dir = tmp_path / "xdg-cache" / "warehouse"
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    files = list(cache_dir.glob("put-*.sqlite"))
    assert len(files) == 1 and stat.S_IMODE(files[0].stat().st_mode) == 0o600


def test_an_entry_whose_block_is_gone_is_read_again(
    installation: Installation, tmp_path: Path
) -> None:
    src = make_tree(tmp_path / "src")
    first = put(tmp_path, str(src))
    code, text, err = wh(tmp_path, "manifest", str(first["pdh"]))
    assert code == 0, err
    blocks = [loc.md5 for loc in Manifest.parse(text).blocks()]
    assert len(blocks) == first["blocks"] == 2
    for md5 in blocks:
        copies = installation.copies(md5)
        assert copies
        for copy in copies:
            copy.unlink()
    again = put(tmp_path, str(src))
    assert again["pdh"] == first["pdh"] and again["cached_files"] == 1  # only the empty file
    assert again["blocks_new"] == len(blocks)  # stored again
    assert stored(tmp_path, str(again["pdh"]), "out") == ORIGINAL


def test_the_cache_is_per_store(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    code, out, err = wh(tmp_path, "put", "--json", str(src), home=tmp_path / "one")
    assert code == 0 and json.loads(out)["cached_files"] == 0, err
    code, out, err = wh(tmp_path, "put", "--json", str(src), home=tmp_path / "one")
    assert code == 0 and json.loads(out)["cached_files"] == len(ORIGINAL), err
    code, out, err = wh(tmp_path, "put", "--json", str(src), home=tmp_path / "two")
    assert code == 0, err
    assert json.loads(out)["cached_files"] == 0  # another home: its own cache
