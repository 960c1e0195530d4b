"""Shell completion of names and job ids (click's completion; docs/cli.md).

Completing must never print an error into the user's command line: any
failure (no warehouse yet, a controller down) completes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import click
from click.shell_completion import CompletionItem

__all__ = ["complete_job_ids", "complete_keys", "complete_names"]

# Enough for a screen; a prefix narrows it.
MAX_ITEMS = 200


@contextlib.contextmanager
def _warehouse() -> Iterator[object]:
    import os

    import warehouse
    from warehouse.embedded import default_home

    if not os.environ.get("WH_URL") and not default_home().is_dir():
        # Pressing TAB must not create a warehouse; none there: nothing to complete.
        raise FileNotFoundError(default_home())
    wh = warehouse.open()
    try:
        yield wh
    finally:
        wh.close()


def complete_names(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    try:
        with _warehouse() as wh:
            records = wh.list_names(incomplete)  # type: ignore[attr-defined]
        return [CompletionItem(r.name, help=r.pdh) for r in records[:MAX_ITEMS]]
    except Exception:
        return []


def complete_keys(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """A KEY is a name or PDH, then a path: names are completed up to the first slash."""
    if "/" in incomplete:
        return []
    return complete_names(ctx, param, incomplete)


def complete_job_ids(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    try:
        from warehouse.jobs.jobsview import jobs_view

        with _warehouse() as wh:
            found = jobs_view(wh).all()
        items = [
            CompletionItem(str(r.id), help=f"{r.state} {r.function}")
            for r in found
            if str(r.id).startswith(incomplete)
        ]
        return items[:MAX_ITEMS]
    except Exception:
        return []
