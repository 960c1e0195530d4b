"""What a gc, balance or fsck run found and did, for people and for scripts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GcReport"]


@dataclass
class GcReport:
    action: str  # gc, balance or fsck
    dry_run: bool = False
    roots: int = 0  # root collections read
    marked: int = 0  # distinct blocks they reference
    servers: int = 0  # keep servers (1 for the embedded volume)
    copies: int = 0  # copies the indexes listed
    trashed: int = 0  # copies trashed (or, dry run / remote, put on trash lists)
    pulled: int = 0  # copies asked for on pull lists
    kept: int = 0  # copies of referenced blocks left in place
    young: int = 0  # copies of unreferenced blocks kept: younger than the TTL
    emptied: int = 0  # trashed copies removed after their lifetime (embedded)
    checked: int = 0  # fsck: copies read and verified
    collected: int = 0  # gc: collections newly recorded as collected
    missing: list[str] = field(default_factory=list)  # referenced, no copy anywhere
    under_replicated: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)  # "md5 on where"
    unreadable: list[str] = field(default_factory=list)  # root manifests fsck could not read
    # fsck: keep servers given up on (down, hung, refusing), each with why.
    unchecked: list[str] = field(default_factory=list)
    collections: dict[str, list[str]] = field(default_factory=dict)  # block md5 -> PDHs
    actions: list[str] = field(default_factory=list)  # one line per trash/pull
    # fsck: what a balance run would do about each problem block, one line each.
    repairs: list[str] = field(default_factory=list)
    message: str = ""

    @property
    def clean(self) -> bool:
        return not (
            self.missing
            or self.under_replicated
            or self.corrupt
            or self.unreadable
            or self.unchecked
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GcReport:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def problems(self) -> set[str]:
        """Hashes of missing, under-replicated and corrupt blocks."""
        return set(self.missing) | set(self.under_replicated) | {c.split()[0] for c in self.corrupt}

    def attach_collections(self, members: dict[str, set[str]]) -> None:
        """Fill ``collections``: for each problem block, the roots that list it."""
        problems = self.problems()
        found: dict[str, list[str]] = {}
        for pdh, blocks in members.items():
            for md5 in blocks & problems:
                found.setdefault(md5, []).append(pdh)
        self.collections = {k: sorted(v) for k, v in sorted(found.items())}
