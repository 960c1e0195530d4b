"""``wh serve``: the controller, optionally with keep servers for one machine."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import click

from warehouse.embedded import default_home
from warehouse.server.controller import ControllerConfig, ControllerState, create_app
from warehouse.server.serving import parse_listen
from warehouse.server.serving import serve as serve_app
from warehouse.server.supervise import KeepChild

__all__ = ["default_db_url", "serve"]


def default_db_url() -> str:
    home = default_home()
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'controller.db'}"


@click.command()
@click.option(
    "--listen", default="127.0.0.1:8440", show_default=True, help="HOST:PORT (port 0: any)."
)
@click.option(
    "--db",
    "db_url",
    envvar="WH_DB_URL",
    help="Catalog URL: sqlite:///PATH or postgresql+psycopg://USER:PASS@HOST/DB "
    "(default: controller.db in $WH_HOME; env WH_DB_URL).",
)
@click.option("--keep", "keep_count", type=int, default=0, help="Also start N local keep servers.")
@click.option(
    "--keep-dir",
    type=click.Path(path_type=Path),
    help="Where the --keep servers keep their volumes (default: $WH_HOME/keep).",
)
@click.option("--replication", type=int, default=2, show_default=True)
@click.option(
    "--executor",
    type=click.Choice(["local", "dask", "none"]),
    default="local",
    show_default=True,
    help="Where the job manager runs steps; none: run no job manager (one controller "
    "of several sharing a catalog, or storage only).",
)
@click.option("--dask-scheduler", metavar="ADDR", help="With --executor dask: its scheduler.")
@click.option("--job-cpus", type=int, help="Job slots (local: default one per core).")
def serve(
    listen: str,
    db_url: str | None,
    keep_count: int,
    keep_dir: Path | None,
    replication: int,
    executor: str,
    dask_scheduler: str | None,
    job_cpus: int | None,
) -> None:
    """Run the controller: the JSON API (OpenAPI at /openapi.json) over the catalog.

    Prints `controller listening on URL` once it accepts connections. With
    --keep N it then starts N keep servers on 127.0.0.1 as child processes,
    which register themselves; each keeps its id and port across restarts,
    is restarted (with backoff, each exit logged) when it dies, and stops
    with the controller, even one killed with SIGKILL. The job manager runs in a
    background thread (steps as subprocesses here, or on a Dask cluster;
    their scratch space and functions under $WH_HOME/controller-jobs).
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    host, port = parse_listen(listen)
    config = ControllerConfig(db_url=db_url or default_db_url(), replication=replication)
    state = ControllerState.open(config)
    children: list[KeepChild] = []

    def ready(real_port: int) -> None:
        url = f"http://{host}:{real_port}"
        click.echo(f"controller listening on {url}")
        sys.stdout.flush()
        base = keep_dir or default_home() / "keep"
        for i in range(keep_count):  # started together, announced as each is up
            child = KeepChild(i, base / str(i), url, state.system_token, _echo)
            children.append(child)
            child.start()
        for child in children:
            child.started.wait(120)
        if executor != "none":
            name = f"dask:{dask_scheduler}" if executor == "dask" and dask_scheduler else executor
            state.start_jobs(url, default_home() / "controller-jobs", name, job_cpus)

    try:
        serve_app(create_app(config, state), host, port, on_ready=ready)
    finally:
        state.stop_jobs()
        for child in children:
            child.stop()
        state.close()


_echo_lock = threading.Lock()


def _echo(line: str) -> None:
    with _echo_lock:  # keep servers announce themselves from their own threads
        click.echo(line)
        sys.stdout.flush()
