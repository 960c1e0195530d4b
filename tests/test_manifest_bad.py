"""Malformed manifests: each must fail naming the exact line and token."""

from __future__ import annotations

import pytest

from warehouse.manifest import Manifest, ManifestError

L = "acbd18db4cc2f85cedef654fccc4a4d8+3"  # 3 bytes
E = "d41d8cd98f00b204e9800998ecf8427e+0"
NOT_HEX = "acbd18db4cc2f85cedef654fccc4a4dz+3"
OK = f". {L} 0:3:ok\n"  # a good line to put in front of a bad one

# (manifest text or bytes, line, token, words expected in the reason)
BAD: list[tuple[str | bytes, int, str, str]] = [
    # locators
    (f". {NOT_HEX} 0:3:a\n", 1, NOT_HEX, "hex"),
    (f". {L.upper()} 0:3:a\n", 1, L.upper(), "lowercase"),
    (". acbd18db4cc2f85cedef654fccc4a4+3 0:3:a\n", 1, "acbd18db4cc2f85cedef654fccc4a4+3", "hex"),
    (f"{OK}. {L[:-2]}+x 0:3:a\n", 2, f"{L[:-2]}+x", "decimal"),
    (f". {L[:-2]}+67108865 0:3:a\n", 1, f"{L[:-2]}+67108865", "size over"),
    (f". {L[:-2]}+03 0:3:a\n", 1, f"{L[:-2]}+03", "leading zero"),
    (f". {L[:-2]}+-3 0:3:a\n", 1, f"{L[:-2]}+-3", "decimal"),
    (f". {L[:-2]} 0:3:a\n", 1, L[:-2], "missing +size"),
    (f". {L}+k1@x 0:3:a\n", 1, f"{L}+k1@x", "bad hint"),
    (f". {L}+Anothex@12345678 0:3:a\n", 1, f"{L}+Anothex@12345678", "signature"),
    (f". {L}+K06 0:3:a\n", 1, f"{L}+K06", "cluster"),
    (". foo 0:3:a\n", 1, "foo", "bad locator"),
    # segments
    (f". {L} 00:3:a\n", 1, "00:3:a", "position has a leading zero"),
    (f". {L} 0:03:a\n", 1, "0:03:a", "length has a leading zero"),
    (f". {L} -1:3:a\n", 1, "-1:3:a", "position is not a decimal"),
    (f". {L} 0:x:a\n", 1, "0:x:a", "length is not a decimal"),
    (f". {L} 0:4:a\n", 1, "0:4:a", "past the end"),
    (f"{OK}{OK}. {L} {E} 0:2:a 3:1:b\n", 3, "3:1:b", "past the end"),
    (f". {L} 1:2\n", 1, "1:2", "position:length:name"),
    (f". {L} 0:0:\n", 1, "0:0:", "empty file name"),
    (f". {L} 9223372036854775808:0:a\n", 1, "9223372036854775808:0:a", "too large"),
    (f". {L} 0:99999999999999999999:a\n", 1, "0:99999999999999999999:a", "too large"),
    # file names
    (f". {L} 0:3:../a\n", 1, "0:3:../a", "'..'"),
    (f". {L} 0:3:a/./b\n", 1, "0:3:a/./b", "'.'"),
    (f". {L} 0:3:a//b\n", 1, "0:3:a//b", "''"),
    (f". {L} 0:3:a/\n", 1, "0:3:a/", "''"),
    (f". {L} 0:0:..\n", 1, "0:0:..", "'..'"),
    (f". {L} 0:3:/abs\n", 1, "0:3:/abs", "absolute"),
    (f". {L} 0:3:\\056\n", 1, "0:3:\\056", "marker with nonzero length"),
    (f". {L} 0:3:a\\057\\056\\056\\057b\n", 1, "0:3:a\\057\\056\\056\\057b", "'..'"),
    (f". {L} 0:3:a\\000b\n", 1, "0:3:a\\000b", "NUL"),
    (f". {L} 0:3:a\\09\n", 1, "0:3:a\\09", "bad escape"),
    (f". {L} 0:3:a\\400\n", 1, "0:3:a\\400", "over"),
    (f". {L} 0:3:a\\\n", 1, "0:3:a\\", "bad escape"),
    (f". {L} 0:3:\\377\n", 1, "0:3:\\377", "UTF-8"),
    # stream names
    (f"./a/.. {L} 0:3:a\n", 1, "./a/..", "'..'"),
    (f"./a/./b {L} 0:3:a\n", 1, "./a/./b", "'.'"),
    (f"./a//b {L} 0:3:a\n", 1, "./a//b", "''"),
    (f"./\\056\\056 {L} 0:3:a\n", 1, "./\\056\\056", "'..'"),
    (f"./a/ {L} 0:3:a\n", 1, "./a/", "ends in '/'"),
    (f"./ {L} 0:3:a\n", 1, "./", "ends in '/'"),
    (f"a {L} 0:3:a\n", 1, "a", "must be '.'"),
    (f".. {L} 0:3:a\n", 1, "..", "must be '.'"),
    (f"/a {L} 0:3:a\n", 1, "/a", "must be '.'"),
    (f"./a\\000 {L} 0:3:a\n", 1, "./a\\000", "NUL"),
    (f"./a\\9 {L} 0:3:a\n", 1, "./a\\9", "bad escape"),
    # a path that is a file and a directory: the file's line and token, and the directory's
    (f". {L} 0:3:a 0:0:a/\\056\n", 1, "0:3:a", "(line 1: '0:0:a/\\\\056')"),
    (f". {L} 0:3:a\n./a {E} 0:0:\\056\n", 1, "0:3:a", "(line 2: './a')"),
    (f"{OK}./x/y {E} 0:0:z\n./x {L} 0:3:y\n", 3, "0:3:y", "'x/y' is a file and also a directory"),
    (f"./d {L} 0:3:b/c 0:0:b\n", 1, "0:0:b", "(line 1: '0:3:b/c')"),
    # structure
    (f"{OK}. {L} 0:3:b", 2, "0:3:b", "missing newline"),
    (f". {L} 0:3:b\n.", 2, ".", "missing newline"),
    (f"{OK}\n{OK}", 2, "", "empty line"),
    ("\n", 1, "", "empty line"),
    (f"{OK}. 0:3:a\n", 2, "0:3:a", "no locator"),
    (".\n", 1, ".", "no locator"),
    (f". {L}\n", 1, L, "no segment"),
    (f". {L} {L}\n", 1, L, "no segment"),
    (f". {L} 0:3:a {L}\n", 1, L, "locator after a segment"),
    (f". {L} 0:3:a bogus\n", 1, "bogus", "bad segment"),
    # spacing and control characters
    (f". {L}  0:3:a\n", 1, "0:3:a", "two spaces"),
    (f"{OK}. {L} 0:3:a \n", 2, "0:3:a", "trailing space"),
    (f" . {L} 0:3:a\n", 1, ".", "leading space"),
    ("   \n", 1, "", "only spaces"),
    (f". {L}\t0:3:a\n", 1, f"{L}\t0:3:a", "tab"),
    (f". {L} 0:3:a\r\n", 1, "0:3:a\r", "control character"),
    (f". {L} 0:3:a\x00b\n", 1, "0:3:a\x00b", "control character"),
    (f". {L} 0:3:a\x1b\n", 1, "0:3:a\x1b", "control character"),
    # encoding
    (OK.encode() + f". {L} 0:3:\xff\n".encode("latin-1"), 2, "0:3:\\xff", "UTF-8"),
    (f". {L} 0:3:caf".encode() + b"\xc3(\n", 1, "0:3:caf\\xc3(", "UTF-8"),
]


def _id(case: tuple[str | bytes, int, str, str]) -> str:
    return f"line{case[1]}-{case[3]}-{case[2]!r}"[:60]


def test_table_is_big_enough() -> None:
    assert len(BAD) >= 30


@pytest.mark.parametrize(("text", "line", "token", "reason"), BAD, ids=[_id(c) for c in BAD])
def test_bad_manifest(text: str | bytes, line: int, token: str, reason: str) -> None:
    with pytest.raises(ManifestError) as info:
        Manifest.parse(text)
    err = info.value
    assert err.line == line, str(err)
    assert err.token == token, str(err)
    assert reason in err.reason, str(err)
    assert str(err).startswith(f"manifest line {line}: ")


@pytest.mark.parametrize(
    "text",
    [
        f". {L} 0:3:a:b\n",  # the first two colons delimit; the rest is the name
        f". {L} 0:0:\\056\n",  # marker for the root: harmless
        f". {L} 0:0:a/.\n",  # marker written without escaping
        f". {E} 0:0:a\n",
        f". {L}+Zunknown-hint@x_1 0:3:a\n",
        f". {L} 3:0:end\n",  # empty file at the very end of the data
        f". {L} 0:3:a\x7f\n",  # DEL is not a control byte here
    ],
)
def test_edge_cases_accepted(text: str) -> None:
    Manifest.parse(text)


def test_str_with_lone_surrogate_is_refused() -> None:
    with pytest.raises(ManifestError) as info:
        Manifest.parse(f"{OK}. {L} 0:3:a\udcff\n")
    assert (info.value.line, info.value.token) == (2, "0:3:a\udcff")
    assert "UTF-8" in info.value.reason
