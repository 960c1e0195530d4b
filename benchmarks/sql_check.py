"""The PostgreSQL call check of `wh sql` (``catalogsql._check_calls``) on
query shapes near the 64 KiB limit: sqlglot's own PostgreSQL dialect against
the one the check now parses with, alternated in one process.

    python benchmarks/sql_check.py [ROUNDS]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import sqlglot

from warehouse import catalogsql

SHAPES: dict[str, str] = {
    "a[1]x400": "SELECT a" + "[1]" * 400,
    "a[1:2]x400": "SELECT a" + "[1:2]" * 400,
    "(a[1]x30)x600": "SELECT " + ",".join(["a" + "[1]" * 30] * 600),
    "(a[1]x60)x300": "SELECT " + ",".join(["a" + "[1]" * 60] * 300),
    "a[1+1+...] 60 KB": "SELECT a[" + "+".join(["1"] * 30000) + "]",
    "(1+1+...) 60 KB": "SELECT (" + "+".join(["1"] * 30000) + ")",
    "a=1 AND ... 64 KB": "SELECT 1 WHERE " + " AND ".join(["a=1"] * 8000),
}


def best_of(parses: list[Callable[[str], object]], query: str, rounds: int) -> list[float]:
    """The best time of each parse over ``rounds`` rounds, the parses alternated."""
    times: list[list[float]] = [[] for _ in parses]
    for _ in range(rounds):
        for parse, took in zip(parses, times, strict=True):
            start = time.perf_counter()
            parse(query)
            took.append(time.perf_counter() - start)
    return [min(t) for t in times]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    before = lambda q: sqlglot.parse(q, read="postgres")  # noqa: E731
    after = lambda q: sqlglot.parse(q, read=catalogsql._reader())  # noqa: E731
    after("SELECT 1")
    print(f"{'shape':20} {'chars':>6} {'postgres':>9} {'checked':>9}")
    for name, query in SHAPES.items():
        old, new = best_of([before, after], query, rounds)
        print(f"{name:20} {len(query):6} {old:8.3f}s {new:8.3f}s", flush=True)


if __name__ == "__main__":
    main()
