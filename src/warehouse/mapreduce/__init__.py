"""MapReduce compiled into job steps (``builtin:mapreduce``, docs/mapreduce.md).

``run(MapReduceSpec(...))`` does one step's part; ``current_file()`` tells a
Python mapper which input file its record came from.
"""

from __future__ import annotations

from warehouse.mapreduce.run import current_file, run
from warehouse.mapreduce.spec import MapReduceSpec

__all__ = ["MapReduceSpec", "current_file", "run"]
