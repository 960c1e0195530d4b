"""query: run a compiled SQL plan over tables (docs/query.md); made by ``wh query``."""

from __future__ import annotations

from warehouse import step
from warehouse.query.steps import query_step

if __name__ == "__main__":
    query_step()
    step.done()  # all reported and durable: no interpreter teardown
