"""Bodies in ``aws-chunked`` encoding with an unsigned payload and a
trailing checksum (``STREAMING-UNSIGNED-PAYLOAD-TRAILER``), as botocore
sends a PutObject or a part over HTTPS: ``HEX-SIZE\\r\\nDATA\\r\\n`` chunks,
a ``0`` chunk, then trailer lines such as ``x-amz-checksum-crc32:BASE64``.
Decoded as it comes, with a bound on every line; the checksum is checked
at the end (CRC32, SHA-1, SHA-256; others are taken unchecked)."""

from __future__ import annotations

import base64
import hashlib
import zlib
from typing import Any

from warehouse.gateways.s3xml import S3Error

__all__ = ["ChunkedBody"]

# A chunk-size line, a trailer line: short (an extension may follow the size).
_MAX_LINE = 4096


class _Crc32:
    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = zlib.crc32(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(4, "big")


def _checker(name: str) -> Any:
    if name == "x-amz-checksum-crc32":
        return _Crc32()
    if name == "x-amz-checksum-sha1":
        return hashlib.sha1(usedforsecurity=False)
    if name == "x-amz-checksum-sha256":
        return hashlib.sha256()
    return None


def _bad(message: str) -> S3Error:
    return S3Error("IncompleteBody", f"aws-chunked body: {message}", 400)


class ChunkedBody:
    """Decode an aws-chunked body fed in any pieces."""

    def __init__(self, trailer: str | None) -> None:
        self.trailer = (trailer or "").strip().lower()
        self.check = _checker(self.trailer) if self.trailer else None
        self._buf = bytearray()
        self._left = -1  # data bytes left in this chunk; -1: a size line is next
        self._after_data = False  # the CRLF after a chunk's data is next
        self.done = False  # the last chunk and the trailers have come
        self._trailers: dict[str, str] = {}
        self._in_trailers = False

    def _line(self) -> str | None:
        at = self._buf.find(b"\r\n")
        if at < 0:
            if len(self._buf) > _MAX_LINE:
                raise _bad("a line is too long")
            return None
        line = bytes(self._buf[:at]).decode("ascii", "replace")
        del self._buf[: at + 2]
        return line

    def feed(self, data: bytes) -> list[bytes]:
        """The payload bytes ``data`` completes."""
        if self.done:
            if data.strip():
                raise _bad("bytes after its end")
            return []
        self._buf += data
        out: list[bytes] = []
        while not self.done:
            if self._left > 0:
                if not self._buf:
                    break
                take = bytes(self._buf[: self._left])
                del self._buf[: len(take)]
                self._left -= len(take)
                if self.check is not None:
                    self.check.update(take)
                out.append(take)
                if self._left == 0:
                    self._after_data = True
                continue
            if self._after_data:
                if len(self._buf) < 2:
                    break
                if self._buf[:2] != b"\r\n":
                    raise _bad("a chunk is longer than its size")
                del self._buf[:2]
                self._after_data = False
                self._left = -1
                continue
            line = self._line()
            if line is None:
                break
            if self._in_trailers:
                if not line:
                    self.done = True
                    break
                name, sep, value = line.partition(":")
                if not sep:
                    raise _bad("a trailer is not NAME:VALUE")
                self._trailers[name.strip().lower()] = value.strip()
                continue
            size_text = line.split(";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _bad("a chunk size is not hexadecimal") from None
            if size < 0:
                raise _bad("a chunk size is negative")
            if size == 0:
                self._in_trailers = True
                continue
            self._left = size
        return out

    def finish(self) -> None:
        """Check that the body ended whole, and its trailing checksum."""
        if not self.done:
            raise _bad("it ended before its last chunk")
        if self.trailer and self.trailer not in self._trailers:
            raise _bad(f"the trailer {self.trailer} did not come")
        if self.check is not None:
            want = base64.b64encode(self.check.digest()).decode()
            if self._trailers[self.trailer] != want:
                raise S3Error("BadDigest", f"the {self.trailer} sent is not the body's", 400)
