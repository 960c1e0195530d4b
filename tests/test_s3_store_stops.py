"""The object store killed during a put (docs/s3.md, "Retries and errors"):
the put either ends with one clear `Error:` line and records nothing, or
completes through another volume; once the store is back, `wh fsck` is
clean and the same put stores the data. A private SeaweedFS of its own
(scripts/seaweedfs.sh on free ports): the shared one is never stopped."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import WH_BIN, listening, wh_serve

ROOT = Path(__file__).resolve().parent.parent
# The script's ports: S3 at PORT, the others at these offsets from it.
_OFFSETS = (0, 1000, 2000, 3000, 10000, 11000, 12000, 13000)


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_base() -> int:
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 29000)
        if all(_free(base + o) for o in _OFFSETS):
            return base
    pytest.fail("no free set of ports for a private SeaweedFS")


def _wait(what: str, ok: object, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not ok():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"still not {what} after {seconds} s")
        time.sleep(0.1)


class PrivateWeed:
    def __init__(self, root: Path) -> None:
        self.dir = root
        self.port = _free_base()
        self.env = {
            **os.environ,
            "WH_SEAWEEDFS_DIR": str(root),
            "WH_SEAWEEDFS_PORT": str(self.port),
        }

    def start(self) -> str:
        """Start it (or find it running): its URL with credentials."""
        done = subprocess.run(
            [str(ROOT / "scripts" / "seaweedfs.sh")],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            if os.environ.get("CI"):
                pytest.fail(f"private SeaweedFS: {done.stderr.strip()[-500:]}")
            pytest.skip(f"private SeaweedFS: {done.stderr.strip()[-500:]}")
        return done.stdout.strip()

    def pid(self) -> int:
        return int((self.dir / "weed.pid").read_text())

    def kill(self) -> None:
        pid = self.pid()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # weed and nothing else: setsid made its group

        def gone() -> bool:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            # A zombie until its parent (the script's shell, gone) is reaped by init.
            with contextlib.suppress(OSError):
                return " Z " in Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1][:4]
            return True

        _wait("stopped", gone)


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[PrivateWeed]:
    w = PrivateWeed(tmp_path / "weed")
    try:
        yield w
    finally:
        if (w.dir / "weed.pid").exists():
            w.kill()


def _all_readable(s3: Any, bucket: str) -> bool:
    try:
        for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
            s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    except Exception:  # any error of a store still starting: asked again
        return False
    return True


def _tree(root: Path, dirs: int) -> Path:
    for i in range(dirs):
        (root / f"d{i:02d}").mkdir(parents=True)
        (root / f"d{i:02d}" / "f").write_bytes(os.urandom(1 << 20))
    return root


@pytest.mark.slow
@pytest.mark.timeout(600)  # a SeaweedFS started twice and 40 blocks; a loaded machine is slow
def test_the_store_killed_during_a_put(tmp_path: Path, weed: PrivateWeed) -> None:
    from urllib.parse import urlsplit

    import boto3
    from botocore.config import Config

    url = urlsplit(weed.start())
    endpoint = f"http://{url.hostname}:{url.port}"
    creds = {"AWS_ACCESS_KEY_ID": url.username or "", "AWS_SECRET_ACCESS_KEY": url.password or ""}
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )
    s3.create_bucket(Bucket="stops")
    log = tmp_path / "access.log"
    env = {
        **os.environ,
        **creds,
        "WH_HOME": str(tmp_path / "home"),
        "WH_CACHE_SIZE": "0",
        # Two attempts a request: a dead store is given up on in seconds.
        "WH_S3_MAX_ATTEMPTS": "2",
    }
    env.pop("WH_URL", None)
    spec = f"s3://stops/site?endpoint={endpoint}"
    server = wh_serve(env, "--keep", "2", "--keep-s3", spec, "--access-log", str(log))
    try:
        ctl, _ = listening(server, keep=2)
        admin = subprocess.run(
            [WH_BIN, "user", "add", "admin", "--admin"], env=env, capture_output=True, text=True
        )
        assert admin.returncode == 0, admin.stderr
        remote = {**env, "WH_URL": ctl, "WH_TOKEN": admin.stdout.strip()}

        def wh(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [WH_BIN, *args], env=remote, capture_output=True, text=True, timeout=600
            )

        assert wh("put", str(_tree(tmp_path / "before", 2)), "--name", "before").returncode == 0
        puts_before = len(re.findall(r"\bPUT /[0-9a-f]{32}\b", log.read_text()))
        tree = _tree(tmp_path / "big", 40)
        put = subprocess.Popen(
            [WH_BIN, "put", str(tree), "--name", "big"],
            env=remote,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Killed once the keep servers have begun taking this put's blocks.
        _wait(
            "storing",
            lambda: len(re.findall(r"\bPUT /[0-9a-f]{32}\b", log.read_text())) > puts_before,
        )
        weed.kill()
        _, err = put.communicate(timeout=600)
        if put.returncode == 0:
            # Through another volume: each keep server's own directory.
            got = wh("get", "big", str(tmp_path / "got"))
            assert got.returncode == 0, got.stderr
        else:
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("Error: "), err
            assert "Traceback" not in err
            # Nothing half-recorded: the name was not set.
            assert wh("ls", "big").returncode != 0
        weed.start()
        # The S3 gateway answers listings before its volume server serves
        # reads again: fsck waits for the store to read what it holds.
        _wait("reading its objects again", lambda: _all_readable(s3, "stops"))
        fsck = wh("fsck")
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="stops").get("Contents", [])]
        assert fsck.returncode == 0 and "clean" in fsck.stdout, (
            fsck.stdout,
            fsck.stderr,
            put.returncode,
            err,
            keys,
        )
        again = wh("put", str(tree), "--name", "big")
        assert again.returncode == 0, again.stderr
        got = wh("get", "big", str(tmp_path / "got-again"))
        assert got.returncode == 0, got.stderr
        for i in range(40):
            f = f"d{i:02d}/f"
            assert (tmp_path / "got-again" / f).read_bytes() == (tree / f).read_bytes()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        if server.stdout:
            server.stdout.close()
