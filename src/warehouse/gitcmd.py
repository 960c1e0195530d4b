"""Running git for specs any user may write (``git:REPOSITORY@REVISION:PATH``).

A controller runs git as itself for every user, so: no argument may be an
option (a repository ``--upload-pack=CMD`` runs CMD), fetches use only the
ordinary transports (no ``ext::`` command, no ``fd::``), and a repository on
the controller's own disk is read only under the directories its admin
allowed (``wh serve --git-root``): otherwise any user could store, as a
collection everyone may read, any repository the controller's user can
read; nor may the repository git finds there lie elsewhere (a directory
with no repository of its own, in which git looks up the tree; a ``.git``
file, a worktree's common directory or object alternates naming another).
The embedded warehouse, one user on their own machine, reads any.

On a controller git runs with a clean environment (``run(clean=True)``): no
configuration of the operator's (a ``url.insteadOf``, a credential helper,
``~/.netrc``), no SSH key or agent, no prompt; so a user can make it fetch
only what anyone may, and only from the schemes and hosts its admin allows
(``wh serve --git-allow``, ``check_remote``).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from warehouse.errors import ForbiddenError, UsageError

__all__ = [
    "DEFAULT_ALLOW",
    "GIT_ENV",
    "check_allow",
    "check_local",
    "check_local_repository",
    "check_remote",
    "clean_env",
    "local_path",
    "no_option",
    "run",
]

GIT_ENV = {"GIT_PROTOCOL_FROM_USER": "0", "GIT_ALLOW_PROTOCOL": "http:https:git:ssh:file"}

# What a controller fetches unless told otherwise: https from any host named
# by a DNS name (docs/security.md, "Git repositories").
DEFAULT_ALLOW = ("https://*",)
_SCHEMES = ("https", "http", "git", "ssh")

# Of the operator's environment, what a fetch needs to reach the network.
_KEPT = ("PATH", "LANG", "LANGUAGE", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR")
_PROXIES = ("http_proxy", "https_proxy", "no_proxy", "all_proxy")
# ssh with no configuration, key, agent or password: what anyone may read.
_SSH = (
    "ssh -F none -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityFile=none "
    "-o IdentityAgent=none -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no "
    "-o HostbasedAuthentication=no -o GSSAPIAuthentication=no"
)


def clean_env(home: str) -> dict[str, str]:
    """git's environment on a controller: ``home`` an empty directory, no
    system or global configuration, no prompt, and no redirect followed (it
    could lead to a host the allow list does not name)."""
    env = {k: v for k, v in os.environ.items() if k in _KEPT or k.startswith("LC_")}
    env |= {k: v for k, v in os.environ.items() if k.lower() in _PROXIES}
    return (
        env
        | GIT_ENV
        | {
            "HOME": home,  # curl reads $HOME/.netrc; git its configuration there
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_SSH_COMMAND": _SSH,
            "GIT_SSH_VARIANT": "ssh",
            "GIT_CONFIG_COUNT": "2",
            "GIT_CONFIG_KEY_0": "http.followRedirects",
            "GIT_CONFIG_VALUE_0": "false",
            "GIT_CONFIG_KEY_1": "credential.helper",
            "GIT_CONFIG_VALUE_1": "",
        }
    )


def run(args: Sequence[str], *, what: int = 3, clean: bool = False) -> str:
    """git's standard output; a failure is git's first line (the rest is advice).
    ``clean``: with ``clean_env`` (a controller), else the caller's own."""
    if clean:
        with tempfile.TemporaryDirectory(prefix="wh-git-home-") as home:
            return _run(args, what, clean_env(home))
    return _run(args, what, {**os.environ, **GIT_ENV})


def _run(args: Sequence[str], what: int, env: dict[str, str]) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        said = next((line.strip() for line in done.stderr.splitlines() if line.strip()), "")
        raise UsageError(f"git {' '.join(args[:what])}: {said or f'exit status {done.returncode}'}")
    return done.stdout


def no_option(**values: str) -> None:
    """Refuse a repository or revision git would read as an option."""
    for what, value in values.items():
        if value.startswith("-"):
            raise UsageError(f"git {what} {value!r} starts with '-'")


def local_path(repo: str) -> str | None:
    """The directory a repository names on this machine (a path or a file://
    URL), or None for a remote one."""
    if repo.startswith("file:"):
        return unquote(urlsplit(repo).path)
    if "://" in repo or (":" in repo.split("/", 1)[0] and not Path(repo).exists()):
        return None  # a URL, or scp-like ssh (host:path)
    return repo


def check_local(repo: str, roots: Sequence[str] | None) -> None:
    """Refuse a repository on this machine outside ``roots`` (None: any is read)."""
    if roots is None:
        return
    path = local_path(repo)
    if path is None:
        return
    real = os.path.realpath(path)
    for root in roots:
        top = os.path.realpath(root)
        if os.path.commonpath([real, top]) == top:
            return
    raise ForbiddenError(
        f"git repository {repo!r} is on the controller's disk outside the directories "
        "its admin allows (wh serve --git-root): use a URL the controller can fetch"
    )


def check_local_repository(path: str, roots: Sequence[str] | None) -> str:
    """The repository git reads for the directory ``path`` (itself under
    ``roots``): its git directory, refused when any part of it (git
    directory, common directory, object alternates) lies outside ``roots``."""
    if roots is None:
        return path
    found = run(["-C", path, "rev-parse", "--absolute-git-dir", "--git-common-dir"], clean=True)
    places = [os.path.join(path, line) for line in found.splitlines() if line]
    if not places:
        return path
    objects = os.path.join(places[-1], "objects")
    try:
        # Each line another object store git reads (relative: to this one).
        text = Path(objects, "info", "alternates").read_text(errors="replace")
    except OSError:
        text = ""
    places += [os.path.join(objects, line) for line in text.splitlines() if line.strip()]
    for place in places:
        try:
            check_local(place, roots)
        except ForbiddenError:
            raise ForbiddenError(
                f"git repository {path!r} keeps its history outside the directories "
                "its admin allows (wh serve --git-root): use a URL the controller can fetch"
            ) from None
    return places[0]


def check_allow(rule: str) -> str:
    """``rule`` if it is ``SCHEME://HOST[:PORT]`` (HOST may be ``*`` or
    ``*.DOMAIN``) or ``none``; raises UsageError otherwise."""
    if rule == "none":
        return rule
    scheme, sep, rest = rule.partition("://")
    host, _, port = rest.partition(":")
    bare = host.removeprefix("*.") if host != "*" else "x"
    if (
        not sep
        or scheme not in _SCHEMES
        or not bare
        or any(not (ch.isalnum() or ch in ".-[]") for ch in bare)
        or (port and not (port.isdigit() and 0 < int(port) < 65536))
    ):
        raise UsageError(
            f"--git-allow {rule!r}: not SCHEME://HOST[:PORT] (SCHEME one of "
            f"{', '.join(_SCHEMES)}; HOST a name, *.DOMAIN or *) nor none"
        )
    return rule


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host == "localhost" or host.endswith(".localhost")
    return True


def _matches(rule: str, scheme: str, host: str, port: int | None) -> bool:
    want_scheme, _, rest = rule.partition("://")
    want_host, _, want_port = rest.partition(":")
    if want_scheme != scheme or (want_port and int(want_port) != port):
        return False
    want_host = want_host.lower()
    if want_host == host:
        return True
    # A wildcard stands for DNS names only: an address or localhost (the
    # controller's own machine, a cloud's metadata service) is named exactly.
    if _is_address(host):
        return False
    return want_host == "*" or (want_host.startswith("*.") and host.endswith(want_host[1:]))


def check_remote(repo: str, allow: Sequence[str] | None) -> None:
    """Refuse a repository fetched by URL from a scheme and host ``allow``
    does not name (None: any, the embedded warehouse). A repository on this
    machine (a path, a ``file://`` URL) is ``check_local``'s business."""
    if allow is None or (local_path(repo) is not None and "::" not in repo):
        return
    scheme, host, port = "", "", None
    if "::" not in repo:  # TRANSPORT::ADDRESS runs a remote helper: never allowed
        if "://" in repo:
            try:
                url = urlsplit(repo)
                scheme, host, port = url.scheme.lower(), (url.hostname or ""), url.port
            except ValueError:
                scheme = ""
        else:  # scp-like: [USER@]HOST:PATH, which git fetches over ssh
            scheme, host = "ssh", repo.split(":", 1)[0].rpartition("@")[2]
    host = host.lower().rstrip(".")
    if scheme and host and any(r != "none" and _matches(r, scheme, host, port) for r in allow):
        return
    named = ", ".join(r for r in allow if r != "none") or "nowhere"
    raise ForbiddenError(
        f"git repository {repo!r}: this controller fetches only from {named} "
        "(its admin allows more with wh serve --git-allow)"
    )
