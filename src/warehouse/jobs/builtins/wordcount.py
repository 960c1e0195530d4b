"""wordcount: a small MapReduce over levels.

Step 0 queues one level-1 *map* step per input stream and ``partitions``
(parameter, default 4) level-2 *reduce* steps. A map step counts the
whitespace-separated words (UTF-8) of its stream's files and passes, as
intermediate data, one ``pNNNN.tsv`` per partition (a word goes to partition
``int(md5(word)[:8], 16) % partitions``). Reduce step p sums partition p of
every map step and writes ``part-NNNN.tsv`` (``word<TAB>count`` lines,
words in code point order) into the output's root stream.
"""

from __future__ import annotations

import hashlib
from collections import Counter

from warehouse import step
from warehouse.collection.reader import CollectionReader


def _partition(word: str, partitions: int) -> int:
    return int(hashlib.md5(word.encode()).hexdigest()[:8], 16) % partitions


def main() -> None:
    partitions = int(step.params().get("partitions", 4))
    if partitions < 1:
        raise SystemExit("wordcount: partitions must be at least 1")
    if step.level() == 0:
        names = list(dict.fromkeys(s.name for s in step.input_manifest().streams))
        if names:
            step.queue(1, *names)
        step.queue(2, *(str(p) for p in range(partitions)))
    elif step.level() == 1:
        counts = Counter[str]()
        reader = step.reader()
        for entry in step.stream_files(step.step_input()):
            counts.update(reader.read_file(entry.path).decode("utf-8", "replace").split())
        parts: list[list[str]] = [[] for _ in range(partitions)]
        for word, n in sorted(counts.items()):
            parts[_partition(word, partitions)].append(f"{word}\t{n}\n")
        out = step.StreamWriter(".")
        for p, lines in enumerate(parts):
            out.add_file(f"p{p:04d}.tsv", ["".join(lines).encode()])
        step.intermediate(out.finish())
    else:
        p = int(step.step_input())
        total = Counter[str]()
        store = step.warehouse().store
        for _, fragment in step.intermediates(1):
            text = CollectionReader(store, fragment).read_file(f"p{p:04d}.tsv").decode()
            for line in text.splitlines():
                word, count = line.rsplit("\t", 1)
                total[word] += int(count)
        out = step.StreamWriter(".")
        body = "".join(f"{w}\t{n}\n" for w, n in sorted(total.items()))
        out.add_file(f"part-{p:04d}.tsv", [body.encode()])
        step.output(out.finish())


if __name__ == "__main__":
    main()
