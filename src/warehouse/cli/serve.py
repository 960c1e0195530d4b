"""``wh serve``: the controller, optionally with keep servers for one machine."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import click

from warehouse.blocks.diskcache import parse_size
from warehouse.cli._common import server_options
from warehouse.clusters.placement import HostMap
from warehouse.collection.scratch import scratch_dir
from warehouse.embedded import default_home
from warehouse.errors import UsageError
from warehouse.gateways.s3app import with_s3
from warehouse.gateways.webdav import with_webdav
from warehouse.gitcmd import DEFAULT_ALLOW, check_allow
from warehouse.limits import Policy
from warehouse.private import private_dir
from warehouse.server.accesslog import configure_access_log
from warehouse.server.controller import ControllerConfig, ControllerState, create_app
from warehouse.server.controller.state import private_paths
from warehouse.server.serving import Tls, parse_listen
from warehouse.server.serving import serve as serve_app
from warehouse.server.supervise import KeepChild
from warehouse.settings import catalog_url_problem
from warehouse.volumes.base import child_spec, is_s3_spec, open_volume

__all__ = ["check_cluster_name", "default_db_url", "serve"]


def _host_map(path: Path | None) -> HostMap | None:
    if path is None:
        return None
    from warehouse.clusters.placement import parse_host_map

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--host-map {path}: {e}") from None
    return parse_host_map(text, f"--host-map {path}")


def check_cluster_name(name: str) -> str:
    from warehouse.settings import CLUSTER_NAME

    if CLUSTER_NAME.fullmatch(name) is None:
        raise UsageError(f"--cluster-name {name!r}: must be 1 to 32 letters, digits, _ or -")
    return name


def default_db_url() -> str:
    home = private_dir(default_home())
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
@click.option(
    "--keep-s3",
    metavar="s3://BUCKET/PREFIX?endpoint=URL",
    help="Give each --keep server an S3 volume too, under PREFIX/keepN/: new blocks "
    "go there (docs/s3.md).",
)
@click.option(
    "--replication",
    type=click.IntRange(1, 8),
    default=2,
    show_default=True,
    help="Copies of each block the controller writes itself (job outputs) and `wh balance` keeps.",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "dask", "slurm", "none"]),
    default="local",
    show_default=True,
    help="Where the job manager runs steps; none: run no job manager (one controller "
    "of several sharing a catalog, or storage only).",
)
@click.option("--dask-scheduler", metavar="ADDR", help="With --executor dask: its scheduler.")
@click.option(
    "--job-cpus", type=click.IntRange(min=1), help="Job slots (local: default one per core)."
)
@click.option(
    "--steps-per-user",
    type=click.IntRange(min=0),
    default=0,
    help="The most job steps one user may have running at once; the others wait while "
    'other users\' steps start (0: no limit but the slots; docs/jobs.md, "Limits").',
)
@click.option(
    "--quota-bytes-per-user",
    metavar="SIZE",
    default="0",
    help="The most bytes of collections one user may hold (4G, 512M, 1000000; binary "
    "units); a put past it is refused (403, exit code 6), admins' aside (0: no quota; "
    'docs/server.md, "Quota").',
)
@click.option(
    "--step-processes",
    type=click.IntRange(min=1),
    default=Policy().processes,
    show_default=True,
    help="The most processes one sandboxed job step may have at once.",
)
@click.option(
    "--step-scratch",
    type=click.IntRange(min=1),
    default=Policy().scratch,
    show_default=True,
    help="Bytes: the most a sandboxed job step may keep in its scratch directory.",
)
@click.option(
    "--step-time",
    type=click.FloatRange(min=1),
    default=Policy().wall,
    show_default=True,
    help='Seconds a sandboxed job step may run (docs/jobs.md, "Limits").',
)
@click.option(
    "--unsafe-steps",
    is_flag=True,
    help="Run local and Slurm steps unsandboxed when bubblewrap (bwrap) is missing, or allow "
    "--executor dask without --dask-scheduler (workers here, unsandboxed): any user "
    "who can submit a job can then read the catalog and become admin (docs/security.md).",
)
@click.option(
    "--steps-user",
    default="wh-steps",
    show_default=True,
    help="When run as root: the unprivileged system user local and Slurm steps run as "
    "(made with useradd --system when missing; Slurm nodes need the same uid).",
)
@server_options(with_keep=True)
@click.option(
    "--max-manifest",
    type=click.IntRange(min=1),
    default=ControllerConfig.max_manifest,
    show_default=True,
    help="Bytes: a bigger manifest is refused (413) before it is parsed; on the streamed "
    "put (POST /collections/text), the most of one line (a directory's stream), and "
    "of file names in a stream and the streams above it together.",
)
@click.option(
    "--max-spooled-body",
    type=click.IntRange(min=1),
    default=ControllerConfig.max_spooled,
    show_default=True,
    help="Bytes: the most a streamed put may send (its manifest, listing and block "
    "writes), spooled to unnamed files under $WH_HOME/tmp; more is refused (413). A "
    "user's streamed puts at once share it (more: 429).",
)
@click.option(
    "--max-streamed-puts",
    type=click.IntRange(min=1),
    default=ControllerConfig.max_streamed_puts,
    show_default=True,
    help="Streamed puts (POST /collections/text) run at once, of all users together; "
    "one more is refused (503, try again later). Each holds scratch files and disk.",
)
@click.option(
    "--regol-interval",
    type=click.FloatRange(min=0),
    default=0.0,
    envvar="WH_REGOL_INTERVAL",
    help="Every so many seconds, run Regol's watches at their new commits if no job is "
    "queued or running (default 0: off; env WH_REGOL_INTERVAL).",
)
@click.option(
    "--cluster-name",
    # WH_CLUSTER is the name DESIGN §4.4 gives; WH_CLUSTER_NAME wins when both are set.
    envvar=["WH_CLUSTER_NAME", "WH_CLUSTER"],
    default="local",
    show_default=True,
    help="This installation's cluster name: its manifests' locators carry +K@NAME and "
    "clients that know other clusters read such blocks from here (docs/clusters.md; "
    "env WH_CLUSTER_NAME or WH_CLUSTER).",
)
@click.option(
    "--host-map",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    envvar="WH_HOST_MAP",
    help="A TOML file of [keep] (keep server URL) and [workers] (Dask worker address or "
    "name, or Slurm node) host labels: steps prefer a worker on the host holding their input "
    "(docs/clusters.md; env WH_HOST_MAP).",
)
@click.option(
    "--git-root",
    "git_roots",
    multiple=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="A directory of this machine under which users may name git repositories "
    "(git:/path@REV:FILE); repeatable. Without it, only repositories the controller "
    "fetches by URL (docs/security.md).",
)
@click.option(
    "--git-allow",
    "git_allow",
    multiple=True,
    metavar="SCHEME://HOST[:PORT]",
    help="Where git repositories named by URL may be fetched from (HOST a name, *.DOMAIN, "
    "or * for any DNS name; an address or localhost only by itself); repeatable; none: "
    "fetch nothing. Default: https://* (fetches run with none of this machine's git "
    "configuration, credentials or SSH keys; docs/security.md).",
)
def serve(
    listen: str,
    db_url: str | None,
    keep_count: int,
    keep_dir: Path | None,
    keep_s3: str | None,
    replication: int,
    executor: str,
    dask_scheduler: str | None,
    job_cpus: int | None,
    steps_per_user: int,
    quota_bytes_per_user: str,
    step_processes: int,
    step_scratch: int,
    step_time: float,
    unsafe_steps: bool,
    steps_user: str,
    tls_cert: Path | None,
    tls_key: Path | None,
    access_log: str,
    body_timeout: float,
    header_timeout: float,
    max_manifest: int,
    max_spooled_body: int,
    max_streamed_puts: int,
    regol_interval: float,
    cluster_name: str,
    host_map: Path | None,
    git_roots: tuple[Path, ...],
    git_allow: tuple[str, ...],
) -> None:
    """Run the controller: the JSON API (OpenAPI at /openapi.json) over the catalog.

    Prints `controller listening on URL` once it accepts connections. With
    --keep N it then starts N keep servers on 127.0.0.1 as child processes,
    which register themselves; each keeps its id and port across restarts,
    is restarted (with backoff, each exit logged) when it dies, and stops
    with the controller, even one killed with SIGKILL. The job manager runs in a
    background thread (steps as subprocesses here, or on a Dask cluster;
    their scratch space and functions under $WH_HOME/controller-jobs). Local
    and Slurm steps run in a bubblewrap sandbox that sees only their function,
    their scratch and the network; without bwrap the controller refuses to
    start unless given --unsafe-steps.
    Each request is logged in one line, without tokens or signatures; with
    --tls-cert/--tls-key it speaks HTTPS only (docs/security.md).
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    host, port = parse_listen(listen)
    try:
        quota = parse_size(quota_bytes_per_user)
    except ValueError as e:
        raise UsageError(f"--quota-bytes-per-user: {e}") from None
    allow = tuple(check_allow(rule) for rule in git_allow) or DEFAULT_ALLOW
    if "none" in allow and len(allow) > 1:
        raise UsageError("--git-allow none: fetch nothing, so give no other --git-allow")
    if db_url and (problem := catalog_url_problem(db_url)) is not None:
        raise UsageError(f"--db: {problem}")
    if executor == "dask" and not dask_scheduler and not unsafe_steps:
        raise UsageError(
            "--executor dask without --dask-scheduler runs steps on this machine, "
            "unsandboxed: give --dask-scheduler (workers elsewhere), or --unsafe-steps"
        )
    sandbox = None
    if executor in ("local", "slurm"):
        # Refused before anything starts rather than once listening.
        from warehouse.jobs.sandbox import find_sandbox

        sandbox = find_sandbox(steps_user)
        if sandbox is None and not unsafe_steps:
            raise UsageError(
                f"bubblewrap (bwrap) is not installed or cannot run here: {executor} job "
                "steps cannot be sandboxed; install it (Debian: apt-get install bubblewrap), "
                "or start with --unsafe-steps (see docs/security.md)"
            )
    tls = Tls.from_options(tls_cert, tls_key)
    configure_access_log(access_log)
    config = ControllerConfig(
        db_url=db_url or default_db_url(),
        replication=replication,
        body_timeout=body_timeout,
        max_manifest=max_manifest,
        max_spooled=max_spooled_body,
        max_streamed_puts=max_streamed_puts,
        scratch=scratch_dir(private_dir(default_home())),
        # The JSON around a manifest (its listing, above all) may be a few times its size.
        max_body=max(ControllerConfig.max_body, 4 * max_manifest),
        regol_interval=regol_interval,
        cluster=check_cluster_name(cluster_name),
        host_map=_host_map(host_map),
        git_roots=tuple(str(p.resolve()) for p in git_roots),
        git_allow=allow,
        steps_per_user=steps_per_user,
        quota_bytes_per_user=quota,
        step_limits=Policy(step_processes, step_scratch, step_time),
    )
    if keep_s3 is not None:
        if not keep_count or not is_s3_spec(keep_s3):
            raise UsageError(
                "--keep-s3 takes an s3://BUCKET/PREFIX?endpoint=URL spec, with --keep N"
            )
        open_volume(keep_s3)  # a missing bucket or refused credentials: refused now, once
    if sandbox is not None:  # steps would see the catalog: refused before it is made
        keep = (keep_dir or default_home() / "keep") if keep_count else None
        work = default_home() / "controller-jobs"
        sandbox.check_hidden(private_paths(config.db_url, work, keep))
    state = ControllerState.open(config)
    state.starting = True
    children: list[KeepChild] = []

    def ready(real_port: int) -> None:
        url = f"{'http' if tls is None else 'https'}://{host}:{real_port}"
        click.echo(f"controller listening on {url}")
        sys.stdout.flush()
        try:
            base = keep_dir or default_home() / "keep"
            extra = [] if tls is None else tls.options()
            extra += ["--access-log", access_log, "--body-timeout", str(body_timeout)]
            extra += ["--header-timeout", str(header_timeout)]
            for i in range(keep_count):  # started together, announced as each is up
                own = [] if keep_s3 is None else ["--volume", child_spec(keep_s3, f"keep{i}")]
                child = KeepChild(i, base / str(i), url, state.system_token, _echo, extra + own)
                children.append(child)
                child.start()
            for child in children:
                child.started.wait(120)
            if executor != "none":
                name = (
                    f"dask:{dask_scheduler}" if executor == "dask" and dask_scheduler else executor
                )
                state.start_jobs(
                    url,
                    default_home() / "controller-jobs",
                    name,
                    job_cpus,
                    unsafe_steps=unsafe_steps,
                    steps_user=steps_user,
                )
        finally:
            # Clients waiting on /api/v1/health go on (or fail) either way.
            state.starting = False

    def stop_children() -> None:
        for child in children:
            child.stop()

    try:
        serve_app(
            with_webdav(with_s3(create_app(config, state), state), state),
            host,
            port,
            on_ready=ready,
            tls=tls,
            before_shutdown=stop_children,
            header_timeout=header_timeout,
        )
    finally:
        state.stop_jobs()
        stop_children()
        state.close()


_echo_lock = threading.Lock()


def _echo(line: str) -> None:
    with _echo_lock:  # keep servers announce themselves from their own threads
        click.echo(line)
        sys.stdout.flush()
