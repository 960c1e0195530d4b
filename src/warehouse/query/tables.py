"""Tables: a collection of partition files plus ``_table.json`` (DESIGN §5.6).

``_table.json`` is ``{"format": "parquet"|"csv", "partitioned_by": COL or
null, "partitions": N, "hash": ID, "columns": [[name, type], ...]}``;
partition p is ``part-NNNNN.<format>`` (CSV with a header). Rows go to
partition ``hash(COL) % N`` as DuckDB computes it; ``hash`` names that
function's version, and two tables are co-partitioned only if they agree on
it and on N.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from warehouse.errors import NotFoundError, UsageError
from warehouse.manifest import FileEntry, Manifest

__all__ = ["FORMATS", "META_FILE", "TableMeta", "hash_id", "part_name", "source_files"]

META_FILE = "_table.json"
FORMATS = ("parquet", "csv")
MAX_PARTITIONS = 1024


def hash_id() -> str:
    import duckdb

    return f"duckdb-{duckdb.__version__}"


def part_name(p: int, fmt: str) -> str:
    return f"part-{p:05d}.{fmt}"


def source_files(manifest: Manifest, under: str) -> tuple[str, list[FileEntry]]:
    """The format and the ``.parquet`` or ``.csv`` files of a collection
    (under a path) that ``wh table create`` reads."""
    prefix = under.strip("/")
    found = [
        e
        for path, e in sorted(manifest.files().items())
        if (not prefix or path == prefix or path.startswith(prefix + "/"))
        and path.rsplit(".", 1)[-1] in ("parquet", "csv")
    ]
    if not found:
        raise NotFoundError(f"table: no .parquet or .csv file under {under or 'the collection'}")
    kinds = {e.path.rsplit(".", 1)[-1] for e in found}
    if len(kinds) > 1:
        raise UsageError("table: the files are of more than one format")
    return kinds.pop(), found


@dataclass(frozen=True)
class TableMeta:
    format: str
    partitioned_by: str | None
    partitions: int
    hash: str
    columns: list[tuple[str, str]] = field(default_factory=list)
    size: int = 0  # bytes of its partition files (not stored: taken from the manifest)

    def to_json(self) -> str:
        body = {
            "format": self.format,
            "partitioned_by": self.partitioned_by,
            "partitions": self.partitions,
            "hash": self.hash,
            "columns": [list(c) for c in self.columns],
        }
        return json.dumps(body, sort_keys=True, indent=1) + "\n"

    @classmethod
    def parse(cls, text: str | bytes, size: int = 0) -> TableMeta:
        try:
            body: dict[str, Any] = json.loads(text)
            meta = cls(
                format=str(body["format"]),
                partitioned_by=body.get("partitioned_by"),
                partitions=int(body["partitions"]),
                hash=str(body.get("hash", "")),
                columns=[(str(n), str(t)) for n, t in body.get("columns", [])],
                size=size,
            )
        except (ValueError, KeyError, TypeError) as e:
            raise UsageError(f"{META_FILE} is not a table description: {e}") from None
        if meta.format not in FORMATS or not 1 <= meta.partitions <= MAX_PARTITIONS:
            raise UsageError(f"{META_FILE}: bad format or number of partitions")
        for name, kind in meta.columns:
            # A type goes into SQL as it is (``NULL::TYPE``): DuckDB's type
            # names hold no statement end, string or comment.
            if not name or any(bad in kind for bad in (";", "'", "--", "/*")) or not kind:
                raise UsageError(f"{META_FILE}: bad column {name!r} of type {kind!r}")
        return meta

    def co_partitioned(self, other: TableMeta) -> bool:
        return (
            self.partitioned_by is not None
            and other.partitioned_by is not None
            and self.partitions == other.partitions
            and self.hash == other.hash
        )
