"""Block-sized read buffers, reused from one GET to the next.

Reading a 64 MiB block into a fresh buffer costs the server more CPU in
page faults than the read itself; a reused buffer costs only the copy. A
buffer is reused only once nothing holds a view of it any more: the server
hands the buffer's bytes to the transport as a view (no copy), and the
transport may still be sending them after the response seems done.
"""

from __future__ import annotations

import threading

__all__ = ["BufferPool"]


class BufferPool:
    def __init__(self, size: int, keep: int = 4) -> None:
        self.size = size  # every buffer holds this many bytes
        self.keep = keep  # idle buffers kept at most
        self._idle: list[bytearray] = []
        self._lock = threading.Lock()

    def take(self) -> bytearray:
        with self._lock:
            for i, buf in enumerate(self._idle):
                if _unshared(buf):
                    return self._idle.pop(i)
        buf = bytearray(self.size + 1)
        del buf[-1]  # room to grow by one byte without moving: see _unshared
        return buf

    def give(self, buf: bytearray) -> None:
        """Back to the pool; taken again only once no view of it is left."""
        with self._lock:
            if len(self._idle) < self.keep:
                self._idle.append(buf)

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)


def _unshared(buf: bytearray) -> bool:
    # A bytearray cannot change size while any view of it exists (BufferError).
    # Growing by one byte and back stays within its allocation: no copy.
    try:
        buf.append(0)
    except BufferError:
        return False
    del buf[-1]
    return True
