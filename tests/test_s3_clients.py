"""The S3 gateway with the clients people use, unchanged: the `aws` command
(ls, cp, sync) and rclone (copy, check), each as a real process against a
real controller (docs/s3-gateway.md). rclone is Debian's (`make test`
installs it); missing, its cases are skipped, and failed under CI."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import WH_BIN as WH_BIN_PATH
from cluster import KeepPool
from s3gw_helpers import Gateway, aws_env, gateway, rclone_config
from warehouse import catalog


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, keep_servers: KeepPool) -> Iterator[Gateway]:
    with gateway(tmp_path_factory.mktemp("s3clients") / "c.db", keep_servers) as g:
        yield g


def _tree(root: Path, count: int = 40) -> None:
    for i in range(count):
        path = root / f"d{i % 4}" / f"f{i:03}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"file {i}\n".encode() * (i + 1))
    (root / "top level.bin").write_bytes(os.urandom(2_000_000))


def _same_trees(a: Path, b: Path) -> None:
    files_a = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    for rel in files_a:
        assert filecmp.cmp(a / rel, b / rel, shallow=False), rel


def _run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout


def test_aws_cli_ls_cp_and_sync(gw: Gateway, tmp_path: Path) -> None:
    aws = shutil.which("aws")
    if aws is None:
        if os.environ.get("CI"):
            pytest.fail("the aws command is missing (Debian's awscli)")
        pytest.skip("the aws command is missing (Debian's awscli)")
    alice = gw.user("carol")
    _tree(tmp_path / "data")
    gw.wh(alice, "put", str(tmp_path / "data"), "--name", "awsdata")
    (tmp_path / "home").mkdir()
    env = aws_env(gw, *gw.credential(alice), tmp_path / "home")
    base = [aws, "--endpoint-url", gw.endpoint, "s3"]

    listed = _run([*base, "ls", "--recursive", "s3://awsdata/"], env)
    keys = sorted(line.split(None, 3)[3] for line in listed.splitlines())
    assert keys == sorted(gw.wh(alice, "ls", "awsdata").output.splitlines())
    assert "PRE d0/" in _run([*base, "ls", "s3://awsdata/"], env)

    _run([*base, "cp", "s3://awsdata/top level.bin", str(tmp_path / "one.bin")], env)
    assert (tmp_path / "one.bin").read_bytes() == (tmp_path / "data" / "top level.bin").read_bytes()

    _run([*base, "sync", "s3://awsdata/", str(tmp_path / "synced")], env)
    _same_trees(tmp_path / "data", tmp_path / "synced")
    # A second sync finds nothing to do: sizes and times agree.
    assert _run([*base, "sync", "s3://awsdata/", str(tmp_path / "synced")], env).strip() == ""

    # Upwards: a sync into a new name makes a collection named so.
    _run([*base, "mb", "s3://awsup"], env)
    _run([*base, "sync", str(tmp_path / "data"), "s3://awsup/"], env)
    out = tmp_path / "got"
    gw.wh(alice, "get", "awsup", str(out))
    _same_trees(tmp_path / "data", out)
    assert catalog.get_name(gw.state.engine, "awsup").owner == "carol"


def _rclone() -> str:
    found = shutil.which("rclone")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("rclone is missing (`make test` installs Debian's rclone)")
        pytest.skip("rclone is missing (`make test` installs Debian's rclone)")
    return found


def test_rclone_copy_and_check(gw: Gateway, tmp_path: Path) -> None:
    rclone = _rclone()
    dave = gw.user("dave")
    _tree(tmp_path / "data", 25)
    gw.wh(dave, "put", str(tmp_path / "data"), "--name", "rcdata")
    conf = rclone_config(gw, *gw.credential(dave), tmp_path / "rclone.conf")
    # rclone reads AWS_CA_BUNDLE and the like from the environment: none here.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    base = [rclone, "--config", str(conf), "--retries", "1", "--low-level-retries", "2"]

    listed = _run([*base, "lsf", "-R", "--files-only", "gw:rcdata"], env)
    assert sorted(listed.splitlines()) == sorted(gw.wh(dave, "ls", "rcdata").output.splitlines())
    _run([*base, "copy", "gw:rcdata", str(tmp_path / "copied")], env)
    _same_trees(tmp_path / "data", tmp_path / "copied")
    # check compares sizes and, where the ETag is an MD5, the hashes.
    _run([*base, "check", str(tmp_path / "data"), "gw:rcdata"], env)
    _run([*base, "check", "--download", str(tmp_path / "data"), "gw:rcdata"], env)

    # Upwards into a new name, then checked back.
    _run([*base, "copy", str(tmp_path / "data"), "gw:rcup"], env)
    _run([*base, "check", str(tmp_path / "data"), "gw:rcup"], env)
    out = tmp_path / "got"
    gw.wh(dave, "get", "rcup", str(out))
    _same_trees(tmp_path / "data", out)

    # A changed file shows in check.
    (tmp_path / "data" / "d0" / "f000.txt").write_bytes(b"changed\n")
    bad = subprocess.run(
        [*base, "check", str(tmp_path / "data"), "gw:rcup"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode != 0 and "f000.txt" in bad.stderr


@pytest.mark.slow
def test_wh_serve_answers_s3_at_its_own_port(tmp_path: Path) -> None:
    """`wh serve` itself (a process, as a user starts it) serves the gateway
    at /s3, beside the API, with credentials made by `wh s3 credentials`."""
    import signal

    import boto3

    from cluster import admin_and_alice, listening, wh_serve

    env = {**os.environ, "WH_HOME": str(tmp_path / "home")}
    env.pop("WH_URL", None)
    server = wh_serve(env, "--keep", "1", "--executor", "none")
    try:
        url = listening(server, keep=1)[0]
        alice = admin_and_alice(env, url)
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / "x.txt").write_text("served\n")
        _run([WH_BIN_PATH, "put", str(tmp_path / "d"), "--name", "served"], alice)
        made = _run([WH_BIN_PATH, "s3", "credentials", "create", "--json"], alice)
        import json

        cred = json.loads(made)
        s3 = boto3.client(
            "s3",
            endpoint_url=url + "/s3",
            aws_access_key_id=cred["access_key_id"],
            aws_secret_access_key=cred["secret_access_key"],
            region_name="us-east-1",
        )
        assert s3.get_object(Bucket="served", Key="x.txt")["Body"].read() == b"served\n"
        listed = _run([WH_BIN_PATH, "s3", "credentials", "ls"], alice)
        assert cred["access_key_id"] in listed and cred["secret_access_key"] not in listed
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
        if server.stdout:
            server.stdout.close()
