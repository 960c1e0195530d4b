"""A real S3 server for the volume tests: SeaweedFS started by scripts/seaweedfs.sh.

``WH_TEST_S3_URL`` (``http://ACCESS_KEY:SECRET@HOST:PORT``) names a running
server; otherwise the script starts one (the ``weed`` binary of the [dev]
extra). Where neither works the S3 cases are skipped, except in CI (``CI``
set), where that fails: S3 volumes must not go untested unnoticed.
Each test gets a key prefix of its own in one bucket (a bucket per test
would make SeaweedFS allocate volumes for each).
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from warehouse.blocks.volume import LocalVolume
from warehouse.volumes.base import Volume
from warehouse.volumes.s3 import S3Volume

BUCKET = "wh-test"


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str

    def client(self) -> Any:
        """A plain boto3 client: the tests' own view of the store."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=Config(
                s3={"addressing_style": "path"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

    def spec(self, prefix: str, bucket: str = BUCKET) -> str:
        return f"s3://{bucket}/{prefix}?endpoint={self.endpoint}"


def _problem_or_url() -> tuple[str, str]:
    url = os.environ.get("WH_TEST_S3_URL", "")
    if url:
        return "", url
    script = Path(__file__).resolve().parent.parent / "scripts" / "seaweedfs.sh"
    proc = subprocess.run([script], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return f"scripts/seaweedfs.sh failed: {proc.stderr.strip()[-500:]}", ""
    return "", proc.stdout.strip()


@pytest.fixture(scope="session")
def s3_server() -> S3Server:
    """The SeaweedFS server, its credentials set as AWS_* for this process
    and the servers it starts (as a user's environment would have them)."""
    problem, url = _problem_or_url()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"S3: {problem}; CI must test S3 volumes", pytrace=False)
        pytest.skip(f"S3: {problem}")
    parts = urlsplit(url)
    server = S3Server(
        f"{parts.scheme}://{parts.hostname}:{parts.port}",
        parts.username or "",
        parts.password or "",
    )
    os.environ["AWS_ACCESS_KEY_ID"] = server.access_key
    os.environ["AWS_SECRET_ACCESS_KEY"] = server.secret_key
    # Nothing of the machine's own AWS set-up may leak in.
    os.environ["AWS_CONFIG_FILE"] = os.devnull
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    os.environ.pop("AWS_PROFILE", None)
    os.environ.pop("AWS_SESSION_TOKEN", None)
    client = server.client()
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    except client.exceptions.BucketAlreadyExists:
        pass
    return server


@pytest.fixture
def s3_specs(s3_server: S3Server) -> Iterator[Callable[[], str]]:
    """Makes volume specs of prefixes no other test uses; emptied afterwards."""
    prefixes: list[str] = []

    def make() -> str:
        prefixes.append(f"t-{secrets.token_hex(6)}/")
        return s3_server.spec(prefixes[-1])

    yield make
    client = s3_server.client()
    for prefix in prefixes:
        keys = [o["Key"] for o in listed(client, prefix)]
        for start in range(0, len(keys), 1000):
            chunk = [{"Key": k} for k in keys[start : start + 1000]]
            client.delete_objects(Bucket=BUCKET, Delete={"Objects": chunk})


@pytest.fixture
def s3_spec(s3_specs: Callable[[], str]) -> str:
    """A volume spec of a prefix no other test uses."""
    return s3_specs()


def listed(client: Any, prefix: str, bucket: str = BUCKET) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out.extend(page.get("Contents", []))
    return out


def replace_bytes(volume: Volume, md5: str, data: bytes) -> None:
    """Change a stored copy's bytes the way damage would, behind the volume:
    a file written over, an object put again by someone else."""
    if isinstance(volume, LocalVolume):
        volume.path_for(md5).write_bytes(data)
        return
    assert isinstance(volume, S3Volume)
    volume.client.put_object(Bucket=volume.location.bucket, Key=volume.key_for(md5), Body=data)


def moved_aside(volume: Volume, md5: str) -> list[str]:
    """Names of the copies of ``md5`` moved aside as corrupt."""
    if isinstance(volume, LocalVolume):
        return [p.name for p in volume.path_for(md5).parent.iterdir() if ".corrupt." in p.name]
    assert isinstance(volume, S3Volume)
    prefix = f"{volume.location.prefix}quarantine/{md5}."
    return [o["Key"] for o in listed(volume.client, prefix, volume.location.bucket)]
