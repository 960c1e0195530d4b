"""The settings: one place that reads the environment and the config file.

Each setting comes from ``$WH_<NAME>``, else the key ``<name>`` of
``$XDG_CONFIG_HOME/warehouse/config.toml`` (default ``~/.config``), else its
default. Values are validated (pydantic-settings) before any command runs;
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
    "db_url": "the controller's catalog (default controller.db in the home)",
    "replication": "copies of each block a remote put writes (1 to 8)",
    "wait": "seconds a client waits for a starting controller (0 to 3600)",
    "user": "the user named in the embedded warehouse's records",
    "cluster_name": "this installation's cluster name, in its locators' +K hints (`wh serve`)",
    "fork_server": "fork the local executor's Python steps from a warm server (true or false)",
    "keep_timeout": "seconds a keep server may send nothing before a request to it fails",
    "dask_wait": "seconds a job manager asks again for a Dask scheduler that does not answer",
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


# The words pydantic reads as false (apply() writes a file's false as "False").
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


def _model() -> Any:
    # Imported here: pydantic costs a noticeable part of a second to load.
    from pydantic import Field, ValidationInfo, field_validator
    from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

    class Settings(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="WH_", extra="forbid", env_ignore_empty=True)

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            # The environment first; the config file's values come in as init.
            return (env_settings, init_settings)

        url: str | None = None
        token: str | None = None
        home: Path | None = None
        db_url: str | None = None
        replication: int | None = Field(default=None, ge=1, le=8, strict=False)
        wait: float = Field(default=30.0, ge=0, le=3600)
        user: str | None = None
        cluster_name: str | None = None
        fork_server: bool = True
        keep_timeout: float = Field(default=60.0, gt=0, le=3600)
        dask_wait: float = Field(default=30.0, ge=0, le=3600)

        @field_validator("cluster_name")
        @classmethod
        def _cluster_name(cls, v: str | None) -> str | None:
            if v is not None and CLUSTER_NAME.fullmatch(v) is None:
                raise ValueError("must be 1 to 32 letters, digits, _ or -")
            return v

        @field_validator("replication", "wait", "keep_timeout", "dask_wait", mode="before")
        @classmethod
        def _not_a_bool(cls, v: Any, info: ValidationInfo) -> Any:
            # pydantic would read the file's `replication = true` as 1.
            if isinstance(v, bool):
                kind = "integer" if info.field_name == "replication" else "float"
                raise ValueError(f"{str(v).lower()} is not a valid {kind}")
            return v

        @field_validator("user")
        @classmethod
        def _user(cls, v: str | None) -> str | None:
            # Recorded in names and accounting: a user name as `wh user add` takes it.
            from warehouse.catalog.values import check_name

            if v:
                try:
                    check_name(v)
                except UsageError:
                    raise ValueError(
                        f"{v!r} is not a user name: letters, digits and . _ @ + = -, starting "
                        "with a letter or digit, at most 255 characters"
                    ) from None
            return v

        @field_validator("home")
        @classmethod
        def _home(cls, v: Path | None) -> Path | None:
            # A config file's "~/wh" is the user's, not a folder named "~" here.
            return None if v is None else v.expanduser()

        @field_validator("db_url")
        @classmethod
        def _db_url(cls, v: str | None) -> str | None:
            if v is not None and v and (problem := catalog_url_problem(v)) is not None:
                raise ValueError(problem)
            return v

        @field_validator("url")
        @classmethod
        def _url(cls, v: str | None) -> str | None:
            if v is not None and v != v.strip():
                # A pasted blank would reach the controller's address as is.
                raise ValueError(f"{v!r} has blanks around it")
            if v and not v.startswith(("http://", "https://")):
                raise ValueError("must start with http:// or https://")
            return v

    return Settings


def _problem(name: str, error: dict[str, Any]) -> str:
    # Worded as click words the same mistake in an option (--replication 9).
    kind, got = error.get("type", ""), error.get("input")
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        return f"{got} is not in the range {_RANGES[name]}"
    if kind.startswith("int_"):
        return f"{got!r} is not a valid integer"
    if kind.startswith("float_"):
        return f"{got!r} is not a valid float"
    if kind.startswith("bool_"):
        return f"{got!r} is not a valid boolean (true or false)"
    if kind in {"string_type", "path_type"}:
        return f"{got!r} is not a string"
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")


def load() -> list[Effective]:
    """The effective settings, validated; raises UsageError naming the bad one."""
    from pydantic import ValidationError

    path = config_path()
    from_file = _read_file(path)
    origins: dict[str, str] = {}
    # An empty string counts as unset, as an empty variable does (`home = ""`
    # would otherwise be the current directory).
    from_file = {k: v for k, v in from_file.items() if k not in _TABLES and v != ""}
    for name in FIELDS:
        var = f"WH_{name.upper()}"
        if os.environ.get(var) and var not in _applied:  # empty: as if unset
            origins[name] = f"env {_ALIASES[name] if name in _aliased else var}"
        elif name in from_file:
            origins[name] = f"config {path}"
        else:
            origins[name] = "default"
    settings_class = _model()
    saved = {v: os.environ.pop(v) for v in _applied if v in os.environ}
    try:
        settings = settings_class(**from_file)
    except ValidationError as e:
        first = e.errors()[0]
        name = str(first["loc"][0]) if first.get("loc") else "?"
        where = origins.get(name, "default")
        label = where.removeprefix("env ") if where.startswith("env") else f"{path}: {name}"
        raise UsageError(f"{label}: {_problem(name, dict(first))}") from None
    finally:
        os.environ.update(saved)
    return [Effective(n, getattr(settings, n), origins[n]) for n in FIELDS]


_RANGES = {
    "replication": "1<=x<=8",
    "wait": "0<=x<=3600",
    "keep_timeout": "0<x<=3600",
    "dask_wait": "0<=x<=3600",
}


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
