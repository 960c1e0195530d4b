"""The cluster page's capacity: one file system under several volumes counts once."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from cluster import KeepPool, controller
from test_web import sign_in
from warehouse.web.cluster import VolumeView, capacity
from warehouse.web.pages import human_size


def test_capacity_counts_each_file_system_once_per_host() -> None:
    disk = [VolumeView(f"/srv/v{i}", 40, 100, "8:1") for i in range(4)]
    other = VolumeView("/srv/big", 500, 1000, "8:17")
    unknown = [VolumeView("/x", 1, 2), VolumeView("/y", 1, 2)]  # no device: by path
    got = capacity([("a", v) for v in [*disk, other, *unknown]])
    assert (got.free, got.total, got.volumes, got.filesystems) == (542, 1104, 7, 4)
    # The same device number on another host is another disk.
    two_hosts = capacity([("a", disk[0]), ("b", disk[1])])
    assert (two_hosts.total, two_hosts.filesystems) == (200, 2)


def test_the_cluster_page_counts_a_shared_disk_once(tmp_path: Path, keep_servers: KeepPool) -> None:
    with controller(tmp_path / "c.db", keep_servers) as ctl:
        client = sign_in(ctl.url, ctl.user("bob"))
        try:
            page = client.get("/web/cluster").text
        finally:
            client.close()
    # The test's keep servers all keep their volumes on the one temporary file system.
    assert all(s.volume.stat().st_dev == tmp_path.stat().st_dev for s in keep_servers.servers)
    assert len(keep_servers.servers) >= 2
    total = re.search(
        r'<p class="capacity-total">Capacity: .*? free of (.*?) \((\d+) volumes? on (\d+) file sys',
        page,
    )
    assert total is not None, page
    assert int(total.group(3)) == 1 and int(total.group(2)) >= len(keep_servers.servers)
    assert total.group(1) == human_size(shutil.disk_usage(tmp_path).total)


def test_throughput_buckets_one_value_a_minute_ending_now() -> None:
    from warehouse.web.throughput import bucket

    now = 10_000.0
    events = [(now, 5.0), (now - 59, 1.0), (now - 61, 2.0), (now - 3600, 7.0), (now - 3601, 9.0)]
    got = bucket(events, now)
    assert len(got) == 60 and got[-1] == 6.0 and got[-2] == 2.0 and got[0] == 7.0
    assert sum(got) == 15.0  # the event older than the hour is left out
