"""Collection pages: the names, one collection's file tree, one name's history."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from warehouse import catalog
from warehouse.errors import NotFoundError
from warehouse.keys import is_pdh
from warehouse.lineage.reads import collection_kinds
from warehouse.web import queries, reading
from warehouse.web.auth import Reader, site_of
from warehouse.web.pages import PREFIX, Page, PageRoute, paginate, render
from warehouse.web.tree import parent_paths
from warehouse.workflows import runstore

__all__ = ["ENTRIES_PER_PAGE", "NAMES_PER_PAGE", "router"]

NAMES_PER_PAGE = 100
ENTRIES_PER_PAGE = 200
RECENT = 20

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


@router.get("/")
def home(user: Reader) -> Response:
    return RedirectResponse(PREFIX + "/collections", status_code=303)


@router.get("/collections")
def collections(request: Request, user: Reader, q: str = "", page: int = 1) -> Response:
    site = site_of(request)
    engine = site.engine
    total = queries.count_names(engine, q)
    if reading.filters(site, user):
        # Every name of the prefix read, those the user reads kept, then paged:
        # a page and the count hold only what it may see.
        rows = queries.names_page(engine, q, 0, max(total, 1))
        shown = reading.readable_names(site, user, [r.name for r in rows])
        rows = [r for r in rows if r.name in shown]
        total = len(rows)
    pages = max(1, -(-total // NAMES_PER_PAGE))
    number = min(max(page, 1), pages)
    if reading.filters(site, user):
        rows = rows[(number - 1) * NAMES_PER_PAGE : number * NAMES_PER_PAGE]
    else:
        rows = queries.names_page(engine, q, (number - 1) * NAMES_PER_PAGE, NAMES_PER_PAGE)
    recent = catalog.list_collections(engine, RECENT) if number == 1 and not q else []
    readable = reading.readable_pdhs(site, user, [c.pdh for c in recent])
    recent = [c for c in recent if c.pdh in readable]
    kinds = collection_kinds(engine, {r.pdh for r in rows} | {c.pdh for c in recent})
    return render(
        request,
        "collections.html",
        names=Page(rows, number, NAMES_PER_PAGE, total),
        recent=recent,
        kinds=kinds,
        q=q,
    )


@router.get("/c/{pdh}")
def collection(request: Request, pdh: str, user: Reader, path: str = "", page: int = 1) -> Response:
    if not is_pdh(pdh):
        raise NotFoundError(f"{pdh!r} is not a collection's PDH")
    site = site_of(request)
    reading.require_collection(site, user, pdh)
    record = catalog.get_collection(site.engine, pdh)
    names = queries.names_for(site.engine, pdh)
    shown = reading.readable_names(site, user, names)
    path = path.strip("/")
    outline, entries_of_dir = site.listing(pdh, path)
    entries = paginate(entries_of_dir, page, ENTRIES_PER_PAGE)
    return render(
        request,
        "collection.html",
        record=record,
        pdh=pdh,
        path=path,
        crumbs=parent_paths(path),
        entries=entries,
        dir_size=outline.size(path),
        dir_files=outline.count(path),
        names=[n for n in names if n in shown],
        kinds=collection_kinds(site.engine, [pdh])[pdh],
        made_by=reading.shown_jobs(
            site, user, reading.readable_jobs(site, user, queries.jobs_making(site.engine, pdh))
        ),
        parts=runstore.parts_of(site.engine, pdh),
    )


@router.get("/names/{name:path}")
def name(request: Request, name: str, user: Reader) -> Response:
    site = site_of(request)
    reading.require_name(site, user, name)
    engine = site.engine
    record = catalog.get_name(engine, name)
    history = list(reversed(catalog.name_log(engine, name)))
    return render(request, "name.html", record=record, history=history)
