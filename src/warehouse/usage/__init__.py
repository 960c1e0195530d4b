"""Usage and cost (DESIGN §10): what steps used, summed, and priced.

Pure: no I/O. ``model`` holds a step's measured usage and sums it;
``prices`` reads a price table (TOML text) and prices a sum with it. The
executors measure (``warehouse.jobs.measure``), the catalog keeps the
figures per step, ``warehouse.jobs.usage`` selects them. docs/usage.md.
"""

from warehouse.usage.model import Usage, total
from warehouse.usage.prices import Cost, CostLine, NodeKind, PriceTable, parse_prices, price
from warehouse.usage.select import JobUsage, Selection, parse_since

__all__ = [
    "Cost",
    "CostLine",
    "JobUsage",
    "NodeKind",
    "PriceTable",
    "Selection",
    "Usage",
    "parse_prices",
    "parse_since",
    "price",
    "total",
]
