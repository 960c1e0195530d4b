"""Where a controller's local and Slurm steps run: a bubblewrap sandbox
(docs/security.md).

A step of a shared installation is someone else's program, run on the
controller's machine. In the sandbox it sees a read-only system (``/usr``,
a few files of ``/etc``, the Python installation running ``wh``), its
function's directory read-only, its own scratch directory and result file
read-write, a private ``/tmp``, ``/proc`` and ``/dev`` of its own, and the
network (to reach ``WH_URL``). Nothing else of the file system exists for it:
not the catalog, the signing key, keep volumes, nor any other job's scratch or
function. It runs in its own PID and IPC namespaces, and is killed with its
parent.

When the controller runs as root, the step also runs as an unprivileged
system user (``wh-steps`` by default, made with ``useradd --system`` when
missing): bubblewrap, run as root, mounts what the step may see, and
``setpriv`` drops to that user before the step's program starts.

``wrap`` is a pure function of its arguments: the command line is decided
here, the process is started by the executor (the local one here; the Slurm
one's batch script on a node with the same paths).
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import warehouse
from warehouse.errors import UsageError
from warehouse.remote.tls import ca_bundle

__all__ = ["DEFAULT_STEPS_USER", "Sandbox", "StepsUser", "find_sandbox", "steps_user"]

log = logging.getLogger("warehouse.jobs")

DEFAULT_STEPS_USER = "wh-steps"

# The system a program needs: bound read-only when present. Merged-/usr
# systems have /bin, /lib... as symbolic links into /usr; they are kept so.
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
# Of /etc only what name lookups, TLS, time and the dynamic linker read.
_ETC = (
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/group",
    "/etc/gai.conf",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/services",
    "/etc/ssl/certs",  # not /etc/ssl/private
    "/etc/ssl/openssl.cnf",
)


_XDG = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR")

# Of the controller's own environment a sandboxed step gets only these (and
# its protocol variables): anything else may be a secret of the installation
# (PGPASSWORD of the catalog, a cloud key) that a step must not read.
_ENV_NAMES = frozenset(
    (
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "VIRTUAL_ENV",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
    )
)
# Locale, ours, Python's and the math libraries' CPU and thread settings.
_ENV_PREFIXES = ("LC_", "WH_", "PYTHON", "OPENBLAS_", "OMP_", "MKL_")


@dataclass(frozen=True, slots=True)
class StepsUser:
    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class Sandbox:
    """How to wrap a step's command; ``user`` is set when we run as root."""

    bwrap: str
    setpriv: str | None
    user: StepsUser | None
    readonly: tuple[str, ...]  # the Python installation(s) running wh, besides _SYSTEM

    def wrap(
        self,
        argv: tuple[str, ...] | list[str],
        *,
        function_dir: str,
        scratch: str,
        result: str,
    ) -> list[str]:
        """The bubblewrap command line running ``argv`` with only these paths
        of ours. The step is the sandbox's first process (``--as-pid-1``):
        bubblewrap then reaps it itself, so reaping bubblewrap measures the
        step (docs/usage.md). With an init of its own in the sandbox,
        bubblewrap would leave that init unreaped, and the step's usage with
        it."""
        cmd = [self.bwrap]
        for path in _SYSTEM:
            if os.path.islink(path):
                cmd += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                cmd += ["--ro-bind", path, path]
        # /tmp first: scratch directories may live under it, and a tmpfs
        # mounted later would hide them.
        cmd += ["--perms", "1777", "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
        binds = [(p, "--ro-bind-try") for p in _ETC if os.path.lexists(p)]
        binds += [(p, "--ro-bind") for p in self.readonly]
        binds += [(function_dir, "--ro-bind"), (scratch, "--bind"), (result, "--bind")]
        made = {"/", "/tmp"}  # directories of the sandbox's own
        bound = {"/proc", "/dev", *_SYSTEM}  # mounted from the host
        for path, how in sorted(binds, key=lambda b: b[0].count("/")):
            # Parents are made world-searchable (bubblewrap would make them
            # 0700), so the step's user can walk down to what it may see.
            for parent in reversed(Path(path).parents):
                text = str(parent)
                if text not in made and text not in bound and not _under(text, bound):
                    cmd += ["--perms", "0755", "--dir", text]
                    made.add(text)
            cmd += [how, path, path]
            bound.add(path)
        # Home and caches in the scratch: the controller's own are not there.
        cmd += ["--chdir", scratch, "--setenv", "HOME", scratch]
        for name in _XDG:
            cmd += ["--unsetenv", name]
        # Its disk cache of blocks too: a hit asks no keep server for a
        # signature, so the controller's must not be a step's (docs/s3.md).
        cmd += ["--unsetenv", "WH_CACHE_DIR"]
        cmd += ["--unshare-pid", "--as-pid-1", "--unshare-ipc", "--die-with-parent"]
        # No --new-session: the step stays in bubblewrap's process group, so
        # killing that group (a cancel, the lifeline once the manager is gone)
        # kills the sandbox's first process and with it all in the sandbox.
        # --die-with-parent alone does not once setpriv changes the user (the
        # kernel then drops the parent-death signal). No terminal is reachable
        # either way: every caller starts bubblewrap without one (the local
        # executor in a session of its own, Slurm in a batch job).
        inside: list[str] = []  # what bubblewrap runs: the step, maybe as its user
        if self.user is not None and self.setpriv is not None:
            u = self.user
            cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
            cmd += ["--cap-add", "CAP_SETPCAP"]
            inside += [self.setpriv, f"--reuid={u.uid}", f"--regid={u.gid}", "--clear-groups"]
            inside += ["--inh-caps=-all", "--bounding-set=-all", "--"]
        inside += argv
        cmd += ["--", *inside]
        return cmd

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` (the controller's own with the step's protocol variables)
        less everything a step need not see: see ``_ENV_NAMES``."""
        return {k: v for k, v in env.items() if k in _ENV_NAMES or k.startswith(_ENV_PREFIXES)}

    def seen_under(self, path: str | Path) -> str | None:
        """The path this sandbox binds (read-only, for every step) that holds
        ``path``, or None: a file of the controller's must never be there."""
        real = os.path.realpath(path)
        for bound in (*_SYSTEM, *self.readonly):
            if not os.path.exists(bound):
                continue
            top = os.path.realpath(bound)
            if real == top or real.startswith(top.rstrip("/") + "/"):
                return bound
        return None

    def check_hidden(self, private: dict[str, str | Path]) -> None:
        """Refuse (UsageError) when a step would see one of the controller's
        ``private`` files (by what they are): without a steps user of their
        own, steps run as the controller's user, so its file modes do not
        keep them out; only what is not mounted does."""
        if self.user is not None:
            return
        for what, path in private.items():
            under = self.seen_under(path)
            if under is not None:
                raise UsageError(
                    f"{what} {path} lies under {under}, which every job step sees "
                    "(read-only) and, running as this same user, could read: move it "
                    "elsewhere (docs/security.md)"
                )

    def prepare_scratch(self, scratch: str, result: str) -> None:
        """Give the step user its scratch directory and (empty) result file."""
        fd = os.open(result, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if self.user is not None:
                os.fchown(fd, self.user.uid, self.user.gid)
        finally:
            os.close(fd)
        if self.user is not None:
            os.chown(scratch, self.user.uid, self.user.gid, follow_symlinks=False)

    def prepare_function(self, function_dir: Path) -> None:
        """Make an unpacked function readable by the step user (its parents stay 0700)."""
        if self.user is None:
            return
        for root, dirs, files in os.walk(function_dir):
            os.chmod(root, 0o755)
            for name in files:
                path = os.path.join(root, name)
                if not os.path.islink(path):
                    os.chmod(path, os.stat(path).st_mode | 0o444)
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]


def _under(path: str, roots: set[str]) -> bool:
    return any(path.startswith(r.rstrip("/") + "/") for r in roots if r != "/")


def _python_paths() -> tuple[str, ...]:
    """The Python installation and the warehouse package, however installed."""
    paths = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    paths.add(str(Path(warehouse.__file__).resolve().parent.parent))
    real = {os.path.realpath(p) for p in paths} | paths
    kept: list[str] = []
    for p in sorted(real, key=len):
        if os.path.isdir(p) and not _under(p, set(_SYSTEM) | set(kept)) and p not in _SYSTEM:
            kept.append(p)
    return tuple(kept)


def steps_user(name: str = DEFAULT_STEPS_USER, *, create: bool = True) -> StepsUser:
    """The unprivileged system user steps run as (made when missing and ``create``)."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        useradd = shutil.which("useradd")
        if not create or useradd is None:
            raise UsageError(f"no system user {name!r} to run steps as") from None
        subprocess.run(
            [
                useradd,
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ],
            check=True,
            capture_output=True,
        )
        log.warning("made system user %s to run job steps as", name)
        entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise UsageError(f"steps may not run as {name!r}: it is root")
    return StepsUser(name, entry.pw_uid, entry.pw_gid)


def _usable(bwrap: str) -> bool:
    # Installed is not enough: without user namespaces (not root) it cannot run.
    probe = [bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--as-pid-1", "--die-with-parent"]
    probe += ["true"]
    tried = subprocess.run(probe, capture_output=True, text=True, check=False)
    if tried.returncode != 0:
        log.warning("bubblewrap cannot make a sandbox here: %s", tried.stderr.strip())
    return tried.returncode == 0


def find_sandbox(user_name: str = DEFAULT_STEPS_USER) -> Sandbox | None:
    """The sandbox of this machine, or None when bubblewrap is missing or cannot run."""
    bwrap = shutil.which("bwrap")
    if bwrap is None or not _usable(bwrap):
        return None
    user = setpriv = None
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise UsageError("setpriv (util-linux) is needed to run steps as another user")
        user = steps_user(user_name)
    # Steps talk to a TLS controller with the CAs it trusts (WH_CA_BUNDLE).
    bundle = ca_bundle()
    extra = (os.path.abspath(bundle),) if bundle and os.path.isfile(bundle) else ()
    return Sandbox(bwrap, setpriv, user, _python_paths() + extra)
