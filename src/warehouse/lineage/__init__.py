"""Lineage (DESIGN §5.7): what made a collection, back to the puts, and what
was made from it.

``values`` holds the graph as plain records (and its JSON), ``build`` walks
the catalog's facts (pure), ``reads`` asks the catalog for them, ``trace``
answers for an embedded warehouse or a controller alike, ``render`` writes
the graph as text or Graphviz, ``finding`` lists collections by who stored
them and what they are (``wh collection ls``). See docs/lineage.md.

Names load on first use: a client of a controller needs no database library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from warehouse.lazy import lazy_names

if TYPE_CHECKING:
    from warehouse.lineage.reads import collection_kinds
    from warehouse.lineage.render import to_dot, to_text
    from warehouse.lineage.tracing import lineage, trace
    from warehouse.lineage.values import Edge, Lineage, LineageCollection, LineageJob, Part

# Where each public name lives (kept equal to __all__; a test checks).
_WHERE = {
    "collection_kinds": "reads",
    "to_dot": "render",
    "to_text": "render",
    "lineage": "tracing",
    "trace": "tracing",
    "Edge": "values",
    "Lineage": "values",
    "LineageCollection": "values",
    "LineageJob": "values",
    "Part": "values",
}

__all__ = [
    "Edge",
    "Lineage",
    "LineageCollection",
    "LineageJob",
    "Part",
    "collection_kinds",
    "lineage",
    "to_dot",
    "to_text",
    "trace",
]


__getattr__ = lazy_names(__name__, _WHERE)
