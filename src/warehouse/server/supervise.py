"""`wh serve --keep N`: keep servers as supervised children.

Each child has a thread of its own that starts it, waits for it, logs every
exit and starts it again after a backoff (0.5 s doubling to 30 s; back to
0.5 s once a run lasted a minute). The thread that starts a child lives as
long as the child: on Linux the child asks for SIGTERM when that thread's
process dies (``lifeline.die_with_parent``), so a controller killed with
SIGKILL leaves no keep servers behind.

A child keeps its address: the port it last listened on is kept beside its
volume and asked for again (any free port if that one is taken), and its id
is kept on its volume, so a restart replaces its catalog row.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from warehouse.private import private_dir
from warehouse.server.lifeline import PARENT_ENV

__all__ = ["Backoff", "KeepChild"]

log = logging.getLogger("warehouse.serve")
PORT_FILE = "keep-server-port"


@dataclass(frozen=True)
class Backoff:
    first: float = 0.5
    most: float = 30.0
    stable: float = 60.0  # a run this long resets the delay

    def delay(self, failures: int) -> float:
        """Seconds to wait before start number ``failures`` in a row (from 1)."""
        return min(self.most, self.first * 2.0 ** max(0, failures - 1))

    def failures_after(self, failures: int, ran: float) -> int:
        return 1 if ran >= self.stable else failures + 1


def _saved_port(volume: Path) -> int:
    try:
        port = int((volume / PORT_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return 0
    return port if 0 < port < 65536 else 0


def _save_port(volume: Path, url: str) -> int:
    port = url.rsplit(":", 1)[-1]
    if not port.isdigit():
        return 0
    tmp = volume / f".{PORT_FILE}.tmp"
    tmp.write_text(port + "\n")
    os.replace(tmp, volume / PORT_FILE)
    return int(port)


class KeepChild:
    """One supervised ``wh keepd`` on ``volume``, registered with ``controller``."""

    def __init__(
        self,
        number: int,
        volume: Path,
        controller: str,
        token: str,
        announce: Callable[[str], None],
        extra: list[str] | None = None,
        backoff: Backoff = Backoff(),
    ) -> None:
        self.number = number
        self.volume = volume
        self.controller = controller
        self.token = token
        self.announce = announce
        self.extra = list(extra or [])  # more `wh keepd` options (TLS, access log)
        self.backoff = backoff
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = threading.Event()  # the first start announced (or failed)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"keep-{number}", daemon=True)

    def start(self) -> None:
        """Start the supervising thread (``started`` is set once the first start is over)."""
        self._thread.start()

    def _spawn(self, port: int) -> tuple[subprocess.Popen[bytes], str]:
        private_dir(self.volume)
        wh = str(Path(sys.executable).with_name("wh"))
        cmd = [wh, "keepd", "--volume", str(self.volume), "--listen", f"127.0.0.1:{port}"]
        cmd += ["--controller", self.controller, *self.extra]
        env = {**os.environ, "WH_TOKEN": self.token, PARENT_ENV: str(os.getpid())}
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE)
        with self._lock:
            self.proc = proc
        assert proc.stdout is not None
        # "keepd listening on URL", once it is registered; "" if it died first.
        return proc, proc.stdout.readline().decode().strip()

    def _run(self) -> None:
        failures = 0
        port = _saved_port(self.volume)
        while not self._stopping.is_set():
            began = time.monotonic()
            try:
                proc, line = self._spawn(port)
            except OSError as e:  # e.g. no process slots, the volume unwritable
                log.error("keep server %d (%s) cannot start: %s", self.number, self.volume, e)
                self.started.set()
                failures += 1
                self._stopping.wait(self.backoff.delay(failures))
                continue
            if line.startswith("keepd listening on "):
                url = line.removeprefix("keepd listening on ")
                port = _save_port(self.volume, url)
                self.announce(line)
            else:
                port = 0  # perhaps the old port is taken: any port next time
            self.started.set()
            code = proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
            if self._stopping.is_set():
                return
            failures = self.backoff.failures_after(failures, time.monotonic() - began)
            delay = self.backoff.delay(failures)
            log.warning(
                "keep server %d (pid %d, %s) exited with status %d; restarting in %.1f s",
                self.number,
                proc.pid,
                self.volume,
                code,
                delay,
            )
            self._stopping.wait(delay)

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        with self._lock:
            proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._thread.join(timeout)
