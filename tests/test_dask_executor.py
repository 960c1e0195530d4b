"""The Dask executor given a wrong scheduler address: refused soon, in one line."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import Runner
from jobs_helpers import dask_cluster  # noqa: F401  (a fixture)
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError, WarehouseError
from warehouse.jobs.daskexec import check_scheduler


@pytest.fixture
def http_port() -> Iterator[int]:
    """A real HTTP server: it accepts Dask's connection and never answers in its protocol."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never reads them."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        yield s.getsockname()[1]


@pytest.mark.parametrize("address", ["nonsense://x", "tcp://[::", "host:port", "tcp://"])
def test_a_malformed_address_is_a_usage_error(address: str) -> None:
    with pytest.raises(UsageError, match="bad Dask scheduler address"):
        check_scheduler(address, timeout=1)


def test_a_port_that_does_not_speak_dask_is_refused_not_waited_on(
    http_port: int, silent_port: int
) -> None:
    for port in (http_port, silent_port):
        with pytest.raises(WarehouseError, match="no Dask scheduler answers"):
            check_scheduler(f"tcp://127.0.0.1:{port}", timeout=1)


def test_a_worker_address_is_not_a_scheduler(dask_cluster: str) -> None:  # noqa: F811
    from distributed import Client

    check_scheduler(dask_cluster)  # the scheduler itself passes
    with Client(dask_cluster, set_as_default=False) as c:
        worker = next(iter(c.scheduler_info()["workers"]))
    with pytest.raises(WarehouseError, match=r"not a Dask scheduler .*Worker"):
        check_scheduler(worker, timeout=5)


def test_submit_with_a_bad_scheduler_says_so_in_one_line(
    wh: EmbeddedWarehouse, run: Runner, tmp_path: Path
) -> None:
    (tmp_path / "f.txt").write_text("some words\n")
    key = wh.put([tmp_path / "f.txt"]).pdh
    args = ["job", "submit", "builtin:wordcount", "--input", key, "--no-reuse", "--wait"]
    result = run(*args, "--executor", "dask", "--dask-scheduler", "nonsense://x", code=2)
    assert result.stderr.startswith("Error: bad Dask scheduler address"), result.stderr
    assert "Traceback" not in result.output + result.stderr
