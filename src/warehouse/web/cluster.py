"""The cluster page: keep servers with their volumes, free space and request rates,
and block-write accounting per user.

A keep server's ``/status`` needs an admin token: the controller's own works
when the keep servers check tokens with it; otherwise (keep servers with an
admin token of their own) the same numbers are read from ``/metrics``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from warehouse import catalog
from warehouse.remote.tls import verify_for
from warehouse.web.auth import SignedIn, site_of
from warehouse.web.pages import PREFIX, PageRoute, render
from warehouse.web.site import Site
from warehouse.web.throughput import charts

__all__ = ["STATUS_TIMEOUT", "Capacity", "ServerView", "VolumeView", "capacity", "router"]

STATUS_TIMEOUT = 0.8  # seconds: a slow keep server must not hold the page up

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


@dataclass(frozen=True)
class VolumeView:
    path: str
    free: int
    total: int
    device: str = ""  # the file system's "major:minor"; "" when the server does not say


@dataclass(frozen=True)
class Capacity:
    free: int
    total: int
    volumes: int
    filesystems: int


def capacity(volumes: list[tuple[str, VolumeView]]) -> Capacity:
    """Free and total bytes counting each file system once.

    Volumes are ``(host, volume)`` pairs: a device number means one file
    system only on one host. Several volumes (or servers) on one disk would
    otherwise count its space once each.
    """
    seen: dict[tuple[str, str], VolumeView] = {}
    for host, v in volumes:
        seen.setdefault((host, v.device or "path:" + v.path), v)
    return Capacity(
        sum(v.free for v in seen.values()),
        sum(v.total for v in seen.values()),
        len(volumes),
        len(seen),
    )


@dataclass
class ServerView:
    id: str
    url: str
    last_seen: float | None
    version: str = ""
    volumes: list[VolumeView] = field(default_factory=list)
    requests: int = 0
    by_method: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    @property
    def host(self) -> str:
        return httpx.URL(self.url).host if "://" in self.url else self.url

    @property
    def capacity(self) -> Capacity:
        return capacity([(self.host, v) for v in self.volumes])


def _count(requests: dict[str, dict[str, int]]) -> tuple[int, dict[str, int]]:
    by_method = {m: sum(codes.values()) for m, codes in requests.items()}
    return sum(by_method.values()), by_method


_SAMPLE = re.compile(r"^(wh_keepd_\w+)\{(.*)\} ([0-9.eE+-]+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _from_metrics(text: str) -> dict[str, Any]:
    """What ``/status`` says, read from the Prometheus text of ``/metrics`` (no token needed)."""
    requests: dict[str, dict[str, int]] = {}
    volumes: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, labels = m.group(1), dict(_LABEL.findall(m.group(2)))
        try:
            value = int(float(m.group(3)))
        except ValueError:
            continue
        if name == "wh_keepd_requests_total":
            requests.setdefault(labels["method"], {})[labels["code"]] = value
        elif name in ("wh_keepd_volume_free_bytes", "wh_keepd_volume_total_bytes"):
            key = "free_bytes" if "free" in name else "total_bytes"
            volume = volumes.setdefault(labels["volume"], {"path": labels["volume"]})
            volume[key] = value
            volume["device"] = labels.get("device", "")
    return {"volumes": list(volumes.values()), "requests": requests}


async def _fetch(client: httpx.AsyncClient, site: Site, url: str) -> dict[str, Any]:
    """The server's ``/status`` (it needs an admin token), else its ``/metrics``."""
    if site.keep_token:
        answer = await client.get(
            f"{url}/status", headers={"Authorization": f"Bearer {site.keep_token}"}
        )
        if answer.status_code == 200:
            status: dict[str, Any] = answer.json()
            return status
    answer = await client.get(f"{url}/metrics")
    answer.raise_for_status()
    return _from_metrics(answer.text)


async def _status(client: httpx.AsyncClient, site: Site, view: ServerView) -> None:
    try:
        status = await _fetch(client, site, view.url)
        view.volumes = [
            VolumeView(
                str(v["path"]),
                int(v["free_bytes"]),
                int(v["total_bytes"]),
                str(v.get("device") or ""),
            )
            for v in status.get("volumes", [])
        ]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
        view.error = f"no status: {e}" if str(e) else f"no status: {type(e).__name__}"
        return
    view.version = str(status.get("version", ""))
    view.requests, view.by_method = _count(status.get("requests", {}))


def _local_volumes(site: Site) -> list[ServerView]:
    views = []
    for path in site.volume_paths():
        usage = shutil.disk_usage(path)
        dev = os.stat(path).st_dev
        volume = VolumeView(str(path), usage.free, usage.total, f"{os.major(dev)}:{os.minor(dev)}")
        views.append(ServerView("embedded", "(this machine)", None, volumes=[volume]))
    return views


@router.get("/cluster")
async def cluster(request: Request, user: SignedIn) -> Response:
    site = site_of(request)
    services = await run_in_threadpool(catalog.list_keep_services, site.engine)
    views = [ServerView(s.id, s.url, s.last_seen) for s in services]
    if views:
        async with httpx.AsyncClient(
            timeout=STATUS_TIMEOUT, verify=verify_for(*(v.url for v in views))
        ) as client:
            await asyncio.gather(*(_status(client, site, v) for v in views))
    views += await run_in_threadpool(_local_volumes, site)
    rows = await run_in_threadpool(catalog.accounting, site.engine, 0.0)
    rows = [r for r in rows if user.admin or r.user == user.name]
    whole = capacity([(v.host, vol) for v in views for vol in v.volumes])
    drawn = await run_in_threadpool(charts, site.engine, None if user.admin else user.name)
    return render(
        request,
        "cluster.html",
        servers=views,
        accounting=rows,
        kind=site.kind,
        whole=whole,
        charts=drawn,
    )
