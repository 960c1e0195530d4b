"""A put through a controller of a tree of many directories (a block, and
so an accounting line, per directory): its block writes are sent a batch
at a time from the put's block log, recorded as an embedded put records
them, sent again whole when a busy controller asks for the body again,
and what the client holds to send them does not grow with the directories
(a real controller and keep servers)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from cluster import Controller, ctl_fixture, listening, pool_fixture, wh_serve
from frontserver import Answer, Front, serving
from memory_helpers import WH, open_under
from warehouse.blocks import Locator
from warehouse.blocks.store import StoredBlock
from warehouse.catalog.schema import block_writes
from warehouse.collection.scratch import HELD_ENTRIES_VAR, BlockLog
from warehouse.embedded import EmbeddedWarehouse
from warehouse.remote.warehouse import RemoteWarehouse, _again

PATH = "/api/v1/collections/text"

pool = pool_fixture()  # each test stores its blocks anew: same "new" flags
ctl = ctl_fixture()

# Directories of the trees below: past the block log's held rows (set low),
# so their rows are read back from its scratch file.
DIRS = 300
HELD = "50"


def _one_file_dirs(root: Path, count: int) -> Path:
    """``count`` directories of one file each, some empty (no block)."""
    for i in range(count):
        d = root / f"d{i:05d}"
        d.mkdir(parents=True)
        (d / "f").write_bytes(b"" if i % 11 == 0 else b"%d\n" % i)
    return root


def _writes(engine: sa.Engine, user: str) -> list[tuple[str, int, bool]]:
    """``user``'s accounting rows, in the order they were recorded."""
    c = block_writes.c
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(c.md5, c.size, c.new).where(c.user == user).order_by(c.id)
        ).all()
    return [(m, s, bool(n)) for m, s, n in rows]


def test_a_put_of_many_directories_records_the_rows_an_embedded_put_does(
    tmp_path: Path, ctl: Controller, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HELD_ENTRIES_VAR, HELD)
    src = _one_file_dirs(tmp_path / "src", DIRS)
    with RemoteWarehouse(ctl.url, ctl.user("alice")) as remote:
        pdh = remote.put(src).pdh
    with EmbeddedWarehouse(home) as local:
        assert local.put(src).pdh == pdh
        expected = _writes(local.engine, local.user)
    # A block per directory with a file of bytes, each new.
    assert len(expected) == DIRS - len(range(0, DIRS, 11))
    assert all(new for _, _, new in expected)
    assert _writes(ctl.state.engine, "alice") == expected


def test_directories_alike_each_write_their_one_block(
    tmp_path: Path, ctl: Controller, home: Path
) -> None:
    """Each directory writes the block its file is in: one block written
    once per directory, as often as the manifest's streams name it."""
    src = tmp_path / "src"
    for i in range(DIRS):
        (src / f"d{i:05d}").mkdir(parents=True)
        (src / f"d{i:05d}" / "same").write_bytes(b"the same\n")
    with RemoteWarehouse(ctl.url, ctl.user("alice")) as remote:
        pdh = remote.put(src).pdh
    with EmbeddedWarehouse(home) as local:
        assert local.put(src).pdh == pdh
        expected = [(m, s) for m, s, _ in _writes(local.engine, local.user)]
    assert len(expected) == DIRS and len(set(expected)) == 1
    assert [(m, s) for m, s, _ in _writes(ctl.state.engine, "alice")] == expected


class _Busy(Front):
    """Answers the first ``busy`` streamed puts 503, then relays them."""

    def __init__(self, behind: str, busy: int) -> None:
        super().__init__(behind)
        self.busy = busy
        self.refused = 0

    def reply(self, command: str, path: str, relay: Callable[[], Answer]) -> Answer:
        if command == "POST" and path == PATH and self.refused < self.busy:
            self.refused += 1
            return (503, "application/json", b'{"error":"busy"}', False)
        return relay()

    def headers(self, command: str, path: str, status: int) -> dict[str, str]:
        return {"Retry-After": "0"} if status == 503 else {}


def test_a_body_sent_again_after_a_503_records_its_writes_once(
    tmp_path: Path, ctl: Controller, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HELD_ENTRIES_VAR, HELD)
    src = _one_file_dirs(tmp_path / "src", DIRS)
    with (
        serving(_Busy(ctl.url, busy=2)) as front,
        RemoteWarehouse(front.url, ctl.user("alice")) as remote,
    ):
        pdh = remote.put(src).pdh
    assert front.refused == 2
    with EmbeddedWarehouse(home) as local:
        assert local.put(src).pdh == pdh
        expected = _writes(local.engine, local.user)
    # The third body was whole (the controller checks every line against
    # the manifest and the length) and recorded once.
    assert _writes(ctl.state.engine, "alice") == expected


# -- memory --------------------------------------------------------------------

# Accounting lines of ten times the directories: held together, 100,000
# lines peaked 9 MB above 10,000; sent a batch at a time, 2 MB (the body's
# pieces reach their full size).
SMALL, LARGE = 10_000, 100_000
GROWTH = 4 << 20


def _peak_sending(remote: RemoteWarehouse, count: int, scratch: Path) -> int:
    """The most the client allocates recording a put of ``count`` one-file
    directories, its text and listing spooled and its block writes logged
    first. Each directory names a block of its own (an admin's put: their
    signatures are not asked for, so none need be stored)."""
    spool = remote._spool()
    log = BlockLog(scratch)
    try:
        # As a put of these directories writes them: the text, the
        # listing, and a block write per directory.
        for i in range(count):
            name = f"d{i:07d}"
            md5 = hashlib.md5(b"%d\n" % i).hexdigest()
            size = len(b"%d\n" % i)
            spool.add_line(f"./{name} {md5}+{size} 0:{size}:f\n".encode(), 1, size)
            spool.add_entries(f'"{name}/f":"{md5}"')
            log.append(StoredBlock(Locator(md5, size), True))
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            remote._record_spool(spool, log.rows())
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        log.close()
        spool.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_block_writes_of_ten_times_the_directories_peak_alike(tmp_path: Path) -> None:
    env = {**os.environ, "WH_HOME": str(tmp_path / "served")}
    env.pop("WH_URL", None)
    server = wh_serve(env, "--keep", "2", "--executor", "none")
    try:
        url = listening(server, keep=2)[0]
        admin = subprocess.run(
            [WH, "user", "add", "admin", "--admin"], env=env, capture_output=True, text=True
        )
        assert admin.returncode == 0, admin.stderr
        with RemoteWarehouse(url, admin.stdout.strip()) as remote:
            small = _peak_sending(remote, SMALL, tmp_path)
            large = _peak_sending(remote, LARGE, tmp_path)
            assert [(a.user, a.writes) for a in remote.accounting()] == [("admin", SMALL + LARGE)]
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
        if server.stdout:
            server.stdout.close()
    assert large - small < GROWTH, (small >> 10, large >> 10)


def test_one_shot_block_writes_are_kept_to_be_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [(hashlib.md5(b"%d" % i).hexdigest(), i + 1, i % 2 == 0) for i in range(20_000)]
    scratch = tmp_path / "scratch"  # the system's temporary directory, here
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv(HELD_ENTRIES_VAR, HELD)
    with _again(iter(rows)) as again:
        # Read back (from a scratch file past the rows held) each time alike.
        assert list(again) == rows
        assert list(again) == rows
        assert open_under(scratch)
    # Its scratch file is closed at the end, not when the object is collected.
    assert not open_under(scratch)
    # Re-iterable rows are sent as they are.
    with _again(rows) as same:
        assert same is rows
