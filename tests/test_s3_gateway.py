"""The S3 gateway of `wh serve` with boto3 and raw signed requests: listings
equal `wh ls`, bytes and ranges exact, puts and multipart uploads make new
collections and move the name, bad signatures and bad keys are refused, and
private mode hides what a user may not read (docs/s3-gateway.md)."""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
import os
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from cluster import KeepPool
from s3gw_helpers import Gateway, gateway
from warehouse import catalog
from warehouse.catalog import auth
from warehouse.gateways.s3sigv4 import (
    SigError,
    canonical_request,
    check,
    parse,
    signature,
    signing_key,
)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, keep_servers: KeepPool) -> Iterator[Gateway]:
    with gateway(tmp_path_factory.mktemp("s3gw") / "c.db", keep_servers) as g:
        yield g


def _tree(root: Path) -> dict[str, bytes]:
    files = {
        "a.txt": b"hello world\n",
        "sub/b.bin": os.urandom(300_000),
        "sub/deeper/c d.txt": b"spaces and more\n",
        "z+plus=eq.txt": b"odd characters\n",
        "empty": b"",
    }
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return files


def _error(e: ClientError) -> tuple[int, str]:
    return e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"]


def _signed(
    gw: Gateway,
    key_id: str,
    secret: str,
    method: str,
    path: str,
    body: bytes = b"",
    query: str = "",
) -> tuple[int, bytes]:
    """A request with its path exactly as written, signed with the
    gateway's own SigV4 functions: botocore and urllib3 take dot segments
    out of a path before they sign and send it (the botocore test above
    checks those functions against botocore's signer)."""
    host = urlsplit(gw.url).netloc
    amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": host, "x-amz-date": amz_date, "x-amz-content-sha256": payload}
    signed = sorted(headers)
    # ``query`` as SigV4 writes it (names sorted, values encoded), sent as it is.
    canonical = canonical_request(method, path, query, headers, signed, payload)
    scope = f"{amz_date[:8]}/us-east-1/s3/aws4_request"
    sig = signature(
        signing_key(secret, amz_date[:8], "us-east-1", "s3"), amz_date, scope, canonical
    )
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, "
        f"SignedHeaders={';'.join(signed)}, Signature={sig}"
    )
    parts = urlsplit(gw.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        target = f"{path}?{query}" if query else path
        conn.putrequest(method, target, skip_accept_encoding=True, skip_host=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def test_botocore_signatures_check_and_tampered_ones_fail() -> None:
    creds = Credentials("WHS3AAAAAAAAAAAAAAAA", "s3cr3t")
    for path in (
        "/s3/b/k",
        "/s3/b/a%20b/c%2Bd",
        "/s3/b/%C3%A9t%C3%A9",
        "/s3/b?list-type=2&prefix=a%2Fb",
    ):
        request = AWSRequest(method="GET", url="http://127.0.0.1:9/" + path.lstrip("/"))
        request.headers["x-amz-content-sha256"] = hashlib.sha256(b"").hexdigest()
        S3SigV4Auth(creds, "s3", "us-east-1").add_auth(request)
        split = urlsplit(request.url)
        headers = {k.lower(): v for k, v in request.headers.items()}
        headers["host"] = split.netloc
        signed = parse([], headers)
        assert signed is not None
        kw = dict(method="GET", raw_path=split.path, raw_query=split.query, headers=headers)
        assert check(signed, "s3cr3t", **kw)  # type: ignore[arg-type]
        with pytest.raises(SigError) as e:
            check(signed, "other", **kw)  # type: ignore[arg-type]
        assert (e.value.status, e.value.code) == (403, "SignatureDoesNotMatch")
        with pytest.raises(SigError):
            check(signed, "s3cr3t", **{**kw, "raw_path": split.path + "x"})  # type: ignore[arg-type]
    # The presigned form, and its expiry.
    request = AWSRequest(method="GET", url="http://127.0.0.1:9/s3/b/k")
    S3SigV4QueryAuth(creds, "s3", "us-east-1", expires=60).add_auth(request)
    split = urlsplit(request.url)
    from urllib.parse import parse_qsl

    signed = parse(parse_qsl(split.query), {"host": split.netloc})
    assert signed is not None and signed.presigned
    kw = dict(
        method="GET", raw_path=split.path, raw_query=split.query, headers={"host": split.netloc}
    )
    assert check(signed, "s3cr3t", **kw) == "UNSIGNED-PAYLOAD"  # type: ignore[arg-type]
    with pytest.raises(SigError) as e:
        check(signed, "s3cr3t", now=lambda: time.time() + 120, **kw)  # type: ignore[arg-type]
    assert (e.value.status, e.value.code) == (403, "AccessDenied")


def test_boto3_lists_reads_ranges_and_conditions(gw: Gateway, tmp_path: Path) -> None:
    alice = gw.user("alice1")
    files = _tree(tmp_path / "data")
    pdh = gw.wh(alice, "put", str(tmp_path / "data"), "--name", "proj1").output.split()[-1]
    s3 = gw.boto3(*gw.credential(alice))

    gw.wh(alice, "put", str(tmp_path / "data"), "--name", "lab1/run1")
    buckets = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    # A name in a project is no bucket: bucket names hold no '/'.
    assert "proj1" in buckets and not [b for b in buckets if "/" in b]
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket="proj1")["Contents"]]
    # S3 lists in key order; `wh ls` in manifest order (a directory's files first).
    assert listed == sorted(gw.wh(alice, "ls", "proj1").output.splitlines()) == sorted(files)
    # Paged: two keys a page, continuation tokens to the end, same keys.
    paged, token = [], None
    while True:
        kw = {"ContinuationToken": token} if token else {}
        page = s3.list_objects_v2(Bucket="proj1", MaxKeys=2, **kw)
        paged += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert paged == listed
    # A delimiter rolls keys up into common prefixes; a prefix narrows.
    top = s3.list_objects_v2(Bucket="proj1", Delimiter="/")
    assert [o["Key"] for o in top["Contents"]] == ["a.txt", "empty", "z+plus=eq.txt"]
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["sub/"]
    sub = s3.list_objects_v2(Bucket="proj1", Prefix="sub/", Delimiter="/")
    assert [o["Key"] for o in sub["Contents"]] == ["sub/b.bin"]
    assert [p["Prefix"] for p in sub["CommonPrefixes"]] == ["sub/deeper/"]
    # ListObjects v1 (rclone's default) pages by marker.
    v1 = s3.list_objects(Bucket="proj1", MaxKeys=3)
    assert v1["IsTruncated"] and [o["Key"] for o in v1["Contents"]] == listed[:3]
    rest = s3.list_objects(Bucket="proj1", Marker=v1["Contents"][-1]["Key"])
    assert [o["Key"] for o in rest["Contents"]] == listed[3:]
    # The same collection by its PDH ("-" for "+": SDKs refuse a "+").
    by_pdh = s3.list_objects_v2(Bucket=pdh.replace("+", "-"))
    assert [o["Key"] for o in by_pdh["Contents"]] == listed

    for key, data in files.items():
        got = s3.get_object(Bucket="proj1", Key=key)
        assert got["Body"].read() == data
        assert got["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'  # the putter's MD5s
    big = files["sub/b.bin"]
    for asked, want in (
        ("bytes=1000-1999", big[1000:2000]),
        ("bytes=299990-", big[299990:]),
        ("bytes=-7", big[-7:]),
        ("bytes=299999-400000", big[299999:]),
    ):
        got = s3.get_object(Bucket="proj1", Key="sub/b.bin", Range=asked)
        assert got["Body"].read() == want, asked
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="proj1", Key="sub/b.bin", Range="bytes=300000-")
    assert _error(e.value) == (416, "InvalidRange")
    head = s3.head_object(Bucket="proj1", Key="sub/b.bin")
    assert head["ContentLength"] == len(big)
    etag = head["ETag"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="proj1", Key="sub/b.bin", IfNoneMatch=etag)
    assert _error(e.value)[0] == 304
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="proj1", Key="sub/b.bin", IfMatch='"0123"')
    assert _error(e.value) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket="proj1", Key="sub/b.bin", IfMatch=etag)["Body"].read() == big
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="proj1", Key="sub/b.bin", IfModifiedSince=head["LastModified"])
    assert _error(e.value)[0] == 304
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="proj1", Key="nothing/here")
    assert _error(e.value) == (404, "NoSuchKey")
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket="no-such-name")
    assert _error(e.value) == (404, "NoSuchBucket")
    # What is not served says so, rather than answering as another operation.
    for call in (
        lambda: s3.get_object_acl(Bucket="proj1", Key="a.txt"),
        lambda: s3.get_bucket_tagging(Bucket="proj1"),
        lambda: s3.list_object_versions(Bucket="proj1"),
    ):
        with pytest.raises(ClientError) as e:
            call()
        assert _error(e.value) == (501, "NotImplemented")


def test_puts_and_multipart_uploads_make_collections_named_as_asked(
    gw: Gateway, tmp_path: Path
) -> None:
    alice = gw.user("alice2")
    s3 = gw.boto3(*gw.credential(alice))
    s3.create_bucket(Bucket="made2")  # a new name on an empty collection
    first = catalog.get_name(gw.state.engine, "made2")
    s3.put_object(Bucket="made2", Key="dir/one.txt", Body=b"one\n")
    big = os.urandom(12 * 1024 * 1024 + 5)
    # upload_fileobj goes multipart past 8 MiB: parts of 8 MiB and the rest.
    s3.upload_fileobj(io.BytesIO(big), "made2", "big.bin")
    record = catalog.get_name(gw.state.engine, "made2")
    assert record.version == first.version + 2
    assert gw.wh(alice, "ls", "made2").output.splitlines() == ["big.bin", "dir/one.txt"]
    out = tmp_path / "out"
    gw.wh(alice, "get", "made2", str(out))
    assert (out / "big.bin").read_bytes() == big
    # Read back through the gateway: whole, and a range across the parts' blocks.
    assert s3.get_object(Bucket="made2", Key="big.bin")["Body"].read() == big
    cut = 8 * 1024 * 1024
    across = s3.get_object(Bucket="made2", Key="big.bin", Range=f"bytes={cut - 10}-{cut + 9}")
    assert across["Body"].read() == big[cut - 10 : cut + 10]
    assert (out / "dir" / "one.txt").read_bytes() == b"one\n"
    # A put replaces its key in a new version; the old version is kept as it was.
    s3.put_object(Bucket="made2", Key="dir/one.txt", Body=b"two\n")
    assert gw.wh(alice, "cat", "made2/dir/one.txt").output == "two\n"
    assert gw.wh(alice, "cat", f"{record.pdh}/dir/one.txt").output == "one\n"
    # If-None-Match: * puts only a new key.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="made2", Key="dir/one.txt", Body=b"x", IfNoneMatch="*")
    assert _error(e.value) == (412, "PreconditionFailed")
    # A key that would make a file a directory (or the reverse) is refused.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="made2", Key="big.bin/inside", Body=b"x")
    assert _error(e.value) == (400, "InvalidArgument")
    s3.delete_object(Bucket="made2", Key="big.bin")
    assert gw.wh(alice, "ls", "made2").output.splitlines() == ["dir/one.txt"]
    # An aborted upload changes nothing.
    before = catalog.get_name(gw.state.engine, "made2").pdh
    up = s3.create_multipart_upload(Bucket="made2", Key="never.bin")["UploadId"]
    s3.upload_part(Bucket="made2", Key="never.bin", UploadId=up, PartNumber=1, Body=b"abc")
    s3.abort_multipart_upload(Bucket="made2", Key="never.bin", UploadId=up)
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket="made2",
            Key="never.bin",
            UploadId=up,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": hashlib.md5(b"abc").hexdigest()}]},
        )
    assert _error(e.value) == (404, "NoSuchUpload")
    assert catalog.get_name(gw.state.engine, "made2").pdh == before
    # A PDH is fixed content: no put into it.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=before.replace("+", "-"), Key="x", Body=b"x")
    assert _error(e.value) == (403, "AccessDenied")


def test_large_objects_read_whole_and_by_ranges_over_whole_blocks(gw: Gateway) -> None:
    """An object of several big blocks (5 MiB parts): read whole, and by
    ranges that cover whole blocks with parts of others at each end, as a
    one-pass read; a range inside one block as a small read."""
    from boto3.s3.transfer import TransferConfig

    alice = gw.user("alice9")
    s3 = gw.boto3(*gw.credential(alice))
    s3.create_bucket(Bucket="large9")
    part = 5 * 1024 * 1024
    data = os.urandom(4 * part + 12345)
    config = TransferConfig(multipart_threshold=part, multipart_chunksize=part)
    s3.upload_fileobj(io.BytesIO(data), "large9", "big.bin", Config=config)
    assert s3.get_object(Bucket="large9", Key="big.bin")["Body"].read() == data
    for first, last in ((part - 10, 3 * part + 9), (1, len(data) - 2), (part + 1, part + 99)):
        got = s3.get_object(Bucket="large9", Key="big.bin", Range=f"bytes={first}-{last}")
        assert got["Body"].read() == data[first : last + 1], (first, last)


def test_wrong_signatures_unknown_keys_and_anonymous_requests_are_refused(gw: Gateway) -> None:
    alice = gw.user("alice3")
    gw.wh(alice, "name", "ls")  # the user works
    key_id, secret = gw.credential(alice)
    s3 = gw.boto3(key_id, secret)
    s3.create_bucket(Bucket="sig3")
    for client, code in (
        (
            gw.boto3(key_id, secret[:-1] + ("A" if secret[-1] != "A" else "B")),
            "SignatureDoesNotMatch",
        ),
        (gw.boto3("WHS3" + "A" * 16, secret), "InvalidAccessKeyId"),
    ):
        with pytest.raises(ClientError) as e:
            client.list_objects_v2(Bucket="sig3")
        assert _error(e.value) == (403, code)
    plain = httpx.get(gw.endpoint + "/sig3", timeout=60)
    assert plain.status_code == 403 and b"<Code>AccessDenied</Code>" in plain.content
    # A presigned URL reads without headers; one past its time does not.
    s3.put_object(Bucket="sig3", Key="k", Body=b"presigned")
    signer = gw.boto3(key_id, secret, signature_version="s3v4")  # boto3 presigns V2 by default
    url = signer.generate_presigned_url(
        "get_object", Params={"Bucket": "sig3", "Key": "k"}, ExpiresIn=60
    )
    assert httpx.get(url, timeout=60).content == b"presigned"
    tampered = url.replace("/k?", "/j?")
    assert httpx.get(tampered, timeout=60).status_code == 403
    # A body that is not the one signed is refused and changes nothing.
    before = catalog.get_name(gw.state.engine, "sig3").pdh
    request = AWSRequest(method="PUT", url=gw.endpoint + "/sig3/k2", data=b"signed")
    request.headers["x-amz-content-sha256"] = hashlib.sha256(b"signed").hexdigest()
    S3SigV4Auth(Credentials(key_id, secret), "s3", "us-east-1").add_auth(request)
    sent = httpx.put(request.url, content=b"sent!!", headers=dict(request.headers), timeout=60)
    assert sent.status_code == 400 and b"XAmzContentSHA256Mismatch" in sent.content
    assert catalog.get_name(gw.state.engine, "sig3").pdh == before


def test_credentials_end_with_their_token_or_by_themselves(gw: Gateway) -> None:
    catalog.add_user(gw.state.engine, "alice4")
    token = catalog.create_token(gw.state.engine, "alice4", label="laptop")
    key_id, secret = gw.credential(token)
    s3 = gw.boto3(key_id, secret)
    s3.create_bucket(Bucket="cred4")
    listed = gw.wh(token, "s3", "credentials", "ls", "--json").output
    assert key_id in listed and secret not in listed
    auth.revoke_secret(gw.state.engine, token)
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket="cred4")
    assert _error(e.value) == (403, "InvalidAccessKeyId")
    token2 = catalog.create_token(gw.state.engine, "alice4")
    made = gw.wh(token2, "s3", "credentials", "create").output.split()
    key2, secret2 = made[2], made[5]
    assert gw.boto3(key2, secret2).list_objects_v2(Bucket="cred4")["KeyCount"] == 0
    assert (
        f"revoked S3 credential {key2}" in gw.wh(token2, "s3", "credentials", "revoke", key2).output
    )
    with pytest.raises(ClientError) as e:
        gw.boto3(key2, secret2).list_objects_v2(Bucket="cred4")
    assert _error(e.value) == (403, "InvalidAccessKeyId")
    gw.wh(token2, "s3", "credentials", "revoke", "not-a-key", code=2)
    gw.wh(token2, "s3", "credentials", "revoke", "WHS3" + "B" * 16, code=4)


@pytest.mark.parametrize(
    "path",
    [
        "/s3/bad5/a/../../escape.txt",
        "/s3/bad5/a%2F..%2F..%2Fescape.txt",
        "/s3/bad5/..%2Fescape.txt",
        "/s3/bad5/nul%00.txt",
        "/s3/bad5/line%0Abreak.txt",
        "/s3/bad5//double.txt",
        "/s3/bad5/./dot.txt",
    ],
)
def test_keys_that_leave_the_bucket_are_refused(gw: Gateway, path: str) -> None:
    engine = gw.state.engine
    try:
        token = catalog.create_token(engine, "alice5")
    except Exception:
        catalog.add_user(engine, "alice5")
        token = catalog.create_token(engine, "alice5")
    key_id, secret = gw.credential(token)
    try:
        catalog.get_name(engine, "bad5")
    except Exception:
        gw.boto3(key_id, secret).create_bucket(Bucket="bad5")
    before = catalog.get_name(engine, "bad5").pdh
    status, body = _signed(gw, key_id, secret, "PUT", path, b"payload")
    assert status == 400, (status, body)
    assert b"<Code>InvalidArgument</Code>" in body
    assert catalog.get_name(engine, "bad5").pdh == before
    assert gw.wh(token, "ls", "bad5").output == ""


def test_private_mode_hides_what_a_user_may_not_read(gw: Gateway, tmp_path: Path) -> None:
    alice, bob = gw.user("alice6"), gw.user("bob6")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "secret.txt").write_text("alice's\n")
    pdh = gw.wh(alice, "put", str(tmp_path / "d"), "--name", "private6").output.split()[-1]
    gw.wh(gw.admin, "perms-mode", "private")
    try:
        s3 = gw.boto3(*gw.credential(bob))
        assert "private6" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        for bucket in ("private6", pdh.replace("+", "-")):
            with pytest.raises(ClientError) as e:
                s3.get_object(Bucket=bucket, Key="secret.txt")
            assert _error(e.value) == (404, "NoSuchBucket")
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="private6", Key="mine.txt", Body=b"x")
        assert _error(e.value) == (404, "NoSuchBucket")
        gw.wh(alice, "share", "private6", "bob6")
        assert s3.get_object(Bucket="private6", Key="secret.txt")["Body"].read() == b"alice's\n"
        assert "private6" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        with pytest.raises(ClientError) as e:  # read, not write
            s3.put_object(Bucket="private6", Key="mine.txt", Body=b"x")
        assert _error(e.value) == (403, "AccessDenied")
        assert gw.wh(alice, "ls", "private6").output == "secret.txt\n"
    finally:
        gw.wh(gw.admin, "perms-mode", "open")


def test_boto3_over_https_sends_aws_chunked_bodies_and_they_land(
    gw: Gateway, tmp_path: Path
) -> None:
    """Over HTTPS botocore sends a put's body aws-chunked, unsigned, with a
    CRC32 trailer (over HTTP it signs the body's SHA-256 instead)."""
    from certs import self_signed
    from s3gw_helpers import tls_server

    alice = gw.user("alice7")
    key_id, secret = gw.credential(alice)
    cert, key = self_signed(tmp_path / "tls")
    with tls_server(gw, cert, key) as url:
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=url + "/s3",
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            region_name="us-east-1",
            verify=str(cert),
        )
        s3.create_bucket(Bucket="tls7")
        data = os.urandom(3_000_000)
        s3.put_object(Bucket="tls7", Key="a.bin", Body=data)
        s3.upload_fileobj(io.BytesIO(data * 3), "tls7", "b.bin")  # multipart
        assert s3.get_object(Bucket="tls7", Key="a.bin")["Body"].read() == data
    assert gw.wh(alice, "cat", "tls7/a.bin").stdout_bytes == data
    assert gw.wh(alice, "cat", "tls7/b.bin").stdout_bytes == data * 3


def test_aws_chunked_bodies_are_checked_whole() -> None:
    import base64
    import zlib

    from warehouse.gateways.s3chunked import ChunkedBody
    from warehouse.gateways.s3xml import S3Error

    data = os.urandom(70_000)
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()

    def encoded(crc_text: str) -> bytes:
        chunks = [data[:65536], data[65536:]]
        body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
        return body + b"0\r\nx-amz-checksum-crc32:" + crc_text.encode() + b"\r\n\r\n"

    whole = encoded(crc)
    decoder = ChunkedBody("x-amz-checksum-crc32")
    got = b"".join(b"".join(decoder.feed(whole[i : i + 1000])) for i in range(0, len(whole), 1000))
    decoder.finish()
    assert got == data
    bad = ChunkedBody("x-amz-checksum-crc32")
    bad.feed(encoded("AAAAAA=="))
    with pytest.raises(S3Error) as e:
        bad.finish()
    assert e.value.code == "BadDigest"
    cut = ChunkedBody("x-amz-checksum-crc32")
    cut.feed(whole[:-40])
    with pytest.raises(S3Error) as e:
        cut.finish()
    assert e.value.code == "IncompleteBody"
    with pytest.raises(S3Error):
        ChunkedBody(None).feed(b"zz\r\n")


def test_a_jobs_token_may_not_list_or_revoke_its_submitters_credentials(gw: Gateway) -> None:
    engine = gw.state.engine
    catalog.add_user(engine, "erin")
    own = catalog.create_token(engine, "erin")
    key_id, _ = gw.credential(own)
    job = catalog.create_token(engine, "erin", label=auth.JOB_TOKEN_LABEL + "99")
    api = gw.url + "/api/v1/s3/credentials"
    headers = {"Authorization": f"Bearer {job}"}
    listed = httpx.get(api, headers=headers, timeout=60)
    assert listed.status_code == 403 and "job's token" in listed.text
    revoked = httpx.delete(f"{api}/{key_id}", headers=headers, timeout=60)
    assert revoked.status_code == 403
    # One it makes ends with the job's token.
    made_id, made_secret = gw.credential(job)
    gw.boto3(made_id, made_secret).list_buckets()
    auth.revoke_secret(engine, job)
    with pytest.raises(ClientError) as e:
        gw.boto3(made_id, made_secret).list_buckets()
    assert _error(e.value) == (403, "InvalidAccessKeyId")
    assert key_id in httpx.get(api, headers={"Authorization": f"Bearer {own}"}, timeout=60).text


def test_puts_at_once_into_one_name_all_land(gw: Gateway) -> None:
    """Each put moves the name by compare-and-swap, made again on the newest
    collection when another put moved it first: none is lost."""
    from concurrent.futures import ThreadPoolExecutor

    alice = gw.user("alice8")
    key_id, secret = gw.credential(alice)
    gw.boto3(key_id, secret).create_bucket(Bucket="race8")
    start = catalog.get_name(gw.state.engine, "race8").version

    def put(i: int) -> None:
        client = gw.boto3(key_id, secret)
        client.put_object(Bucket="race8", Key=f"k{i:02}", Body=f"value {i}\n".encode())

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(put, range(12)))
    assert gw.wh(alice, "ls", "race8").output.splitlines() == [f"k{i:02}" for i in range(12)]
    assert catalog.get_name(gw.state.engine, "race8").version == start + 12
    assert gw.wh(alice, "cat", "race8/k07").output == "value 7\n"


def test_a_crafted_continuation_token_or_delimiter_is_no_server_error(
    gw: Gateway, tmp_path: Path
) -> None:
    alice = gw.user("alice12")
    data = tmp_path / "data"
    data.mkdir()
    (data / "a\U0010ffffb.txt").write_bytes(b"x")
    (data / "c.txt").write_bytes(b"y")
    gw.wh(alice, "put", str(data), "--name", "odd9")
    s3 = gw.boto3(*gw.credential(alice))
    # A common prefix (or a token's) ending in the last code point: the
    # least key after it is not one more code point.
    page = s3.list_objects_v2(Bucket="odd9", Delimiter="\U0010ffff")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["a\U0010ffff"]
    assert [o["Key"] for o in page["Contents"]] == ["c.txt"]
    token = base64.urlsafe_b64encode("p:a\U0010ffff".encode()).decode()
    after = s3.list_objects_v2(Bucket="odd9", ContinuationToken=token)
    assert [o["Key"] for o in after["Contents"]] == ["c.txt"]
    token = base64.urlsafe_b64encode("p:\U0010ffff".encode()).decode()
    assert "Contents" not in s3.list_objects_v2(Bucket="odd9", ContinuationToken=token)


def test_max_keys_0_answers_no_key_and_says_more_are_left(gw: Gateway, tmp_path: Path) -> None:
    alice = gw.user("alice10")
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_bytes(b"x")
    gw.wh(alice, "put", str(data), "--name", "zero10")
    s3 = gw.boto3(*gw.credential(alice))
    for listed in (
        s3.list_objects_v2(Bucket="zero10", MaxKeys=0),
        s3.list_objects(Bucket="zero10", MaxKeys=0),
    ):
        assert "Contents" not in listed and listed["MaxKeys"] == 0


def test_numbers_in_other_digits_are_refused_as_bad_input(gw: Gateway) -> None:
    alice = gw.user("alice11")
    key_id, secret = gw.credential(alice)
    gw.boto3(key_id, secret).create_bucket(Bucket="digits11")
    # Digits to str.isdigit, not to int(): a superscript two.
    for value in ("%C2%B2", "-1", "1.5"):
        status, body = _signed(
            gw, key_id, secret, "GET", "/s3/digits11", query=f"list-type=2&max-keys={value}"
        )
        assert status == 400 and b"<Code>InvalidArgument</Code>" in body, (value, status, body)
    status, body = _signed(
        gw, key_id, secret, "GET", "/s3/digits11", query="list-type=2&max-keys=5"
    )
    assert status == 200 and b"<MaxKeys>5</MaxKeys>" in body
    # A part's number likewise (an upload started for it).
    upload = gw.boto3(key_id, secret).create_multipart_upload(Bucket="digits11", Key="k")
    query = f"partNumber=%C2%B2&uploadId={upload['UploadId']}"
    status, body = _signed(gw, key_id, secret, "PUT", "/s3/digits11/k", b"x", query=query)
    assert status == 400 and b"<Code>InvalidArgument</Code>" in body, (status, body)
