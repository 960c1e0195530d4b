"""httpx, imported without the parts a client of ours never runs.

httpcore imports trio whenever it is installed (the mount extra brings it),
only to tell later whether it runs under trio; httpx imports its command
line tool (rich, pygments) when it can. Neither is used here, and the two
were most of a remote command's start (docs/latency.md). Both libraries
fall back as when the package is not installed. A process that imported
either first (``wh mount`` imports trio itself) gets them as usual.
"""

from __future__ import annotations

import sys

__all__ = ["httpx"]

_SKIPPED = ("trio", "httpx._main")


def _load() -> None:
    if "httpx" in sys.modules or "httpcore" in sys.modules:
        return
    skipped = [m for m in _SKIPPED if m not in sys.modules]
    for m in skipped:
        sys.modules[m] = None  # type: ignore[assignment]  # import fails: the fallback
    try:
        # httpx imports httpcore only when its first client is made: now.
        import httpcore  # noqa: F401
        import httpx  # noqa: F401
    finally:
        for m in skipped:
            if sys.modules.get(m, ...) is None:
                del sys.modules[m]


_load()

import httpx  # noqa: E402  (after _load, which must come first)
