"""The base of every unnamed scratch file: closed by ``close()`` or with
its object. Apart from ``scratch.py`` so that a stored text (``wh ls``)
loads none of a put's scratch records (docs/latency.md)."""

from __future__ import annotations

from typing import IO

__all__ = ["ScratchFile"]


class ScratchFile:
    """Holds one unnamed scratch file (``_file``, opened by the subclass),
    closed by close() or with the object."""

    _file: IO[bytes]

    def close(self) -> None:
        self._file.close()

    def __del__(self) -> None:
        # Dropped unclosed (by a library caller): its scratch file goes with
        # it, as an unnamed file would at exit anyway.
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()
