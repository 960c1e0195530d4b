"""wordcount: a thin use of builtin:mapreduce (warehouse.mapreduce).

The words are the whitespace-separated words of each line (UTF-8, invalid
bytes read as U+FFFD); ``partitions`` (parameter, default 4) reduce steps
each write ``part-NNNN.tsv``: ``word<TAB>count`` lines, words in code point
order. A word goes to partition ``int(md5(word)[:8], 16) % partitions``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from warehouse import step
from warehouse.mapreduce import MapReduceSpec, run


def words(line: str) -> Iterator[tuple[str, int]]:
    # Lines reach us with undecodable bytes kept (surrogateescape): read them as U+FFFD.
    for word in line.encode("utf-8", "surrogateescape").decode("utf-8", "replace").split():
        yield word, 1


def add(word: str, counts: Iterable[str]) -> Iterator[tuple[str, int]]:
    yield word, sum(int(n) for n in counts)


def total(word: str, counts: Iterable[str]) -> Iterator[str]:
    yield f"{word}\t{sum(int(n) for n in counts)}"


def main() -> None:
    partitions = int(step.params().get("partitions", 4))
    if partitions < 1:
        raise SystemExit("wordcount: partitions must be at least 1")
    names = "part-{:04d}.tsv"
    run(MapReduceSpec(words, total, add, reducers=partitions, output_name=names))


if __name__ == "__main__":
    main()
