"""`wh get` into a directory another user can write: planted links steer nothing.

The attacker is an ordinary user (``nobody`` when the tests run as root) who
may write in DEST (a shared scratch directory) but not in the victim's
directory. They plant symbolic links where get is about to write: the
temporary name of a file, and a directory the collection holds, created
after get checked the paths (while it writes an earlier file). Nothing may
be written outside DEST.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from warehouse import UsageError
from warehouse.embedded import EmbeddedWarehouse

pytestmark = pytest.mark.usefixtures("small_file_writes")


def as_attacker(*command: str) -> None:
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: no other user to attack from")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        if subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
            pytest.skip("cannot run a command as another user here")
    subprocess.run([*prefix, *command], check=True, capture_output=True)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory under the system's temporary directory that others can reach."""
    root = Path(tempfile.mkdtemp(prefix="wh-shared-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root)


@pytest.fixture
def places(shared: Path) -> tuple[Path, Path]:
    """DEST (anyone may write in it) and the victim's own directory (only they may)."""
    dest = shared / "scratch"
    dest.mkdir()
    dest.chmod(0o777)  # world-writable and not sticky: a shared working directory
    victim = shared / "private"
    victim.mkdir(mode=0o700)
    return dest, victim


def test_a_link_planted_at_the_temporary_name_is_not_followed(
    wh: EmbeddedWarehouse, tmp_path: Path, places: tuple[Path, Path]
) -> None:
    dest, victim = places
    src = tmp_path / "src"
    src.mkdir()
    (src / "report.txt").write_text("the victim's data\n")
    pdh = wh.put([src]).pdh
    # The name the temporary file used to get (".NAME.wh-part-<pid>") is guessable.
    planted = dest / f".report.txt.wh-part-{os.getpid()}"
    as_attacker("ln", "-s", str(victim / "stolen"), str(planted))
    wh.get(pdh, dest)
    assert sorted(os.listdir(victim)) == []
    assert (dest / "report.txt").read_text() == "the victim's data\n"
    assert not (dest / "report.txt").is_symlink()
    assert planted.is_symlink()  # the attacker's link is left alone, never written through


def test_a_directory_replaced_by_a_link_while_get_runs_is_not_followed(
    wh: EmbeddedWarehouse, tmp_path: Path, places: tuple[Path, Path]
) -> None:
    dest, victim = places
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "z").mkdir()
    (src / "a" / "first").write_bytes(os.urandom(100_000))
    (src / "z" / "second").write_text("goes into DEST/z or nowhere\n")
    pdh = wh.put([src]).pdh
    planted: list[bool] = []

    def plant(_: int) -> None:
        # After the checks, while a/first is written: DEST/z does not exist yet.
        if not planted:
            as_attacker("ln", "-s", str(victim), str(dest / "z"))
            planted.append(True)

    with pytest.raises(UsageError, match="symbolic link"):
        wh.get(pdh, dest, progress=plant)
    assert planted
    assert sorted(os.listdir(victim)) == []
    assert (dest / "z").is_symlink()


def test_force_replaces_a_planted_link_itself(
    wh: EmbeddedWarehouse, tmp_path: Path, places: tuple[Path, Path]
) -> None:
    dest, victim = places
    (victim / "precious").write_text("keep\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("new\n")
    pdh = wh.put([src]).pdh
    as_attacker("ln", "-s", str(victim / "precious"), str(dest / "f"))
    with pytest.raises(Exception, match="already exist"):
        wh.get(pdh, dest)
    wh.get(pdh, dest, force=True)
    assert (victim / "precious").read_text() == "keep\n"
    assert not (dest / "f").is_symlink()
    assert (dest / "f").read_text() == "new\n"
