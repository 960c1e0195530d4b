"""mapreduce: a MapReduce over the input collection (docs/mapreduce.md).

Parameters: ``mapper``, ``reducer``, optional ``combiner`` (Python
``MODULE:FUNCTION`` or a command line), ``reducers``, ``input_format``
(lines, fasta, fastq, whole-file), ``split_size``, ``sort_memory``,
``partitioner`` (hash, or range: the outputs laid end to end sorted), and
``code`` (the collection or git revision holding them, pinned at
submission).
"""

from __future__ import annotations

import sys

from warehouse import step
from warehouse.errors import UsageError
from warehouse.mapreduce import MapReduceSpec, run


def main() -> None:
    try:
        spec = MapReduceSpec.from_params(step.params())
    except UsageError as e:
        print(e, file=sys.stderr)
        raise SystemExit(1) from None
    run(spec)


if __name__ == "__main__":
    main()
