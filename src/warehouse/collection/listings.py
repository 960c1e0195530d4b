"""md5sum listings a client sends with a collection, checked in form.

A listing is a claim: the server cannot tell whether the digests are true
without reading every file. So it is checked in form here (one digest of 32
lowercase hex digits for each file of the manifest, no more, no fewer) and
then kept as the sender's own: it is shown to that user only, never to
another (docs/security.md).
"""

from __future__ import annotations

import json
import re

from warehouse.errors import UsageError
from warehouse.manifest import Manifest

__all__ = ["check_listing", "listing_text", "parse_listing"]

_MD5 = re.compile(r"[0-9a-f]{32}")


def check_listing(manifest: Manifest, file_md5s: object) -> dict[str, str]:
    """``file_md5s`` if it is a well-formed listing of exactly ``manifest``'s files.

    Raises UsageError naming the first file (or digest) that is wrong.
    """
    if not isinstance(file_md5s, dict):
        raise UsageError("file_md5s: want an object {path: md5}")
    paths = manifest.file_paths()
    for path, md5 in file_md5s.items():
        if path not in paths:
            raise UsageError(f"file_md5s: {path!r} is not a file of the manifest")
        if not isinstance(md5, str) or _MD5.fullmatch(md5) is None:
            raise UsageError(f"file_md5s: the digest of {path!r} is not 32 lowercase hex digits")
    if len(file_md5s) != len(paths):
        missing = next(p for p in manifest.files() if p not in file_md5s)
        raise UsageError(f"file_md5s: no digest for {missing!r}")
    return file_md5s


def listing_text(manifest: Manifest, file_md5s: dict[str, str] | None) -> str | None:
    """The listing as stored (JSON), or None when there is none or it is not well formed."""
    if file_md5s is None:
        return None
    try:
        checked = check_listing(manifest, file_md5s)
    except UsageError:
        return None
    return json.dumps(checked, ensure_ascii=False, separators=(",", ":"))


def parse_listing(text: str | None) -> dict[str, str] | None:
    if text is None:
        return None
    value = json.loads(text)
    assert isinstance(value, dict)
    return value
