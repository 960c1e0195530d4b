"""The settings: one place that reads the environment and the config file.

Each setting comes from ``$WH_<NAME>``, else the key ``<name>`` of
``$XDG_CONFIG_HOME/warehouse/config.toml`` (default ``~/.config``), else its
default. Values are checked before any command runs;
a bad one is one ``Error:`` naming the variable or the file's key (exit 2).
`wh config` shows the effective settings and where each came from.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warehouse.errors import UsageError

__all__ = [
    "CLUSTER_NAME",
    "FIELDS",
    "Effective",
    "OtherCluster",
    "applied",
    "catalog_url_problem",
    "clusters",
    "config_path",
    "is_off",
    "load",
    "wanted",
]

# name -> what it is (shown by `wh config`); the variable is WH_<NAME>.
FIELDS: dict[str, str] = {
    "url": "the controller (empty: the embedded warehouse)",
    "token": "the API token for $WH_URL",
    "home": "the embedded warehouse (default ~/.local/share/warehouse)",
    "volume": "the embedded warehouse's blocks: a directory or s3://BUCKET/PREFIX?endpoint=URL",
    "db_url": "the controller's catalog (default controller.db in the home)",
    "replication": "copies of each block a remote put writes (1 to 8)",
    "wait": "seconds a client waits for a starting controller (0 to 3600)",
    "user": "the user named in the embedded warehouse's records",
    "cluster_name": "this installation's cluster name, in its locators' +K hints (`wh serve`)",
    "fork_server": "fork the local executor's Python steps from a warm server (true or false)",
    "keep_timeout": "seconds a keep server may send nothing before a request to it fails",
    "dask_wait": "seconds a job manager asks again for a Dask scheduler that does not answer",
    "cache_dir": "the node-local disk cache of blocks (default ~/.cache/warehouse/blocks)",
    "cache_size": "the disk cache's bound: bytes, or with K, M, G or T (0: off; default 4G)",
    "memcached": "memcached servers shared by nodes for small blocks: HOST:PORT[,HOST:PORT]",
}
_SECRET = {"token"}
MAX_CONFIG_BYTES = 64 * 1024
# A cluster name as the +K hint grammar allows it (docs/formats.md), kept short.
CLUSTER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
# The config file's table of other clusters (docs/clusters.md).
_TABLES = {"clusters"}
MAX_CLUSTERS = 64
# Variables apply() set from the config file: still the file's, for `wh config`.
_applied: set[str] = set()
# Settings apply() took from another variable's name (WH_CLUSTER): named so in errors.
_aliased: set[str] = set()
_ALIASES = {"cluster_name": "WH_CLUSTER"}
# Whether apply() has run in this process (applied() runs it once).
_done = False


# The words taken for false, in any case (apply() writes a file's false as "False").
_FALSE = {"0", "off", "f", "false", "n", "no"}


def is_off(name: str) -> bool:
    """Whether the true-or-false setting ``name`` is false (default true).

    Read from the environment, where apply() put a config file's value once
    load() had validated it.
    """
    return os.environ.get(f"WH_{name.upper()}", "").strip().lower() in _FALSE


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "warehouse" / "config.toml"


def wanted() -> bool:
    """Whether there is anything to read (a variable set, or a config file)."""
    return any(os.environ.get(f"WH_{n.upper()}") for n in FIELDS) or config_path().exists()


@dataclass(frozen=True)
class Effective:
    name: str
    value: Any
    origin: str  # "env WH_X", "config PATH" or "default"

    @property
    def variable(self) -> str:
        return f"WH_{self.name.upper()}"

    def shown(self) -> str:
        if self.value is None:
            return ""
        if self.name in _SECRET:
            return "(set, hidden)"
        if self.name == "db_url":
            return _without_password(str(self.value))
        if isinstance(self.value, bool):
            return "true" if self.value else "false"  # as the file and variable say it
        return str(self.value)


def _without_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in creds:
        return url
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"


# The catalog databases the package has drivers for (docs/postgresql.md).
_CATALOG_SCHEMES = ("sqlite://", "postgresql+psycopg://")
_CATALOG_WANT = "want sqlite:///PATH or postgresql+psycopg://USER:PASS@HOST/DB"


def catalog_url_problem(url: str) -> str | None:
    """What is wrong with a catalog URL, or None; never repeats a password."""
    if url.startswith(_CATALOG_SCHEMES):
        return None
    scheme, sep, _ = url.partition("://")
    if sep and scheme in {"postgresql", "postgres", "postgresql+psycopg2"}:
        return f"a catalog URL {scheme}://… needs the psycopg driver: write postgresql+psycopg://…"
    shown = f"{scheme}://…" if sep else repr(url)
    return f"{shown} is not a catalog URL: {_CATALOG_WANT}"


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise UsageError(f"config file {path}: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UsageError(f"config file {path}: more than {MAX_CONFIG_BYTES} bytes")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"config file {path}: not TOML: {e}") from None
    if ("token" in data or "clusters" in data) and os.stat(path).st_mode & 0o077:
        raise UsageError(
            f"config file {path} holds a token but others may read it: chmod 600 {path}"
        )
    unknown = sorted(set(data) - set(FIELDS) - _TABLES)
    if unknown:
        raise UsageError(
            f"config file {path}: unknown key {unknown[0]!r} "
            f"(known: {', '.join(FIELDS)}, [clusters.NAME])"
        )
    return data


@dataclass(frozen=True)
class OtherCluster:
    """Another installation a client may read from and copy to (docs/clusters.md)."""

    name: str
    url: str
    token: str


def clusters() -> dict[str, OtherCluster]:
    """The other clusters of the config file's ``[clusters.NAME]`` tables, checked."""
    path = config_path()
    table = _read_file(path).get("clusters", {})
    where = f"config file {path}: clusters"
    if not isinstance(table, dict):
        raise UsageError(f"{where}: must be a table of [clusters.NAME] tables")
    if len(table) > MAX_CLUSTERS:
        raise UsageError(f"{where}: more than {MAX_CLUSTERS} clusters")
    found: dict[str, OtherCluster] = {}
    for name, entry in table.items():
        if CLUSTER_NAME.fullmatch(name) is None:
            raise UsageError(f"{where}: bad cluster name {name!r} (letters, digits, _ and -)")
        if not isinstance(entry, dict) or set(entry) - {"url", "token"}:
            raise UsageError(f"{where}.{name}: want only url and token")
        url, token = entry.get("url"), entry.get("token")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise UsageError(f"{where}.{name}.url: must start with http:// or https://")
        if not isinstance(token, str) or not token.strip():
            raise UsageError(f"{where}.{name}.token: missing")
        found[name] = OtherCluster(name, url.rstrip("/"), token.strip())
    return found


# Each setting's kind and, for numbers, its range. Checked by hand: loading
# pydantic-settings to check eleven values took 0.15 to 0.25 s of every
# command's start (docs/benchmarks.md, "Settings checked without
# pydantic-settings"), more than the rest of a short command.
_KINDS: dict[str, str] = {
    "url": "str",
    "token": "str",
    "home": "path",
    "volume": "str",
    "db_url": "str",
    "replication": "int",
    "wait": "float",
    "user": "str",
    "cluster_name": "str",
    "fork_server": "bool",
    "keep_timeout": "float",
    "dask_wait": "float",
    "cache_dir": "path",
    "cache_size": "str",
    "memcached": "str",
}
_DEFAULTS: dict[str, Any] = {
    "wait": 30.0,
    "fork_server": True,
    "keep_timeout": 60.0,
    "dask_wait": 30.0,
    "cache_size": "4G",  # blocks.diskcache.DEFAULT_DISK_CACHE
}
# (low, low allowed, high): "0<x<=3600" as click words an option's range.
_BOUNDS: dict[str, tuple[float, bool, float]] = {
    "replication": (1, True, 8),
    "wait": (0, True, 3600),
    "keep_timeout": (0, False, 3600),
    "dask_wait": (0, True, 3600),
}
_RANGES = {
    name: f"{lo}{'<=' if closed else '<'}x<={hi}" for name, (lo, closed, hi) in _BOUNDS.items()
}
# And for true (is_off() reads the environment with the same words).
_TRUE = {"1", "on", "t", "true", "y", "yes"}
# A whole number in the digits 0-9, as "3" or "3.0".
_INTEGER = re.compile(r"[+-]?[0-9]+(?:\.0+)?", re.ASCII)


def _value(name: str, raw: Any) -> Any:
    """The setting ``name`` from a variable's text or a config file's value;
    raises ValueError saying what is wrong with it."""
    kind = _KINDS[name]
    if kind in {"str", "path"}:
        if not isinstance(raw, str):
            raise ValueError(f"{raw!r} is not a string")
        return _checked(name, raw) if kind == "str" else Path(raw).expanduser()
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        word = str(raw).lower() if isinstance(raw, (str, int)) else None
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ValueError(f"{raw!r} is not a valid boolean (true or false)")
    if isinstance(raw, bool):
        # A file's `replication = true` is no number, though Python counts it as 1.
        raise ValueError(
            f"{str(raw).lower()} is not a valid {'integer' if kind == 'int' else kind}"
        )
    number: float
    if kind == "int":
        if isinstance(raw, str) and _INTEGER.fullmatch(raw.strip()):
            number = int(float(raw)) if "." in raw else int(raw)
        elif isinstance(raw, int) or (isinstance(raw, float) and raw.is_integer()):
            number = int(raw)
        else:
            raise ValueError(f"{raw!r} is not a valid integer")
    else:
        # float() reads other scripts' digits too: "٣" is no setting's number.
        if isinstance(raw, str) and not raw.isascii():
            raise ValueError(f"{raw!r} is not a valid float")
        try:
            number = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{raw!r} is not a valid float") from None
    lo, closed, hi = _BOUNDS[name]
    # Written so that NaN is out of every range.
    if not ((lo <= number if closed else lo < number) and number <= hi):
        raise ValueError(f"{raw} is not in the range {_RANGES[name]}")
    return number


def _checked(name: str, v: str) -> str:
    """A text setting's own rule."""
    if name == "cluster_name" and CLUSTER_NAME.fullmatch(v) is None:
        raise ValueError("must be 1 to 32 letters, digits, _ or -")
    if name == "user":
        # Recorded in names and accounting: a user name as `wh user add` takes it.
        from warehouse.catalog.values import check_account

        try:
            check_account(v)
        except UsageError:
            raise ValueError(
                f"{v!r} is not a user name: letters, digits and . _ @ + = -, starting "
                "with a letter or digit, at most 255 characters"
            ) from None
    if name == "volume" and v.startswith("s3://"):
        from warehouse.volumes.s3client import S3Location

        try:
            S3Location.parse(v)
        except UsageError as e:
            raise ValueError(str(e)) from None
    if name == "cache_size":
        from warehouse.blocks.diskcache import parse_size

        parse_size(v)  # its ValueError says what is wrong
    if name == "memcached" and v.strip():
        from warehouse.blocks.memcache import parse_servers

        parse_servers(v)
    if name == "db_url" and v and (problem := catalog_url_problem(v)) is not None:
        raise ValueError(problem)
    if name == "url":
        if v != v.strip():
            # A pasted blank would reach the controller's address as is.
            raise ValueError(f"{v!r} has blanks around it")
        if v and not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
    return v


def load() -> list[Effective]:
    """The effective settings, validated; raises UsageError naming the bad one."""
    path = config_path()
    from_file = _read_file(path)
    # An empty string counts as unset, as an empty variable does (`home = ""`
    # would otherwise be the current directory).
    from_file = {k: v for k, v in from_file.items() if k not in _TABLES and v != ""}
    found: list[Effective] = []
    for name in FIELDS:
        var = f"WH_{name.upper()}"
        # A variable apply() set from the file is still the file's.
        text = os.environ.get(var) if var not in _applied else None
        if text:  # empty: as if unset
            raw, origin, label = text, f"env {_ALIASES[name] if name in _aliased else var}", None
        elif name in from_file:
            raw, origin, label = from_file[name], f"config {path}", f"{path}: {name}"
        else:
            found.append(Effective(name, _DEFAULTS.get(name), "default"))
            continue
        try:
            value = _value(name, raw)
        except ValueError as e:
            raise UsageError(f"{label or origin.removeprefix('env ')}: {e}") from None
        found.append(Effective(name, value, origin))
    return found


def applied() -> None:
    """apply() once in this process, for the library (``warehouse.open``);
    the command line applies the settings itself before every command."""
    if not _done:
        apply()


def apply() -> None:
    """Validate the settings, then let the config file's values stand for unset variables."""
    global _done
    _applied.clear()
    _aliased.clear()
    if os.environ.get("WH_CLUSTER") and not os.environ.get("WH_CLUSTER_NAME"):
        # DESIGN §4.4's name for the variable: validated and shown as cluster_name.
        os.environ["WH_CLUSTER_NAME"] = os.environ["WH_CLUSTER"]
        _aliased.add("cluster_name")
    if wanted():
        for s in load():
            if s.origin.startswith("config") and s.value is not None:
                os.environ[s.variable] = str(s.value)
                _applied.add(s.variable)
    _done = True
