"""``POST /api/v1/sql``: read-only SQL over the catalog, for admins (``wh sql``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from warehouse.catalogsql import MAX_QUERY, MAX_ROWS, run_readonly
from warehouse.server.controller.auth import Admin, state_of

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", tags=["users and cluster"])


class SqlQuery(BaseModel):
    query: str = Field(max_length=MAX_QUERY, description="One SELECT statement.")
    limit: int = Field(default=10_000, ge=1, le=MAX_ROWS, description="At most this many rows.")


class SqlOut(BaseModel):
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = Field(description="The query had more rows than the limit.")


@router.post("/sql", response_model=SqlOut)
async def sql(body: SqlQuery, user: Admin, request: Request) -> SqlOut:
    """Run one SELECT over the catalog in a read-only transaction, calling only
    the allowed functions (docs/sql.md)."""
    engine = state_of(request).engine
    result = await run_in_threadpool(run_readonly, engine, body.query, limit=body.limit)
    return SqlOut(columns=result.columns, rows=result.rows, truncated=result.truncated)
