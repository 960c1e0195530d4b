"""Block locators: parsing, formatting, hints."""

from __future__ import annotations

import hashlib
import pickle

import pytest

from warehouse.blocks import (
    EMPTY_LOCATOR,
    EMPTY_MD5,
    MAX_BLOCK_SIZE,
    Locator,
    LocatorError,
)
from warehouse.errors import UsageError

MD5 = "acbd18db4cc2f85cedef654fccc4a4d8"  # md5(b"foo")
SIG = "A" + "0123456789abcdef" * 4 + "@65f1a2b3"


def test_parse_plain() -> None:
    loc = Locator.parse(f"{MD5}+3")
    assert loc == Locator(MD5, 3)
    assert loc.hints == ()
    assert str(loc) == f"{MD5}+3"
    assert loc.key == f"{MD5}+3"


def test_parse_keeps_hints_verbatim_and_in_order() -> None:
    text = f"{MD5}+3+K06@templeton+Zfuture-hint_1@x+{SIG}"
    loc = Locator.parse(text)
    assert loc.hints == ("K06@templeton", "Zfuture-hint_1@x", SIG)
    assert str(loc) == text
    assert loc.key == f"{MD5}+3"
    assert loc.without_hints() == Locator(MD5, 3)


@pytest.mark.parametrize(
    "text",
    [
        f"{MD5}+0",
        f"{MD5}+{MAX_BLOCK_SIZE}",
        f"{MD5}+3+K@remote",
        f"{MD5}+3+K1@c-1_x",
        f"{MD5}+3+A1@00000000",
        f"{MD5}+3+Q",
    ],
)
def test_parse_accepts(text: str) -> None:
    assert str(Locator.parse(text)) == text


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "32 lowercase hex"),
        ("acbd18db4cc2f85cedef654fccc4a4d+3", "32 lowercase hex"),
        ("acbd18db4cc2f85cedef654fccc4a4d8a+3", "32 lowercase hex"),
        ("ACBD18DB4CC2F85CEDEF654FCCC4A4D8+3", "lowercase"),
        ("acbd18db4cc2f85cedef654fccc4a4g8+3", "32 lowercase hex"),
        (MD5, "missing +size"),
        (f"{MD5}+", "decimal"),
        (f"{MD5}+-1", "decimal"),
        (f"{MD5}+03", "leading zero"),
        (f"{MD5}+00", "leading zero"),
        (f"{MD5}+{MAX_BLOCK_SIZE + 1}", "size over"),
        (f"{MD5}+123456789012345678901234567890", "size over"),
        (f"{MD5}+3x", "decimal"),
        (f"{MD5}+3+", "empty hint"),
        (f"{MD5}+3+k06@x", "bad hint"),
        (f"{MD5}+3+Axyz@12345678", "signature"),
        (f"{MD5}+3+A0123@1234", "signature"),
        (f"{MD5}+3+A0123@ABCDEF01", "signature"),
        (f"{MD5}+3+K06", "cluster"),
        (f"{MD5}+3+KZZ@x", "cluster"),
        (f"{MD5}+3+K@", "cluster"),
        (f"{MD5}+3+Hx.y", "bad hint"),
    ],
)
def test_parse_refuses(text: str, reason: str) -> None:
    with pytest.raises(LocatorError) as info:
        Locator.parse(text)
    assert info.value.token == text
    assert reason in info.value.reason
    assert repr(text) in str(info.value)
    assert isinstance(info.value, UsageError)


def test_constructor_validates() -> None:
    with pytest.raises(LocatorError):
        Locator(MD5.upper(), 3)
    with pytest.raises(LocatorError):
        Locator(MD5, -1)
    with pytest.raises(LocatorError):
        Locator(MD5, MAX_BLOCK_SIZE + 1)
    with pytest.raises(LocatorError):
        Locator(MD5, True)
    with pytest.raises(LocatorError):
        Locator(MD5, 3, ("bad",))


def test_for_data() -> None:
    assert Locator.for_data(b"foo") == Locator(MD5, 3)
    assert Locator.for_data(memoryview(b"foo")) == Locator(MD5, 3)
    # A memoryview of wider items counts bytes, not items.
    words = memoryview(bytearray(8)).cast("I")
    assert Locator.for_data(words).size == 8
    assert Locator.for_data(b"") == EMPTY_LOCATOR
    assert Locator.for_data(b"x" * 1000).md5 == hashlib.md5(b"x" * 1000).hexdigest()


def test_empty_locator() -> None:
    assert EMPTY_LOCATOR.md5 == EMPTY_MD5 == hashlib.md5(b"").hexdigest()
    assert str(EMPTY_LOCATOR) == "d41d8cd98f00b204e9800998ecf8427e+0"
    assert EMPTY_LOCATOR.is_empty
    assert Locator.parse("d41d8cd98f00b204e9800998ecf8427e+0+K@x").is_empty
    assert not Locator(MD5, 3).is_empty
    assert not Locator(EMPTY_MD5, 1).is_empty


def test_with_hint_replaces_signature_and_cluster() -> None:
    loc = Locator.parse(f"{MD5}+3+K06@a+Zx+{SIG}")
    signed = loc.with_hint("Affff@00000001")
    assert signed.hints == ("K06@a", "Zx", "Affff@00000001")
    moved = signed.with_hint("K@b")
    assert moved.hints == ("K@b", "Zx", "Affff@00000001")
    extra = moved.with_hint("Zx")
    assert extra.hints == ("K@b", "Zx", "Affff@00000001", "Zx")
    assert Locator(MD5, 3).with_hint("K1@c").hints == ("K1@c",)
    with pytest.raises(LocatorError):
        loc.with_hint("lower")
    with pytest.raises(LocatorError):
        loc.with_hint("")


def test_with_hint_drops_duplicate_letters() -> None:
    loc = Locator(MD5, 3, ("K1@a", "Zx", "K2@b"))
    assert loc.with_hint("K4@c").hints == ("K4@c", "Zx")


def test_hint_lookup() -> None:
    loc = Locator.parse(f"{MD5}+3+K06@templeton+{SIG}")
    assert loc.hint("K") == "06@templeton"
    assert loc.hint("A") == SIG[1:]
    assert loc.hint("Z") is None


def test_locators_are_values() -> None:
    a = Locator.parse(f"{MD5}+3+K@x")
    b = Locator.parse(f"{MD5}+3+K@x")
    assert a == b
    assert hash(a) == hash(b)
    assert a != a.without_hints()
    assert a.key == a.without_hints().key
    with pytest.raises(AttributeError):
        a.size = 4  # type: ignore[misc]


def test_locator_error_pickles() -> None:
    with pytest.raises(LocatorError) as info:
        Locator.parse("nope")
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.token, copy.reason, str(copy)) == (
        info.value.token,
        info.value.reason,
        str(info.value),
    )


def test_public_names() -> None:
    import warehouse.blocks.locator as module

    assert set(module.__all__) == {
        "EMPTY_LOCATOR",
        "EMPTY_MD5",
        "MAX_BLOCK_SIZE",
        "Locator",
        "LocatorError",
    }
