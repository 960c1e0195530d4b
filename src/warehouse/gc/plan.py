"""What to trash and what to pull, decided from the mark and the indexes: no I/O.

The inputs are the set of marked block hashes, each keep server's index
(``md5``, ``size``, ``mtime_ns`` per copy) and the clock; the outputs are
per-server trash and pull lists. The caller (embedded or controller) reads
the indexes and carries the lists out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from warehouse.remote.probe import Service, probe_order

__all__ = [
    "BalancePlan",
    "Copy",
    "PullEntry",
    "SweepPlan",
    "holders",
    "plan_balance",
    "plan_sweep",
]


@dataclass(frozen=True, slots=True)
class Copy:
    """One stored copy of a block, as an index listed it."""

    md5: str
    size: int
    mtime_ns: int

    @property
    def key(self) -> str:
        return f"{self.md5}+{self.size}"


@dataclass(frozen=True, slots=True)
class PullEntry:
    key: str  # md5+size
    sources: tuple[str, ...]  # URLs of servers holding a copy, best first


@dataclass
class SweepPlan:
    trash: dict[str, list[Copy]] = field(default_factory=dict)  # server id -> copies
    kept: int = 0  # copies of marked blocks
    young: int = 0  # copies of unmarked blocks younger than the TTL

    @property
    def trashed(self) -> int:
        return sum(len(v) for v in self.trash.values())


@dataclass
class BalancePlan:
    pull: dict[str, list[PullEntry]] = field(default_factory=dict)  # target id -> entries
    trash: dict[str, list[Copy]] = field(default_factory=dict)  # extra copies
    missing: list[str] = field(default_factory=list)  # marked, no copy anywhere
    under: list[str] = field(default_factory=list)  # marked, fewer copies than wanted
    kept: int = 0

    @property
    def pulled(self) -> int:
        return sum(len(v) for v in self.pull.values())

    @property
    def trashed(self) -> int:
        return sum(len(v) for v in self.trash.values())


def _old(copy: Copy, now_ns: int, ttl: float) -> bool:
    return copy.mtime_ns < now_ns - int(ttl * 1e9)


def plan_sweep(
    marked: set[str], indexes: Mapping[str, Sequence[Copy]], now: float, ttl: float
) -> SweepPlan:
    """Trash every copy of an unmarked block whose mtime is older than ``ttl`` seconds."""
    plan = SweepPlan()
    now_ns = int(now * 1e9)
    for server, copies in indexes.items():
        doomed = plan.trash.setdefault(server, [])
        for c in copies:
            if c.md5 in marked:
                plan.kept += 1
            elif _old(c, now_ns, ttl):
                doomed.append(c)
            else:
                plan.young += 1
    return plan


def holders(indexes: Mapping[str, Sequence[Copy]]) -> dict[str, dict[str, Copy]]:
    """md5 -> {server id: copy} (one copy per server: the newest)."""
    out: dict[str, dict[str, Copy]] = {}
    for server, copies in indexes.items():
        for c in copies:
            have = out.setdefault(c.md5, {})
            if server not in have or have[server].mtime_ns < c.mtime_ns:
                have[server] = c
    return out


def plan_balance(
    marked: set[str],
    indexes: Mapping[str, Sequence[Copy]],
    services: Sequence[Service],
    wanted: int,
    now: float,
    ttl: float,
    *,
    away: Collection[str] = (),
) -> BalancePlan:
    """Pull under-replicated blocks onto the next servers in their probe order
    (but none of the ids ``away``); trash copies beyond ``wanted`` (those ranked
    lowest, older than ``ttl``).

    Blocks that are neither marked nor younger than the TTL are garbage and
    left alone. Extra copies are trashed only when ``wanted`` copies are
    listed by this run's indexes, and never in the run that pulls the block.
    """
    plan = BalancePlan()
    wanted = max(1, min(wanted, len(services)))
    now_ns = int(now * 1e9)
    by_block = holders(indexes)
    for md5 in marked - by_block.keys():
        plan.missing.append(md5)
    for md5, have in by_block.items():
        if md5 not in marked and all(_old(c, now_ns, ttl) for c in have.values()):
            continue  # garbage: for gc, not balance
        order = probe_order(md5, services)
        n = len(have)
        if n < wanted:
            if md5 in marked:
                plan.under.append(md5)
            key = next(iter(have.values())).key
            sources = tuple(s.url for s in order if s.id in have)
            targets = [s for s in order if s.id not in have and s.id not in away]
            for target in targets[: wanted - n]:
                plan.pull.setdefault(target.id, []).append(PullEntry(key, sources))
            continue
        ranked = [s.id for s in order if s.id in have]
        plan.kept += wanted
        for sid in ranked[wanted:]:
            if _old(have[sid], now_ns, ttl):
                plan.trash.setdefault(sid, []).append(have[sid])
            else:
                plan.kept += 1
    plan.missing.sort()
    plan.under.sort()
    return plan
