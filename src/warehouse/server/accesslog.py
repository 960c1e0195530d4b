"""One line per request, without its secrets (ASGI middleware).

``client method path status in=BYTES out=BYTES user=NAME SECONDS``: the path
has every permission signature (``+A<sig>@<expiry>``) replaced by ``+A…``
and the value of every query parameter that may carry a secret (``token``,
``key``, ``sig``...) by ``…``; headers (``Authorization``, cookies) are never
logged. The user is whoever the server found the token to be (``-`` when it
did not ask: no token, or a signature that answered on its own).

Lines go to the ``warehouse.access`` logger; ``configure_access_log`` points
it at standard error, a file, or nowhere (``off``).
"""

from __future__ import annotations

import logging
import re
import sys
from urllib.parse import quote, unquote

from starlette.types import ASGIApp, Scope

from warehouse.server.observe import Exchange, Observer

__all__ = ["ACCESS_LOGGER", "AccessLog", "configure_access_log", "note_user", "redact"]

ACCESS_LOGGER = "warehouse.access"
_SCOPE_KEY = "warehouse.access"
_SIGNATURE = re.compile(r"\+A[0-9A-Za-z]*(@[0-9A-Za-z]*)?")
_PATH_SAFE = "/+@:=,;!$'()*-._~"
_QUERY_SAFE = _PATH_SAFE + "&?%"
# A signature in a query value may come percent-encoded: %2BA...%40...
_ENCODED_SIGNATURE = re.compile(r"(\+|%2[Bb])A[0-9A-Za-z]*((@|%40)[0-9A-Za-z]*)?")
_SECRET_PARAM = re.compile(r"token|key|sig|secret|password|auth", re.IGNORECASE)


def redact(path: str, query: str = "") -> str:
    """``path?query`` with signatures and secret-looking parameter values removed.

    The path is percent-encoded again (it arrives decoded), so a ``%0A`` in
    a request cannot start a forged line of the log.
    """
    out = _SIGNATURE.sub("+A…", quote(path, safe=_PATH_SAFE))
    if query:
        # The raw query (still percent-encoded as sent), parameter by parameter.
        shown = []
        for pair in quote(query, safe=_QUERY_SAFE).split("&"):
            key, eq, value = pair.partition("=")
            secret = _SECRET_PARAM.search(unquote(key))
            shown.append(
                f"{key}{eq}{'…' if secret and eq else _ENCODED_SIGNATURE.sub('+A…', value)}"
            )
        out += "?" + "&".join(shown)
    return out


def note_user(scope: Scope, user: str) -> None:
    """Tell the access log who made this request (a no-op without one)."""
    holder = scope.get(_SCOPE_KEY)
    if isinstance(holder, dict):
        holder["user"] = user


def configure_access_log(target: str) -> None:
    """``-`` or ``stderr``: standard error; ``off``: nothing; else a file to append to."""
    logger = logging.getLogger(ACCESS_LOGGER)
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    logger.propagate = False
    if target == "off":
        logger.disabled = True
        return
    logger.disabled = False
    logger.setLevel(logging.INFO)
    handler: logging.Handler
    if target in ("-", "stderr"):
        handler = logging.StreamHandler(sys.stderr)
    else:
        handler = logging.FileHandler(target, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s access %(message)s"))
    logger.addHandler(handler)


class AccessLog(Observer):
    def __init__(self, app: ASGIApp, logger_name: str = ACCESS_LOGGER) -> None:
        super().__init__(app)
        self.log = logging.getLogger(logger_name)

    def watching(self, scope: Scope) -> bool:
        if self.log.disabled:
            return False
        scope[_SCOPE_KEY] = {}  # note_user's holder
        return True

    def observed(self, scope: Scope, exchange: Exchange) -> None:
        client = scope.get("client")
        query = scope.get("query_string", b"").decode("latin-1")
        self.log.info(
            "%s %s %s %d in=%d out=%d user=%s %.3fs",
            client[0] if client else "-",
            scope["method"],
            redact(scope.get("path", ""), query),
            exchange.code,
            exchange.received,
            exchange.sent,
            scope[_SCOPE_KEY].get("user", "-"),
            exchange.seconds,
        )
