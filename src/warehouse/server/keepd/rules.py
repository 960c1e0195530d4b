"""The keep server's decisions, apart from any I/O: each is a pure function.

A refusal is raised as ``Refused(status, message)``; the app turns it into
an HTTP answer. Everything here is unit-tested without sockets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from warehouse.blocks.locator import MAX_BLOCK_SIZE, Locator, LocatorError
from warehouse.blocks.signing import Check
from warehouse.server.keepd.auth import Principal

__all__ = [
    "PullItem",
    "Refused",
    "TrashItem",
    "check_prefix",
    "choose_volume",
    "parse_pull_list",
    "parse_put_target",
    "parse_trash_list",
    "put_length",
    "read_refusal",
]

_MD5 = re.compile(r"[0-9a-f]{32}")
_PREFIX = re.compile(r"[0-9a-f]{0,32}")
_LENGTH = re.compile(r"[0-9]{1,20}")
_SERVER = re.compile(r"https?://[^\s/]+/?")


class Refused(Exception):
    """A request answered with an error status and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class TrashItem:
    locator: Locator
    block_mtime: int  # ns, as the index showed it


@dataclass(frozen=True, slots=True)
class PullItem:
    locator: Locator
    servers: tuple[str, ...]


def parse_put_target(text: str) -> tuple[str, int | None]:
    """``<md5>`` or ``<md5>+<size>[+hints]`` from a PUT path: the hash and the size if given."""
    if _MD5.fullmatch(text):
        return text, None
    try:
        loc = Locator.parse(text)
    except LocatorError as e:
        raise Refused(400, str(e)) from None
    return loc.md5, loc.size


def put_length(content_length: str | None, declared: int | None) -> int:
    """How many bytes a PUT body must have, or why it is refused before reading it."""
    if content_length is None:
        raise Refused(411, "a PUT needs a Content-Length")
    if _LENGTH.fullmatch(content_length.strip()) is None:
        raise Refused(400, f"bad Content-Length {content_length!r}")
    length = int(content_length)
    if length > MAX_BLOCK_SIZE:
        raise Refused(413, f"a block is at most {MAX_BLOCK_SIZE} bytes, not {length}")
    if declared is not None and declared != length:
        raise Refused(400, f"the locator says {declared} bytes, Content-Length says {length}")
    return length


def choose_volume(free: Sequence[int], need: int, reserve: int, turn: int = 0) -> int | None:
    """The index of the volume with the most free space that keeps ``reserve`` free.

    Ties (volumes on one file system, or equal disks) are broken by ``turn``
    so that writes take turns among them. None when no volume has room.
    """
    n = len(free)
    best: int | None = None
    for k in range(n):
        i = (turn + k) % n
        if free[i] - need < reserve:
            continue
        if best is None or free[i] > free[best]:
            best = i
    return best


def read_refusal(check: Check, principal: Principal | None) -> Refused | None:
    """Why a read is refused, given the signature check and who the token is."""
    # A legacy signature (made before sizes were signed) still reads: the
    # stored length is checked against the locator's size anyway.
    if check in (Check.OK, Check.LEGACY) or (principal is not None and principal.admin):
        return None
    if principal is None:
        return Refused(401, "unknown token")
    if check is Check.MISSING:
        return Refused(401, "the locator has no signature")
    if check is Check.EXPIRED:
        return Refused(403, "the signature has expired")
    return Refused(403, "the signature is not valid for this token")


def check_prefix(prefix: str) -> str:
    if _PREFIX.fullmatch(prefix) is None:
        raise Refused(400, f"not a hash prefix: {prefix!r}")
    return prefix


def _items(data: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise Refused(400, f"a {what} list must be a JSON list of objects")
    return data


def _key(text: Any, n: int) -> Locator:
    try:
        if not isinstance(text, str):
            raise LocatorError(str(text), "not a string")
        return Locator.parse(text).without_hints()
    except LocatorError as e:
        raise Refused(400, f"item {n}: {e}") from None


def parse_trash_list(data: Any) -> list[TrashItem]:
    """``[{"locator": "md5+size", "block_mtime": ns}, …]`` checked item by item."""
    out = []
    for n, item in enumerate(_items(data, "trash")):
        mtime = item.get("block_mtime")
        if type(mtime) is not int or mtime < 0:
            raise Refused(400, f"item {n}: block_mtime must be a whole number of ns")
        out.append(TrashItem(_key(item.get("locator"), n), mtime))
    return out


def parse_pull_list(data: Any) -> list[PullItem]:
    """``[{"locator": "md5+size", "servers": ["http://host:port", …]}, …]``."""
    out = []
    for n, item in enumerate(_items(data, "pull")):
        servers = item.get("servers")
        if (
            not isinstance(servers, list)
            or not servers
            or not all(isinstance(s, str) and _SERVER.fullmatch(s) for s in servers)
        ):
            raise Refused(400, f"item {n}: servers must be a list of http://host:port URLs")
        out.append(PullItem(_key(item.get("locator"), n), tuple(s.rstrip("/") for s in servers)))
    return out
