"""Reads as sequencers deliver them: FASTQ or FASTA, gzip or plain, single or paired.

Pure functions over bytes and open binary files; the preprocess stage does
the I/O. What they decide (format, compression, quality encoding, how reads
pair, what was trimmed) is returned so the run can record it.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO

import numpy as np

_COMPLEMENT = bytes.maketrans(b"ACGTacgtN", b"TGCAtgcaN")


def revcomp(seq: str) -> str:
    return seq.encode().translate(_COMPLEMENT)[::-1].decode()


class BadReads(ValueError):
    """Input that is not reads as the assembler reads them; the message names the record."""


def name_of(header: bytes) -> str:
    """A record's header, short and printable, for a message."""
    text = header[:60].decode("ascii", "replace")
    return "".join(c if c.isprintable() else "?" for c in text) or "an empty line"


def fastq_sequences(data: bytes) -> list[bytes]:
    """The sequences of plain FASTQ records (four lines each; Windows line ends allowed)."""
    return [s for _, s, _ in fastq_records(data)]


def fastq_records(data: bytes, first: int = 1) -> list[tuple[bytes, bytes, bytes]]:
    """(header, sequence, quality) of FASTQ records of four lines each.

    Raises BadReads naming the first record that is not one: a truncated
    record, a header without ``@``, a third line without ``+``, or a quality
    line not as long as its sequence (records numbered from ``first``).
    """
    if data[:2] == b"\x1f\x8b":
        raise BadReads("gzip-compressed data where plain FASTQ was expected")
    lines = data.split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if any(line.endswith(b"\r") for line in lines[:4]):
        lines = [line.rstrip(b"\r") for line in lines]
    if lines and lines[0][:1] == b">":
        raise BadReads(f"record {first} ({name_of(lines[0])}) is FASTA, not FASTQ")
    heads, seqs, plus, quals = lines[0::4], lines[1::4], lines[2::4], lines[3::4]
    for i, (h, s, p, q) in enumerate(zip(heads, seqs, plus, quals, strict=False)):
        if h[:1] != b"@" or p[:1] != b"+" or len(s) != len(q):
            at = f"record {first + i} ({name_of(h)})"
            if h[:1] != b"@":
                raise BadReads(f"{at}: its header does not start with '@'")
            if p[:1] != b"+":
                raise BadReads(f"{at}: its third line does not start with '+'")
            raise BadReads(f"{at}: {len(s)} bases but {len(q)} quality values")
    if len(lines) % 4:
        i = len(lines) // 4
        raise BadReads(
            f"record {first + i} ({name_of(lines[4 * i])}) is truncated: "
            f"{len(lines) % 4} of its 4 lines"
        )
    return list(zip(heads, seqs, quals, strict=False))


def read_fasta(text: str) -> list[tuple[str, str]]:
    records: list[tuple[str, str]] = []
    header, parts = None, []  # type: ignore[var-annotated]
    for line in text.splitlines():
        if line.startswith(">"):
            if header is not None:
                records.append((header, "".join(parts)))
            header, parts = line[1:], []
        elif line:
            parts.append(line.strip())
    if header is not None:
        records.append((header, "".join(parts)))
    return records


# ---- opening files: gzip or plain, FASTQ or FASTA ----


def is_gzip(head: bytes) -> bool:
    return head[:2] == b"\x1f\x8b"


def open_reads(raw: IO[bytes]) -> tuple[IO[bytes], bool]:
    """The file's text (gunzipped when its magic bytes say gzip) and whether it was."""
    peek = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if is_gzip(peek):
        return gzip.GzipFile(fileobj=raw, mode="rb"), True  # type: ignore[return-value]
    return raw, False


Record = tuple[bytes, bytes, bytes | None]  # header, sequence, quality (None: FASTA)


def records(text: IO[bytes], batch: int = 100_000) -> Iterator[tuple[str, list[Record]]]:
    """Batches of records of an open FASTQ or FASTA file: (format, records).

    The format is told by the first byte (``@`` FASTQ, ``>`` FASTA); FASTA
    sequences may span lines. A gzip file cut short, or bytes that are
    neither, raise BadReads naming the record.
    """
    try:
        yield from _records(text, batch)
    except (OSError, EOFError, zlib.error) as e:
        raise BadReads(f"cannot be read to its end ({e.__class__.__name__}: {e})") from None


def _records(text: IO[bytes], batch: int) -> Iterator[tuple[str, list[Record]]]:
    first = text.readline()
    while first and not first.strip():
        first = text.readline()
    if not first:
        return
    if first[:1] == b">":
        yield from _fasta(text, first, batch)
    elif first[:1] == b"@":
        done = 1
        lines = [first]
        for line in text:
            lines.append(line)
            if len(lines) >= 4 * batch:
                got = fastq_records(b"".join(lines), done)
                done += len(got)
                yield "fastq", [(h, s, q) for h, s, q in got]
                lines = []
        got = fastq_records(b"".join(lines), done)
        yield "fastq", [(h, s, q) for h, s, q in got]
    else:
        raise BadReads(f"record 1 ({name_of(first.rstrip())}) is neither FASTQ (@) nor FASTA (>)")


def _fasta(text: IO[bytes], first: bytes, batch: int) -> Iterator[tuple[str, list[Record]]]:
    out: list[Record] = []
    header, parts = first.rstrip(b"\r\n"), []  # type: ignore[var-annotated]
    for line in text:
        if line[:1] == b">":
            out.append((header, b"".join(parts), None))
            header, parts = line.rstrip(b"\r\n"), []
            if len(out) >= batch:
                yield "fasta", out
                out = []
        else:
            parts.append(line.strip())
    out.append((header, b"".join(parts), None))
    yield "fasta", out


# ---- quality: encoding and trimming ----


def phred_offset(quals: Sequence[bytes]) -> int:
    """33 or 64, told by the quality characters seen.

    Phred+33 uses characters from ``!`` (33); Phred+64 (older Illumina)
    from ``@`` (64), in practice ``B`` (66) or above. Any character below
    ``;`` (59) can only be Phred+33; none below ``@`` with some above ``J``
    (74, Phred+33's highest in practice) is Phred+64; anything else is taken
    as Phred+33, today's encoding.
    """
    if not quals:
        return 33
    arr = np.frombuffer(b"".join(quals), dtype=np.uint8)
    if arr.size == 0:
        return 33
    low, high = int(arr.min()), int(arr.max())
    if low < 59:
        return 33
    if low >= 64 and high > 74:
        return 64
    return 33


def trim_points(quals: Sequence[bytes], offset: int, threshold: int) -> np.ndarray:
    """Where each read's low-quality tail starts (its kept length).

    The cut is where the sum of ``threshold - q`` over the bases after it is
    largest (the rule BWA's ``-q`` uses): a tail whose bases average below
    the threshold goes, one good base inside a bad tail does not keep it.
    """
    cut = np.array([len(q) for q in quals], dtype=np.int64)
    if threshold <= 0:
        return cut
    by_length: dict[int, list[int]] = {}
    for i, q in enumerate(quals):
        by_length.setdefault(len(q), []).append(i)
    for length, idx in by_length.items():
        if length == 0:
            continue
        grid = np.frombuffer(b"".join(quals[i] for i in idx), dtype=np.uint8).reshape(-1, length)
        score = threshold - (grid.astype(np.int64) - offset)
        # tail[:, j]: the sum over bases j.. to the end, reversed cumulative sums.
        tail = np.cumsum(score[:, ::-1], axis=1)[:, ::-1]
        best = np.argmax(tail, axis=1)
        keep = np.where(tail[np.arange(len(idx)), best] > 0, best, length)
        cut[idx] = keep
    return cut


# ---- pairs ----

_MATE = re.compile(rb"[/._ ][12]$")
_PAIR_FILE = re.compile(r"^(.*)([._-]R?)([12])((?:_\d+)?(?:\.[A-Za-z]+)*(?:\.gz)?)$")


def mate_key(header: bytes) -> bytes:
    """A read's name without its ``@``/``>``, comments, or ``/1`` ``/2`` mate mark."""
    name = header[1:].split(None, 1)[0] if len(header) > 1 else b""
    return _MATE.sub(b"", name)


def is_interleaved(headers: Sequence[bytes]) -> bool:
    """Records alternate first and second reads of pairs: each two share a name."""
    if len(headers) < 2 or len(headers) % 2:
        return False
    return all(
        mate_key(a) == mate_key(b) for a, b in zip(headers[0::2], headers[1::2], strict=True)
    )


def pair_files(paths: Sequence[str]) -> list[tuple[str, str | None]]:
    """Files grouped into pairs by name (``x_1.fq``/``x_2.fq``, ``x_R1_001.fastq.gz``/``x_R2…``).

    A file whose mate is missing stands alone. Sorted by the first file.
    """
    by_key: dict[tuple[str, str, str], dict[str, str]] = {}
    alone: list[str] = []
    for p in paths:
        m = _PAIR_FILE.match(p)
        if m is None:
            alone.append(p)
            continue
        by_key.setdefault((m.group(1), m.group(2), m.group(4)), {})[m.group(3)] = p
    out: list[tuple[str, str | None]] = [(p, None) for p in alone]
    for mates in by_key.values():
        if set(mates) == {"1", "2"}:
            out.append((mates["1"], mates["2"]))
        else:
            out.extend((p, None) for p in mates.values())
    return sorted(out)


# ---- the clean reads: one line each, a pair's mates split by a tab ----

_UPPER = bytes.maketrans(b"acgtn", b"ACGTN")
_NON_ACGT = re.compile(rb"[^ACGT]")


@dataclass
class Tally:
    """What preprocessing did, for the run's stats."""

    reads: int = 0
    pairs: int = 0
    bases_in: int = 0
    bases_out: int = 0
    trimmed_bases: int = 0
    trimmed_reads: int = 0
    reads_with_n: int = 0
    n_bases: int = 0
    empty_after_trim: int = 0


def clean(batch: Sequence[Record], offset: int, threshold: int, tally: Tally) -> list[bytes]:
    """Each read upper-cased, with any base other than ACGT as ``N``, its bad tail trimmed
    (qualities read with ``offset``, 33 or 64; FASTA reads are not trimmed)."""
    seqs = [s.translate(_UPPER) for _, s, _ in batch]
    tally.reads += len(seqs)
    tally.bases_in += sum(len(s) for s in seqs)
    quals = [q for _, _, q in batch if q is not None]
    if len(quals) == len(batch) and quals:
        cut = trim_points(quals, offset, threshold).tolist()
        for i, c in enumerate(cut):
            if c < len(seqs[i]):
                tally.trimmed_reads += 1
                tally.trimmed_bases += len(seqs[i]) - c
                seqs[i] = seqs[i][:c]
                if c == 0:
                    tally.empty_after_trim += 1
    out = []
    for s in seqs:
        s, n = _NON_ACGT.subn(b"N", s)
        if n:
            tally.reads_with_n += 1
            tally.n_bases += n
        tally.bases_out += len(s)
        out.append(s)
    return out
