"""Workflows: DAGs of jobs written as YAML files (DESIGN §5.5).

``spec`` parses and checks a file (pure), ``plan`` decides what to submit
next from the nodes' states (pure), ``combine`` makes combined collections
from manifest text, ``runstart`` checks a file and records a run (or finds
it again), ``driver`` carries a run out against the job system (through
``runhost``, what a run needs of a warehouse), ``runstore`` keeps runs,
nodes and combined collections in the catalog.

Names load on first use, as in ``warehouse.jobs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from warehouse.lazy import lazy_names

if TYPE_CHECKING:
    from warehouse.workflows.runrecords import CollectionPart, NodeRecord, RunRecord, RunWithNodes
    from warehouse.workflows.runstore import (
        combined_of,
        get_run,
        get_run_with_nodes,
        list_nodes,
        list_runs,
        parts_of,
        run_view,
        runs_of_job,
    )

# Where each public name lives (kept equal to __all__).
_WHERE = {
    "combined_of": "runstore",
    "get_run": "runstore",
    "get_run_with_nodes": "runstore",
    "list_nodes": "runstore",
    "list_runs": "runstore",
    "parts_of": "runstore",
    "run_view": "runstore",
    "runs_of_job": "runstore",
    "CollectionPart": "runrecords",
    "NodeRecord": "runrecords",
    "RunRecord": "runrecords",
    "RunWithNodes": "runrecords",
}

__all__ = [
    "CollectionPart",
    "NodeRecord",
    "RunRecord",
    "RunWithNodes",
    "combined_of",
    "get_run",
    "get_run_with_nodes",
    "list_nodes",
    "list_runs",
    "parts_of",
    "run_view",
    "runs_of_job",
]

__getattr__ = lazy_names(__name__, _WHERE)
