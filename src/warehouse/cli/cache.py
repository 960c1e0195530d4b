"""``wh cache stats|clear``: the node's disk cache of blocks (docs/s3.md, "The cache")."""

from __future__ import annotations

import click

from warehouse.blocks.diskcache import DiskCache, configured, configured_dir, format_size
from warehouse.blocks.memcache import configured_memcached
from warehouse.cli._common import emit_json

__all__ = ["cache"]


def _cache() -> tuple[DiskCache, bool]:
    """The cache the settings name, and whether reads use it (off: size 0)."""
    found = configured()
    return (found, True) if found is not None else (DiskCache(configured_dir(), 0), False)


@click.group()
def cache() -> None:
    """The node's disk cache of blocks read from keep servers or S3 volumes."""


@cache.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def cache_stats(as_json: bool) -> None:
    """Blocks and bytes held, hits and misses (of every process of this node).

    Hits and misses are counted since the cache was made, by every
    process that read through it; blocks and bytes from its files. With
    the memcached setting, that server's own counts too."""
    disk, on = _cache()
    try:
        stats = disk.stats()
    finally:
        disk.close()
    shared = configured_memcached()
    counts: dict[str, object] | None = None
    servers = ""
    if shared is not None:
        servers = ",".join(f"{h}:{p}" for h, p in shared.servers)
        try:
            counts = {"servers": servers, **shared.stats()}
        finally:
            shared.close()
    if as_json:
        emit_json({**stats.as_json(), "on": on, "memcached": counts})
        return
    bound = format_size(stats.budget) if on else "off (cache_size 0)"
    click.echo(f"dir      {stats.dir}")
    click.echo(f"bound    {bound}")
    click.echo(f"entries  {stats.entries}")
    click.echo(f"bytes    {stats.bytes}")
    click.echo(f"hits     {stats.hits}")
    click.echo(f"misses   {stats.misses}")
    if counts is not None:
        click.echo(
            f"memcached {servers}: {counts['curr_items']} items, "
            f"{counts['bytes']} bytes, {counts['get_hits']} hits, {counts['get_misses']} misses "
            "(all its clients')"
        )


@cache.command("clear")
def cache_clear() -> None:
    """Remove every block from the cache (a reader holding one still reads it whole).

    Nothing is lost: every block is still on its keep servers or volume."""
    disk, _ = _cache()
    try:
        entries, freed = disk.clear()
    finally:
        disk.close()
    click.echo(f"removed {entries} blocks, {freed} bytes")
