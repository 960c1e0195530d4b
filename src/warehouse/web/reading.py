"""What a signed-in user sees on a controller's pages: the API's permission
rules (server.controller.access) applied to the pages, so that in private
mode a page of something the user may not read is "not found", worded as
the API words it, and lists show only what the user reads
(docs/permissions.md). The pages of ``wh web`` (one user's own embedded
warehouse) hide nothing."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from warehouse import catalog
from warehouse.catalog.grants import get_mode, granted_ids, principal_of
from warehouse.catalog.schema import jobs, workflow_runs
from warehouse.jobs.jobrecords import JobRecord
from warehouse.lineage.hiding import function_pdhs, hide
from warehouse.lineage.values import Lineage
from warehouse.permissions import Mode
from warehouse.server.controller import access
from warehouse.web.site import Site

__all__ = [
    "filters",
    "job_filter",
    "lineage_shown",
    "readable_job_ids",
    "readable_jobs",
    "readable_names",
    "readable_pdhs",
    "readable_runs",
    "readable_watches",
    "require_collection",
    "require_job",
    "require_name",
    "require_run",
    "require_watch",
    "run_filter",
    "shown_jobs",
]


def filters(site: Site, user: catalog.User) -> bool:
    """Whether ``user`` may be shown less than everything: a controller's
    non-admin user in private mode (in open mode every user reads all)."""
    return site.kind == "controller" and not user.admin and get_mode(site.engine) is Mode.PRIVATE


def require_collection(site: Site, user: catalog.User, pdh: str) -> None:
    """NotFoundError ``no collection PDH`` unless ``user`` may read ``pdh``."""
    if site.kind == "controller":
        access.require_collection_read(site.engine, user, pdh)


def require_name(site: Site, user: catalog.User, name: str) -> None:
    """NotFoundError ``no name 'NAME'`` for an existing name ``user`` may not read."""
    if site.kind == "controller":
        access.hide_name(site.engine, user, name)


def readable_names(site: Site, user: catalog.User, found: list[str]) -> set[str]:
    if site.kind != "controller":
        return set(found)
    return access.readable_names(site.engine, user, found)


def readable_pdhs(site: Site, user: catalog.User, found: list[str]) -> set[str]:
    if site.kind != "controller":
        return set(found)
    return access.readable_pdhs(site.engine, user, found)


def readable_jobs(site: Site, user: catalog.User, found: Sequence[JobRecord]) -> list[JobRecord]:
    """Those of the jobs ``found`` ``user`` may read, in their order."""
    if site.kind != "controller":
        return list(found)
    shown = access.readable_jobs(site.engine, user, [(j.id, j.submitted_by) for j in found])
    return [j for j in found if j.id in shown]


def readable_job_ids(site: Site, user: catalog.User, found: list[tuple[int, str]]) -> set[int]:
    """Of the jobs ``found`` (id, submitter), the ids ``user`` may read."""
    if site.kind != "controller":
        return {i for i, _ in found}
    return access.readable_jobs(site.engine, user, found)


def require_job(site: Site, user: catalog.User, job: JobRecord) -> None:
    """NotFoundError ``no job ID`` unless ``user`` may read ``job``."""
    if site.kind == "controller":
        access.hide_job(site.engine, user, job.id, job.submitted_by)


def shown_jobs(site: Site, user: catalog.User, found: list[JobRecord]) -> list[JobRecord]:
    """The jobs ``found`` as ``user`` may see them: a function's collection
    it may not read reads ``hidden`` (as in the API)."""
    if site.kind != "controller":
        return found
    return access.shown_jobs(site.engine, user, found)


def require_run(site: Site, user: catalog.User, run_id: int, owner: str) -> None:
    """NotFoundError ``no workflow run ID`` unless ``user`` may read it."""
    if site.kind == "controller":
        access.hide_run(site.engine, user, run_id, owner)


def readable_runs(site: Site, user: catalog.User, found: list[tuple[int, str]]) -> set[int]:
    """Of the runs ``found`` (id, owner), those ``user`` may read."""
    if site.kind != "controller":
        return {i for i, _ in found}
    return access.readable_runs(site.engine, user, found)


def job_filter(site: Site, user: catalog.User) -> list[sa.ColumnElement[bool]]:
    """What a list of jobs is held to in SQL (so its pages stay full): none,
    or the user's own jobs and those granted to it (job:ID)."""
    if not filters(site, user):
        return []
    ids = granted_ids(site.engine, principal_of(site.engine, user.name, admin=False), "job")
    return [sa.or_(jobs.c.submitted_by == user.name, jobs.c.id.in_(ids))]


def run_filter(site: Site, user: catalog.User) -> list[sa.ColumnElement[bool]]:
    """As ``job_filter``, for workflow runs (their owners, run:ID grants)."""
    if not filters(site, user):
        return []
    ids = granted_ids(site.engine, principal_of(site.engine, user.name, admin=False), "run")
    return [sa.or_(workflow_runs.c.owner == user.name, workflow_runs.c.id.in_(ids))]


def lineage_shown(site: Site, user: catalog.User, graph: Lineage) -> Lineage:
    """``graph`` with what ``user`` may not read shown as hidden nodes, as the
    API shows it (lineage.hiding)."""
    if not filters(site, user):
        return graph
    pdhs = access.readable_pdhs(site.engine, user, [c.pdh for c in graph.collections])
    found = [(j.id, j.submitted_by) for j in graph.jobs]
    functions = access.readable_pdhs(site.engine, user, function_pdhs(graph))
    return hide(graph, pdhs, access.readable_jobs(site.engine, user, found), functions)


def readable_watches(site: Site, user: catalog.User, owners: list[str]) -> list[bool]:
    """For Regol watches of these owners, whether ``user`` may see each."""
    if site.kind != "controller":
        return [True] * len(owners)
    return access.readable_watches(site.engine, user, owners)


def require_watch(site: Site, user: catalog.User, watch_id: int, owner: str) -> None:
    """NotFoundError ``no watch ID`` unless ``user`` may see it."""
    if site.kind == "controller":
        access.hide_watch(site.engine, user, watch_id, owner)
