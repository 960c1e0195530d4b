"""wordcount: a thin use of builtin:mapreduce (warehouse.mapreduce).

The words are the whitespace-separated words of each line (UTF-8, invalid
bytes read as U+FFFD); ``partitions`` (parameter, default 4) reduce steps
each write ``part-NNNN.tsv``: ``word<TAB>count`` lines, words in code point
order. A word goes to partition ``int(md5(word)[:8], 16) % partitions``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from warehouse import step
from warehouse.mapreduce import MapReduceSpec, run
from warehouse.mapreduce.spec import MAX_REDUCERS


def words(line: str) -> Iterator[tuple[str, int]]:
    # Lines reach us with undecodable bytes kept (surrogateescape): read them as U+FFFD.
    for word in line.encode("utf-8", "surrogateescape").decode("utf-8", "replace").split():
        yield word, 1


def add(word: str, counts: Iterable[str]) -> Iterator[tuple[str, int]]:
    yield word, sum(int(n) for n in counts)


def total(word: str, counts: Iterable[str]) -> Iterator[str]:
    yield f"{word}\t{sum(int(n) for n in counts)}"


def partitions_of(params: Mapping[str, Any]) -> int:
    """The ``partitions`` parameter: a count (``--param`` gives it as digits)."""
    value = params.get("partitions", 4)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    # bool is an int to Python, and int() would cut 2.5 or fail on "x" with a traceback.
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_REDUCERS:
        raise SystemExit(f"wordcount: partitions must be 1 to {MAX_REDUCERS}, not {value!r}")
    return value


def main() -> None:
    partitions = partitions_of(step.params())
    names = "part-{:04d}.tsv"
    run(MapReduceSpec(words, total, add, reducers=partitions, output_name=names))


if __name__ == "__main__":
    main()
