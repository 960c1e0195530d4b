"""table: (re)partition CSV or Parquet files into a table (docs/query.md); made by
``wh table create``."""

from __future__ import annotations

from warehouse import step
from warehouse.query.steps import table_step

if __name__ == "__main__":
    table_step()
    step.done()  # all reported and durable: no interpreter teardown
