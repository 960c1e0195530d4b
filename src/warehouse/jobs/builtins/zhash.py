"""zhash: hash every file, decompressed, one md5sum-style listing per stream.

Step 0 queues one level-1 step per input stream. Each decompresses gzip,
bzip2 or xz (recognized by magic bytes, not by name; anything else is hashed
as it is), hashes with the parameter ``algorithm`` (md5, sha1, sha256,
sha512 or blake2b; default md5) and writes ``<algorithm>sum.txt`` into the
same stream of the output: ``<hex>  <name>`` lines as ``zcat f | md5sum``
would give, in the stream's file order.
"""

from __future__ import annotations

import bz2
import hashlib
import lzma
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from warehouse import step
from warehouse.manifest import md5sum_line

ALGORITHMS = ("md5", "sha1", "sha256", "sha512", "blake2b")
FEED = 1 << 20  # compressed bytes per call: bounds the memory a bomb can take

MAGIC: list[tuple[bytes, Callable[[], Any]]] = [
    (b"\x1f\x8b", lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)),
    (b"BZh", bz2.BZ2Decompressor),
    (b"\xfd7zXZ\x00", lzma.LZMADecompressor),
]


def decompressed(chunks: Iterable[bytes | memoryview]) -> Iterator[bytes]:
    it = iter(chunks)
    head = b""
    for chunk in it:  # enough bytes to see the magic
        head += bytes(chunk)
        if len(head) >= 6:
            break
    make = next((m for magic, m in MAGIC if head.startswith(magic)), None)
    if make is None:
        yield head
        yield from (bytes(c) for c in it)
        return
    d = make()
    for chunk in _chain(head, it):
        data = bytes(chunk)
        for i in range(0, len(data), FEED):
            piece = data[i : i + FEED]
            while piece:
                yield d.decompress(piece)
                piece = b""
                if d.eof:  # concatenated members, as zcat reads them
                    piece, d = d.unused_data, make()


def _chain(head: bytes, rest: Iterator[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    yield head
    yield from rest


def main() -> None:
    algorithm = step.params().get("algorithm", "md5")
    if algorithm not in ALGORITHMS:
        raise SystemExit(f"zhash: unknown algorithm {algorithm!r} (one of {ALGORITHMS})")
    if step.number() == 0:
        names = list(dict.fromkeys(s.name for s in step.input_manifest().streams))
        if names:
            step.queue(1, *names)
        return
    stream = step.step_input()
    prefix = "" if stream == "." else stream[2:] + "/"
    lines = []
    for entry in step.stream_files(stream):
        h = hashlib.new(algorithm)
        for data in decompressed(step.reader().iter_file(entry.path)):
            h.update(data)
        lines.append(md5sum_line(h.hexdigest(), entry.path.removeprefix(prefix)) + "\n")
    if lines:
        out = step.StreamWriter(stream)
        out.add_file(f"{algorithm}sum.txt", ["".join(lines).encode()])
        step.output(out.finish())


if __name__ == "__main__":
    main()
