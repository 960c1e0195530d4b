"""AWS Signature Version 4, checked on the server (docs/s3-gateway.md).

The algorithm is AWS's, as its SDKs sign: a canonical request (method,
path, sorted query, the signed headers, the payload's SHA-256), a string to
sign over its hash and the credential's scope, and an HMAC-SHA256 chain
from the secret through the date, region and service. Both forms are
checked: the ``Authorization`` header and a presigned URL's query. Pure
functions: no I/O, the secret is looked up by the caller.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import quote, unquote

__all__ = [
    "ALGORITHM",
    "MAX_SKEW",
    "STREAMING_UNSIGNED_TRAILER",
    "UNSIGNED",
    "SigError",
    "SignedRequest",
    "canonical_query",
    "canonical_request",
    "check",
    "parse",
    "signature",
    "signing_key",
]

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED = "UNSIGNED-PAYLOAD"
# An aws-chunked body, unsigned, with a trailing checksum (botocore over HTTPS).
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
# How far a request's own time may be from ours (AWS: 15 minutes).
MAX_SKEW = 15 * 60
# The longest a presigned URL may live (AWS: 7 days).
MAX_EXPIRES = 7 * 24 * 3600

_DATE = re.compile(r"\d{8}T\d{6}Z")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SPACES = re.compile(r" +")


class SigError(Exception):
    """A request that is not signed as it must be: ``code`` is the S3 error code."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


def _malformed(message: str, presigned: bool) -> SigError:
    code = "AuthorizationQueryParametersError" if presigned else "AuthorizationHeaderMalformed"
    return SigError(code, message, 400)


@dataclass(frozen=True)
class SignedRequest:
    """What a request says of its own signature."""

    access_key_id: str
    scope_date: str  # YYYYMMDD
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str
    amz_date: str  # YYYYMMDDTHHMMSSZ
    presigned: bool
    expires: int | None = None  # seconds, presigned only

    @property
    def scope(self) -> str:
        return f"{self.scope_date}/{self.region}/{self.service}/aws4_request"


def _parse_credential(text: str, presigned: bool) -> tuple[str, str, str, str]:
    parts = text.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request" or not parts[0]:
        raise _malformed(
            f"the credential {text[:120]!r} is not KEY/DATE/REGION/SERVICE/aws4_request", presigned
        )
    if not re.fullmatch(r"\d{8}", parts[1]):
        raise _malformed("the credential's date is not YYYYMMDD", presigned)
    return parts[0], parts[1], parts[2], parts[3]


def parse(query: list[tuple[str, str]], headers: dict[str, str]) -> SignedRequest | None:
    """The signature a request carries (its query's, else its header's);
    None for an unsigned request. ``query`` is decoded, ``headers`` keyed in
    lower case. SigError for one that is malformed."""
    params = dict(query)
    if "X-Amz-Signature" in params or "X-Amz-Algorithm" in params:
        return _parse_presigned(params)
    auth = headers.get("authorization")
    if auth is None:
        if "AWSAccessKeyId" in params:  # a presigned URL of Signature Version 2
            raise SigError(
                "InvalidRequest", "only AWS Signature Version 4 (AWS4-HMAC-SHA256) is accepted", 400
            )
        return None
    algorithm, _, rest = auth.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise SigError(
            "InvalidRequest", "only AWS Signature Version 4 (AWS4-HMAC-SHA256) is accepted", 400
        )
    fields: dict[str, str] = {}
    for item in rest.split(","):
        key, sep, value = item.strip().partition("=")
        if sep:
            fields[key] = value
    missing = [f for f in ("Credential", "SignedHeaders", "Signature") if f not in fields]
    if missing:
        raise _malformed(f"the Authorization header lacks {', '.join(missing)}", False)
    key, date, region, service = _parse_credential(fields["Credential"], False)
    amz_date = headers.get("x-amz-date", "")
    if not _DATE.fullmatch(amz_date):
        raise SigError("AccessDenied", "x-amz-date is missing or not YYYYMMDDTHHMMSSZ", 403)
    return SignedRequest(
        key,
        date,
        region,
        service,
        tuple(fields["SignedHeaders"].split(";")),
        fields["Signature"],
        amz_date,
        presigned=False,
    )


def _parse_presigned(params: dict[str, str]) -> SignedRequest:
    needed = (
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
        "X-Amz-Expires",
    )
    missing = [p for p in needed if p not in params]
    if missing:
        raise _malformed(f"the query lacks {', '.join(missing)}", True)
    if params["X-Amz-Algorithm"] != ALGORITHM:
        raise _malformed(f"X-Amz-Algorithm must be {ALGORITHM}", True)
    key, date, region, service = _parse_credential(params["X-Amz-Credential"], True)
    expires_text = params["X-Amz-Expires"]
    digits = expires_text.isascii() and expires_text.isdigit()  # int() refuses "²"
    if not digits or not 0 < int(expires_text) <= MAX_EXPIRES:
        raise _malformed(f"X-Amz-Expires must be 1 to {MAX_EXPIRES} seconds", True)
    if not _DATE.fullmatch(params["X-Amz-Date"]):
        raise _malformed("X-Amz-Date is not YYYYMMDDTHHMMSSZ", True)
    return SignedRequest(
        key,
        date,
        region,
        service,
        tuple(params["X-Amz-SignedHeaders"].split(";")),
        params["X-Amz-Signature"],
        params["X-Amz-Date"],
        presigned=True,
        expires=int(expires_text),
    )


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def canonical_query(raw_query: str, *, drop_signature: bool) -> str:
    """The query as signed: each name and value decoded, encoded again the
    one way SigV4 writes them, sorted."""
    pairs: list[tuple[str, str]] = []
    for item in raw_query.split("&"):
        if not item:
            continue
        key, _, value = item.partition("=")
        key, value = unquote(key), unquote(value)
        if drop_signature and key == "X-Amz-Signature":
            continue
        pairs.append((_encode(key), _encode(value)))
    pairs.sort()
    return "&".join(f"{k}={v}" for k, v in pairs)


def canonical_request(
    method: str,
    uri: str,
    query: str,
    headers: dict[str, str],
    signed: Iterable[str],
    payload_hash: str,
) -> str:
    signed = list(signed)
    lines = [method, uri, query]
    lines += [f"{h}:{_SPACES.sub(' ', headers.get(h, '').strip())}" for h in signed]
    return "\n".join([*lines, "", ";".join(signed), payload_hash])


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def signature(key: bytes, amz_date: str, scope: str, canonical: str) -> str:
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{digest}"
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def _when(amz_date: str) -> float:
    return float(calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ")))


def check(
    signed: SignedRequest,
    secret: str,
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: dict[str, str],
    now: Callable[[], float] = time.time,
) -> str:
    """Check ``signed`` against the request with ``secret``; return the
    payload's hash as signed (a hex SHA-256 the body must then match, or
    ``UNSIGNED-PAYLOAD``). SigError when it does not hold.

    The path is tried as it came (S3's SDKs sign the path they send) and,
    failing that, decoded and encoded once again (as AWS says to)."""
    if signed.amz_date[:8] != signed.scope_date:
        raise _malformed("the credential's date is not the request's", signed.presigned)
    if signed.service != "s3":
        raise _malformed(
            f"the credential's service is {signed.service!r}, not s3", signed.presigned
        )
    if "host" not in signed.signed_headers:
        raise _malformed("the host header must be signed", signed.presigned)
    at, clock = _when(signed.amz_date), now()
    if signed.presigned:
        assert signed.expires is not None
        if clock > at + signed.expires:
            raise SigError("AccessDenied", "Request has expired", 403)
        if at > clock + MAX_SKEW:
            raise SigError("AccessDenied", "the request's X-Amz-Date is in the future", 403)
        payload = headers.get("x-amz-content-sha256", UNSIGNED)
    else:
        if abs(clock - at) > MAX_SKEW:
            raise SigError(
                "RequestTimeTooSkewed",
                "the difference between the request time and the server's is too large",
                403,
            )
        payload = headers.get("x-amz-content-sha256", "")
        if not payload:
            raise SigError("InvalidRequest", "x-amz-content-sha256 is missing", 400)
    if payload == STREAMING_UNSIGNED_TRAILER and not signed.presigned:
        pass  # an aws-chunked body with a trailing checksum (s3chunked.py)
    elif payload != UNSIGNED and not _HEX64.fullmatch(payload):
        raise SigError(
            "NotImplemented",
            f"x-amz-content-sha256 {payload[:64]!r}: only a SHA-256, UNSIGNED-PAYLOAD or "
            f"{STREAMING_UNSIGNED_TRAILER} is taken",
            501,
        )
    key = signing_key(secret, signed.scope_date, signed.region, signed.service)
    query = canonical_query(raw_query, drop_signature=signed.presigned)
    again = quote(unquote(raw_path), safe="/~")
    for uri in dict.fromkeys((raw_path, again)):
        canonical = canonical_request(method, uri, query, headers, signed.signed_headers, payload)
        want = signature(key, signed.amz_date, signed.scope, canonical)
        if hmac.compare_digest(want, signed.signature):
            return payload
    raise SigError(
        "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided. "
        "Check your key and signing method.",
        403,
    )
