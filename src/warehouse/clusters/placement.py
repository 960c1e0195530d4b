"""Placement (DESIGN §5.4): which workers a step should prefer, given where its
input blocks sit, and how much of its input sat on the host that ran it.

Pure functions, no I/O: the caller supplies block locations (from the probe
order, or keep server indexes), the host map and the step's host. Hosts are
labels from the controller's host map, not resolved names, so one machine can
play several hosts in a test.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from warehouse.blocks import Locator
from warehouse.errors import UsageError
from warehouse.remote.probe import Service, probe_order

__all__ = [
    "HostMap",
    "LabelledWorkers",
    "block_servers",
    "bytes_by_host",
    "local_fraction",
    "parse_host_map",
    "preferred_workers",
    "slurm_nodes",
    "slurm_unpin",
]

_LABEL = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class HostMap:
    """Keep server URL -> host label, and worker (Dask address or name, Slurm
    node) -> host label. Empty maps: no placement."""

    keep: Mapping[str, str] = field(default_factory=dict)
    workers: Mapping[str, str] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return bool(self.keep) and bool(self.workers)


def parse_host_map(text: str, where: str = "host map") -> HostMap:
    """``[keep]`` and ``[workers]`` tables of ``"name" = "label"`` (TOML)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}: not TOML: {e}") from None
    unknown = sorted(set(data) - {"keep", "workers"})
    if unknown:
        raise UsageError(f"{where}: unknown table {unknown[0]!r} (want [keep] and [workers])")
    tables: dict[str, dict[str, str]] = {}
    for part in ("keep", "workers"):
        table = data.get(part, {})
        if not isinstance(table, dict) or len(table) > MAX_ENTRIES:
            raise UsageError(f"{where}: [{part}] must be a table of at most {MAX_ENTRIES} entries")
        for name, label in table.items():
            if not isinstance(label, str) or _LABEL.fullmatch(label) is None:
                raise UsageError(
                    f"{where}: [{part}] {name!r}: the host label must be 1 to 64 letters, "
                    "digits, '.', '_' or '-'"
                )
        tables[part] = {k.rstrip("/") if part == "keep" else k: v for k, v in table.items()}
    return HostMap(tables["keep"], tables["workers"])


def block_servers(md5: str, services: Sequence[Service], copies: int) -> list[Service]:
    """Where a block's copies are expected: its first ``copies`` servers in probe order."""
    return probe_order(md5, services)[: max(copies, 1)]


def bytes_by_host(
    blocks: Iterable[tuple[Locator, Iterable[str]]], keep_hosts: Mapping[str, str]
) -> dict[str, int]:
    """Input bytes each host holds a copy of: (block, URLs of the servers holding
    it) in; a block counts once per host, whatever its copies there."""
    held: dict[str, int] = {}
    for loc, urls in blocks:
        hosts = {keep_hosts[u.rstrip("/")] for u in urls if u.rstrip("/") in keep_hosts}
        for host in hosts:
            held[host] = held.get(host, 0) + loc.size
    return held


def preferred_workers(held: Mapping[str, int], worker_hosts: Mapping[str, str]) -> tuple[str, ...]:
    """The workers on the host that holds the most input bytes among hosts that
    run workers (ties: the label first in name order); () when no such host
    holds any of it, so the executor places the step as it would anyway."""
    with_workers = {h for h in worker_hosts.values() if held.get(h, 0) > 0}
    if not with_workers:
        return ()
    best = min(with_workers, key=lambda h: (-held[h], h))
    return tuple(sorted(w for w, h in worker_hosts.items() if h == best))


class _HeldInput(Protocol):
    @property
    def held(self) -> tuple[tuple[str, int], ...]: ...


class LabelledWorkers:
    """Placement for an executor whose workers carry host labels (a mixin of
    the Dask and Slurm executors): ``worker_hosts`` maps a worker (a Dask
    address, a Slurm node) to its host label."""

    worker_hosts: dict[str, str]

    def prefer(self, launch: _HeldInput) -> tuple[str, ...]:
        """The workers on the host holding most of the step's input, if any."""
        if not self.worker_hosts or not launch.held:
            return ()
        return preferred_workers(dict(launch.held), self.worker_hosts)

    def host_label(self, worker: str) -> str | None:
        """The host label of the worker that ran a step."""
        return self.worker_hosts.get(worker)


def local_fraction(held: Mapping[str, int], total: int, host: str | None) -> float | None:
    """The share of a step's ``total`` input bytes held on ``host`` (None: unknown)."""
    if host is None or total <= 0:
        return None
    return min(held.get(host, 0), total) / total


def slurm_nodes(
    held: Mapping[str, int],
    node_hosts: Mapping[str, str],
    idle_cpus: Mapping[str, int],
    cpus: int,
) -> tuple[str, ...]:
    """The Slurm nodes to ask for (``--nodelist``) for a batch needing ``cpus``:
    the nodes of the host holding most of its input that are up with that many
    CPUs idle now, the idlest first (``idle_cpus``: nodes that take jobs only). () when none is:
    Slurm then places the batch anywhere, so a busy or down node never holds a
    step back (``--nodelist`` is a requirement, not a wish; Slurm's
    ``--prefer`` names node features, not nodes)."""
    ready = [n for n in preferred_workers(held, node_hosts) if idle_cpus.get(n, 0) >= max(cpus, 1)]
    return tuple(sorted(ready, key=lambda n: (-idle_cpus[n], n)))  # the idlest first


def slurm_unpin(
    pinned: Mapping[str, float], states: Mapping[str, str], now: float, grace: float
) -> list[str]:
    """Pinned Slurm jobs (id -> submission time) still pending ``grace`` seconds
    after submission: their node list is to be lifted so they run elsewhere."""
    return sorted(j for j, at in pinned.items() if states.get(j) == "PENDING" and now - at >= grace)
