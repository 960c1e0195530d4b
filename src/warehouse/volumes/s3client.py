"""Where an S3 volume lives and how it is asked: the spec, the client, the errors.

``s3://BUCKET/PREFIX?endpoint=URL&region=NAME&capacity=SIZE`` names a
bucket (and a key prefix) of any S3-compatible store; ``capacity`` bounds
what the volume takes (docs/s3.md, "A keep server with local and S3
volumes"). Credentials never appear in a spec: boto3 finds them as it
always does (``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``,
``AWS_PROFILE``, ``~/.aws/credentials``, an instance role). Retries are
botocore's "standard" mode: 500, 503 SlowDown, throttling and connection
errors are retried with exponential backoff and jitter, a bounded number
of times; what still fails is an OSError naming the volume, so callers
treat it as they treat a failing disk.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from warehouse.blocks.diskcache import parse_size
from warehouse.errors import UsageError

if TYPE_CHECKING:
    from botocore.client import BaseClient

__all__ = ["MAX_ATTEMPTS", "S3Location", "make_client", "max_attempts", "s3_error", "status_of"]

# Attempts per request, first included (botocore's standard mode backs off
# exponentially with jitter between them, up to 20 s); WH_S3_MAX_ATTEMPTS
# changes it (1 to 20).
MAX_ATTEMPTS = 5


def max_attempts() -> int:
    text = os.environ.get("WH_S3_MAX_ATTEMPTS", "").strip()
    if not text:
        return MAX_ATTEMPTS
    if not text.isdigit() or not 1 <= int(text) <= 20:
        raise UsageError(f"WH_S3_MAX_ATTEMPTS: {text!r} is not a whole number from 1 to 20")
    return int(text)


_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-_]{1,62}")
_OPTIONS = ("endpoint", "region", "capacity")


@dataclass(frozen=True, slots=True)
class S3Location:
    bucket: str
    prefix: str  # "" or ends with "/"
    endpoint: str | None
    region: str | None
    capacity: int | None = None  # bytes the volume may hold; None: the store's limit

    @classmethod
    def parse(cls, spec: str) -> S3Location:
        parts = urlsplit(spec)
        if parts.scheme != "s3" or not parts.netloc:
            raise UsageError(f"not an S3 volume: {spec!r} (s3://BUCKET/PREFIX?endpoint=URL)")
        if "@" in parts.netloc:
            raise UsageError(
                f"{spec!r}: credentials do not belong in a volume spec "
                "(use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or ~/.aws/credentials)"
            )
        if not _BUCKET.fullmatch(parts.netloc):
            raise UsageError(f"{spec!r}: {parts.netloc!r} is not a bucket name")
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(query) - set(_OPTIONS))
        if unknown:
            raise UsageError(
                f"{spec!r}: unknown option {unknown[0]!r} (known: endpoint, region, capacity)"
            )
        if any(len(v) > 1 for v in query.values()):
            raise UsageError(f"{spec!r}: an option is given twice")
        endpoint = query.get("endpoint", [""])[0] or None
        if endpoint is not None and urlsplit(endpoint).scheme not in ("http", "https"):
            raise UsageError(f"{spec!r}: the endpoint must be an http:// or https:// URL")
        prefix = parts.path.strip("/")
        if any(p in ("", ".", "..") for p in prefix.split("/")) and prefix:
            raise UsageError(f"{spec!r}: {prefix!r} is not a key prefix")
        region = query.get("region", [""])[0] or None
        capacity = None
        if "capacity" in query:
            try:
                capacity = parse_size(query["capacity"][0])
            except ValueError as e:
                raise UsageError(f"{spec!r}: capacity: {e}") from None
        return cls(parts.netloc, f"{prefix}/" if prefix else "", endpoint, region, capacity)

    @property
    def name(self) -> str:
        """The spec without options: what errors and logs show."""
        return f"s3://{self.bucket}/{self.prefix}"


def make_client(location: S3Location, *, max_pool: int = 32) -> BaseClient:
    """A thread-safe S3 client for the location (boto3 loads here, not before)."""
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"total_max_attempts": max_attempts(), "mode": "standard"},
        connect_timeout=10,
        read_timeout=60,
        max_pool_connections=max_pool,
        # Another store than AWS is reached by path (bucket names there
        # need no DNS entry); AWS itself picks its own style.
        s3={"addressing_style": "path" if location.endpoint else "auto"},
        # Checksums only where the operation needs one: stores other than
        # AWS refuse the newer default headers, and every block is checked
        # by its MD5 anyway (Content-MD5 on each PUT, the name on each read).
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    session = boto3.session.Session()
    region = location.region or session.region_name or "us-east-1"
    client: BaseClient = session.client(
        "s3", endpoint_url=location.endpoint, region_name=region, config=config
    )
    return client


def status_of(error: BaseException) -> tuple[int, str]:
    """An S3 error's HTTP status and code; (0, "") for one with no answer."""
    response: Any = getattr(error, "response", None)
    if not isinstance(response, dict):
        return 0, ""
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    code = str(response.get("Error", {}).get("Code", ""))
    return int(status), code


def s3_error(volume: str, what: str, error: BaseException) -> OSError:
    """The OSError a failed request becomes, naming the volume: keepd then
    tries another volume or answers 503, fsck reports the block unreadable."""
    status, code = status_of(error)
    if status:
        if not code or code.isdigit():  # a HEAD's answer has no body to name it
            code = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        reason = f"{code or 'error'} (HTTP {status})"
        if status in (401, 403):
            reason += ": check the credentials and the bucket's policy"
    else:
        reason = str(error) or type(error).__name__
    err = errno.EACCES if status in (401, 403) else errno.EIO
    return OSError(err, f"S3 volume {volume}: {what}: {reason}")
