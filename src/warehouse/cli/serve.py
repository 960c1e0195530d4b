"""``wh serve``: the controller, optionally with keep servers for one machine."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import click

from warehouse.embedded import default_home
from warehouse.server.controller import ControllerConfig, ControllerState, create_app
from warehouse.server.serving import parse_listen
from warehouse.server.serving import serve as serve_app

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
@click.option(
    "--regol-interval",
    type=click.FloatRange(min=0),
    default=0.0,
    envvar="WH_REGOL_INTERVAL",
    help="Every so many seconds, run Regol's watches at their new commits if no job is "
    "queued or running (default 0: off; env WH_REGOL_INTERVAL).",
)
def serve(
    listen: str,
    db_url: str | None,
    keep_count: int,
    keep_dir: Path | None,
    replication: int,
    executor: str,
    dask_scheduler: str | None,
    job_cpus: int | None,
    regol_interval: float,
) -> None:
    """Run the controller: the JSON API (OpenAPI at /openapi.json) over the catalog.

    Prints `controller listening on URL` once it accepts connections. With
    --keep N it then starts N keep servers on 127.0.0.1 as child processes,
    which register themselves; they stop with it. The job manager runs in a
    background thread (steps as subprocesses here, or on a Dask cluster;
    their scratch space and functions under $WH_HOME/controller-jobs).
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    host, port = parse_listen(listen)
    config = ControllerConfig(
        db_url=db_url or default_db_url(), replication=replication, regol_interval=regol_interval
    )
    state = ControllerState.open(config)
    children: list[subprocess.Popen[bytes]] = []

    def ready(real_port: int) -> None:
        url = f"http://{host}:{real_port}"
        click.echo(f"controller listening on {url}")
        sys.stdout.flush()
        base = keep_dir or default_home() / "keep"
        for i in range(keep_count):
            children.append(_start_keepd(url, base / str(i), state.system_token))
        if executor != "none":
            name = f"dask:{dask_scheduler}" if executor == "dask" and dask_scheduler else executor
            state.start_jobs(url, default_home() / "controller-jobs", name, job_cpus)

    try:
        serve_app(create_app(config, state), host, port, on_ready=ready)
    finally:
        state.stop_jobs()
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        state.close()


def _start_keepd(controller: str, volume: Path, token: str) -> subprocess.Popen[bytes]:
    volume.mkdir(parents=True, exist_ok=True)
    wh = str(Path(sys.executable).with_name("wh"))
    cmd = [wh, "keepd", "--volume", str(volume), "--listen", "127.0.0.1:0"]
    cmd += ["--controller", controller]
    proc = subprocess.Popen(cmd, env={**os.environ, "WH_TOKEN": token}, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()  # "keepd listening on URL", once registered
    click.echo(line or f"keep server for {volume} did not start")
    sys.stdout.flush()
    return proc
