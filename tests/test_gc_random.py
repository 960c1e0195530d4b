"""Writers put, name and rename collections while GC runs again and again.

At the end: every collection a name points to, or pointed to within the
history retention, reads back completely; blocks nothing references, older
than the TTL, are gone once the trash lifetime has passed; a block written
just before a run, young and unnamed, survives it.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gc_helpers import gc_cluster, remote_gc
from warehouse.blocks.volume import LocalVolume
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import ConflictError, NotFoundError, WarehouseError
from warehouse.gc import save_settings
from warehouse.gc.local import local_gc
from warehouse.remote.warehouse import RemoteWarehouse

NAMES = ["alpha", "beta", "gamma"]
WRITERS, ROUNDS = 3, 6


def scenario(
    tmp: Path,
    open_wh: Callable[[], Any],
    gc_once: Callable[[], None],
    volumes: list[LocalVolume],
    ttl: float,
    retention: float,
) -> set[str]:
    """Run the scenario; return the garbage blocks (now trashed)."""
    contents: dict[str, dict[str, bytes]] = {}
    blocks: dict[str, set[str]] = {}
    errors: list[BaseException] = []
    stop = threading.Event()
    runs = [0]

    def writer(k: int) -> None:
        rnd = random.Random(k)
        try:
            with open_wh() as w:
                for i in range(ROUNDS):
                    d = tmp / f"w{k}-{i}"
                    d.mkdir()
                    files = {f"f{j}": os.urandom(rnd.randint(1, 5000)) for j in range(3)}
                    for name, data in files.items():
                        (d / name).write_bytes(data)
                    put = w.put([d])
                    contents[put.pdh] = files
                    blocks[put.pdh] = {b.md5 for b in put.write.manifest.blocks()}
                    blocks[put.pdh].add(put.pdh.split("+")[0])
                    if rnd.random() < 0.3:
                        continue  # never named: garbage once older than the TTL
                    name = rnd.choice(NAMES)
                    while True:  # compare-and-swap, retried on a lost race
                        try:
                            current: str | None = w.get_name(name).pdh
                        except NotFoundError:
                            current = None
                        try:
                            w.set_name(name, put.pdh, expect=current)
                            break
                        except ConflictError:
                            continue
        except BaseException as e:
            errors.append(e)

    def collector() -> None:
        while not stop.is_set():
            try:
                gc_once()
                runs[0] += 1
            except WarehouseError as e:
                if "refusing" not in str(e):  # empty catalog / nothing marked yet
                    errors.append(e)
                    return

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(WRITERS)]
    gc_thread = threading.Thread(target=collector)
    gc_thread.start()
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60  # the writers take a few seconds
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stop.set()
    gc_thread.join(60)
    # A writer still busy (a lost compare-and-swap retried for ever, a lock
    # never given back) would leave its puts out of what is checked below.
    assert not [t for t in threads if t.is_alive()], "a writer did not end within 60 s"
    assert not gc_thread.is_alive(), "the collector did not stop within 60 s"
    assert not errors, errors
    assert runs[0] >= 2, "GC ran while the writers wrote"

    # A block written just before a run, young and unnamed, survives it.
    with open_wh() as w:
        young = w.store.put(os.urandom(300)).locator.md5
        w.store.flush()
    gc_once()
    assert any(v.stat(young) for v in volumes)

    time.sleep(ttl + 0.5)  # everything written is now older than the TTL
    started = time.time()
    gc_once()
    ended = time.time()
    # The run keeps history from (its clock) - retention, its clock being
    # somewhere between started and ended: a change after ended - retention
    # is surely kept, one before started - retention surely dropped.
    with open_wh() as w:
        current = {w.get_name(n).pdh for n in NAMES if _named(w, n)}
        log = [c for n in NAMES if _named(w, n) for c in w.name_log(n)]

        def pointed_to_since(cutoff: float) -> set[str]:
            return current | {p for c in log if c.at >= cutoff for p in (c.old_pdh, c.new_pdh) if p}

        live = pointed_to_since(ended - retention)
        for pdh in live:
            r = w.reader(pdh)
            for name, data in contents[pdh].items():
                assert r.read_file(name) == data
    garbage = set(contents) - pointed_to_since(started - retention)
    assert garbage, "some collections became garbage"
    referenced = set().union(*(blocks[p] for p in set(contents) - garbage))
    dead = set().union(*(blocks[p] for p in garbage)) - referenced
    for md5 in dead:
        assert not any(v.stat(md5) for v in volumes), f"garbage block {md5} is still stored"
    return dead


def _named(w: Any, name: str) -> bool:
    try:
        w.get_name(name)
        return True
    except NotFoundError:
        return False


def _trashed(volumes: list[LocalVolume], dead: set[str]) -> list[Path]:
    return [p for v in volumes for md5 in dead for p in v.root.glob(f"{md5[:3]}/{md5}.trash.*")]


def _no_trash(volumes: list[LocalVolume], dead: set[str], wait: float = 0.0) -> None:
    """No trashed copy of ``dead`` is left (waiting up to ``wait`` s for a cleaner)."""
    deadline = time.monotonic() + wait
    while _trashed(volumes, dead) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _trashed(volumes, dead)


def test_random_embedded(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ttl, retention, lifetime = 1.5, 2.0, 0.5
    with EmbeddedWarehouse(home) as wh:
        save_settings(
            wh.engine,
            {"signature_ttl": ttl, "history_retention": retention, "trash_lifetime": lifetime},
        )

        def gc_once() -> None:
            local_gc(wh.engine, wh.volume)

        dead = scenario(
            tmp_path, lambda: EmbeddedWarehouse(home), gc_once, [wh.volume], ttl, retention
        )
        time.sleep(lifetime + 0.1)
        gc_once()  # empties the trash past its lifetime
        _no_trash([wh.volume], dead)


def test_random_remote(tmp_path: Path) -> None:
    ttl, retention, lifetime = 4, 5.0, 1.0
    with gc_cluster(tmp_path / "c", count=3, ttl=ttl, lifetime=lifetime) as (pool, ctl):
        save_settings(ctl.state.engine, {"history_retention": retention})
        token = ctl.user("writer")

        def gc_once() -> None:
            report = remote_gc(ctl)
            if report["trashed"]:
                assert report["marked"]

        volumes = [LocalVolume(s.volume) for s in pool.servers]
        dead = scenario(
            tmp_path, lambda: RemoteWarehouse(ctl.url, token), gc_once, volumes, ttl, retention
        )
        time.sleep(lifetime + 0.1)
        assert _trashed(volumes, dead), "trashed, not yet removed"
        pool.restart_all()  # keepd empties expired trash at start-up (and every 5 min)
        _no_trash(volumes, dead, wait=10)


pytestmark = pytest.mark.timeout(120)
