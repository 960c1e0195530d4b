"""Block locators: ``md5+size`` plus optional hints (see docs/formats.md).

A locator names the bytes of one block. Hints (``+A…`` signatures, ``+K…``
cluster hints, anything else of the form ``[A-Z][A-Za-z0-9@_-]*``) ride along
verbatim and in order; they never change which data the locator names, so
equality of *data* is ``a.key == b.key``, not ``a == b``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from warehouse.errors import UsageError

__all__ = [
    "EMPTY_LOCATOR",
    "EMPTY_MD5",
    "MAX_BLOCK_SIZE",
    "Locator",
    "LocatorError",
]

MAX_BLOCK_SIZE = 64 * 1024 * 1024
EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"

_MD5 = re.compile(r"[0-9a-f]{32}")
_MD5_ANY_CASE = re.compile(r"[0-9a-fA-F]{32}")
# At most 8 digits: anything longer is over MAX_BLOCK_SIZE anyway, and the cap
# keeps int() away from huge strings.
_SIZE = re.compile(r"0|[1-9][0-9]{0,7}")
_DIGITS = re.compile(r"[0-9]+")
_HINT_A = re.compile(r"A[0-9a-f]+@[0-9a-f]{8}")
_HINT_K = re.compile(r"K[0-9a-f]*@[A-Za-z0-9_-]+")
_HINT_OTHER = re.compile(r"[A-Z][A-Za-z0-9@_-]*")


class LocatorError(UsageError):
    """A locator or hint that does not follow the grammar."""

    def __init__(self, token: str, reason: str) -> None:
        super().__init__(f"bad locator {token!r}: {reason}")
        self.token = token
        self.reason = reason

    def __reduce__(self) -> tuple[type[LocatorError], tuple[str, str]]:
        # The default pickling would call __init__ with the message only;
        # executors ship exceptions between processes.
        return (type(self), (self.token, self.reason))


def _hint_problem(hint: str) -> str | None:
    """Why ``hint`` is not a valid hint, or None when it is."""
    if not hint:
        return "empty hint"
    first = hint[0]
    if first == "A":
        ok = _HINT_A.fullmatch(hint) is not None
        return None if ok else f"bad signature hint {hint!r} (want A<hex>@<8 hex digits>)"
    if first == "K":
        ok = _HINT_K.fullmatch(hint) is not None
        return None if ok else f"bad cluster hint {hint!r} (want K[hex mask]@cluster)"
    if _HINT_OTHER.fullmatch(hint) is None:
        return f"bad hint {hint!r}"
    return None


@dataclass(frozen=True, slots=True)
class Locator:
    """One block: its MD5, its length and the hints that came with it."""

    md5: str
    size: int
    hints: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.md5, str) or _MD5.fullmatch(self.md5) is None:
            raise LocatorError(str(self.md5), "md5 must be 32 lowercase hex digits")
        # bool is an int subclass; a size of True is a bug, not a block.
        if type(self.size) is not int or not 0 <= self.size <= MAX_BLOCK_SIZE:
            raise LocatorError(f"{self.md5}+{self.size}", f"size must be 0..{MAX_BLOCK_SIZE}")
        for hint in self.hints:
            problem = _hint_problem(hint)
            if problem is not None:
                raise LocatorError("+".join((self.md5, str(self.size), *self.hints)), problem)

    @classmethod
    def parse(cls, text: str) -> Locator:
        """Parse ``md5+size[+hint…]`` strictly; raise LocatorError naming ``text``."""
        parts = text.split("+")
        md5 = parts[0]
        if _MD5.fullmatch(md5) is None:
            if _MD5_ANY_CASE.fullmatch(md5) is not None:
                raise LocatorError(text, "md5 must be lowercase hex")
            raise LocatorError(text, "md5 must be 32 lowercase hex digits")
        if len(parts) < 2:
            raise LocatorError(text, "missing +size")
        size_text = parts[1]
        if _SIZE.fullmatch(size_text) is None:
            if _DIGITS.fullmatch(size_text) is not None:
                if size_text[0] == "0":
                    raise LocatorError(text, "size has a leading zero")
                raise LocatorError(text, f"size over {MAX_BLOCK_SIZE}")
            raise LocatorError(text, "size must be a decimal number")
        size = int(size_text)
        if size > MAX_BLOCK_SIZE:
            raise LocatorError(text, f"size over {MAX_BLOCK_SIZE}")
        hints = tuple(parts[2:])
        for hint in hints:
            problem = _hint_problem(hint)
            if problem is not None:
                raise LocatorError(text, problem)
        return cls(md5, size, hints)

    @classmethod
    def for_data(cls, data: bytes | memoryview) -> Locator:
        """The locator (without hints) of a block holding exactly ``data``."""
        size = len(data) if isinstance(data, bytes) else data.nbytes
        if size > MAX_BLOCK_SIZE:
            raise LocatorError(f"<{size} bytes>", f"block over {MAX_BLOCK_SIZE} bytes")
        return cls(hashlib.md5(data).hexdigest(), size)

    def __str__(self) -> str:
        if self.hints:
            return "+".join((self.md5, str(self.size), *self.hints))
        return f"{self.md5}+{self.size}"

    @property
    def key(self) -> str:
        """``md5+size``: what identifies the data, whatever the hints."""
        return f"{self.md5}+{self.size}"

    def without_hints(self) -> Locator:
        return self if not self.hints else Locator(self.md5, self.size)

    def with_hint(self, hint: str) -> Locator:
        """Add ``hint``; an A or K hint replaces any existing hint of that letter."""
        problem = _hint_problem(hint)
        if problem is not None:
            raise LocatorError(hint, problem)
        letter = hint[0]
        if letter not in "AK":
            return Locator(self.md5, self.size, (*self.hints, hint))
        # Only one signature / one cluster hint makes sense; the new one takes
        # the place of the first old one so hint order otherwise stays put.
        kept: list[str] = []
        placed = False
        for old in self.hints:
            if old[0] == letter:
                if not placed:
                    kept.append(hint)
                    placed = True
            else:
                kept.append(old)
        if not placed:
            kept.append(hint)
        return Locator(self.md5, self.size, tuple(kept))

    def hint(self, letter: str) -> str | None:
        """The first hint starting with ``letter``, without the letter."""
        for hint in self.hints:
            if hint.startswith(letter):
                return hint[len(letter) :]
        return None

    @property
    def is_empty(self) -> bool:
        return self.size == 0 and self.md5 == EMPTY_MD5


EMPTY_LOCATOR = Locator(EMPTY_MD5, 0)
