"""S3 volumes (SeaweedFS) in use: keep servers with a local volume beside
one (put, get, fsck, gc and balance through a controller; a copy changed in
the store found on read and repaired), `wh serve --keep-s3`, the embedded
warehouse on a bucket (a job's steps included), and starts refused for a
missing bucket or wrong credentials."""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from cluster import WH_BIN, Keepd, KeepPool, _listening, controller, listening, wh_serve
from conftest import Runner, wh_process
from jobs_helpers import put_function, run_job
from s3_helpers import (  # noqa: F401 (fixtures)
    BUCKET,
    S3Server,
    listed,
    replace_bytes,
    s3_server,
    s3_spec,
    s3_specs,
)
from warehouse.embedded import EmbeddedWarehouse
from warehouse.volumes.base import child_spec, open_volume
from warehouse.volumes.s3 import S3Volume

TTL = 2


def _tree(root: Path, seed: int) -> Path:
    root.mkdir(parents=True)
    (root / "small").write_bytes(os.urandom(2000 + seed))
    (root / "big").write_bytes(os.urandom(300_000))
    return root


def _spawn(volumes: list[str], root: Path, port: int = 0) -> Keepd:
    argv = [WH_BIN, "keepd", "--listen", f"127.0.0.1:{port}"]
    for v in volumes:
        argv += ["--volume", v]
    argv += ["--signing-key-file", str(root / "signing.key")]
    argv += ["--admin-token-file", str(root / "admin.token")]
    argv += ["--signature-ttl", str(TTL), "--trash-lifetime", "3600"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    return _listening(root, proc, argv)


@contextmanager
def _pool(root: Path, volumes: list[list[str]]) -> Iterator[KeepPool]:
    root.mkdir(parents=True, exist_ok=True)
    pool = KeepPool(root, secrets.token_hex(32).encode(), "admin-" + secrets.token_hex(16))
    (root / "signing.key").write_bytes(pool.signing_key)
    (root / "admin.token").write_text(pool.admin_token)
    try:
        for vols in volumes:
            pool.servers.append(_spawn(vols, root))
        yield pool
    finally:
        pool.close()


def _prefix(spec: str) -> str:
    return spec.split("/", 3)[3].split("?")[0]


def _block_keys(server: S3Server, spec: str) -> set[str]:
    """The MD5s of the block objects under a spec's prefix (the store's view)."""
    prefix = _prefix(spec)
    keys = [o["Key"][len(prefix) :] for o in listed(server.client(), prefix)]
    return {k.split("/")[1] for k in keys if not k.startswith(("trash/", "quarantine/"))}


def _wait(what: str, ok: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"still not {what} after {seconds} s")
        time.sleep(0.2)


def test_keep_servers_on_s3_and_local_volumes(
    tmp_path: Path,
    s3_server: S3Server,  # noqa: F811
    s3_specs: Callable[[], str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec_a, spec_b = s3_specs(), s3_specs()
    local = str(tmp_path / "keep" / "k0")
    monkeypatch.setenv("WH_HOME", str(tmp_path / "home"))
    # Server 0 starts on its local volume alone; server 1 on a bucket prefix.
    with (
        _pool(tmp_path / "keep", [[local], [spec_b]]) as pool,
        controller(
            tmp_path / "controller.db",
            pool,
            replication=2,
            signature_ttl=TTL,
            trash_lifetime=3600.0,
            keep_admin_token=pool.admin_token,
        ) as ctl,
    ):
        monkeypatch.setenv("WH_URL", ctl.url)
        monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
        run = Runner()
        one = json.loads(
            run("put", str(_tree(tmp_path / "one", 1)), "--name", "one", "--json").output
        )
        # Server 0 again, on the same port, with an S3 volume beside its
        # directory: the old blocks stay where they are, new ones go to S3.
        port = int(pool.servers[0].url.rsplit(":", 1)[1])
        pool.servers[0].stop()
        pool.servers[0] = _spawn([local, spec_a], tmp_path / "keep", port)
        two = json.loads(
            run("put", str(_tree(tmp_path / "two", 2)), "--name", "two", "--json").output
        )
        for name in ("one", "two"):
            out = tmp_path / f"got-{name}"
            run("get", name, str(out))
            cmp = filecmp.dircmp(tmp_path / name, out)
            assert not (cmp.diff_files or cmp.left_only or cmp.right_only)

        # Replication counts volumes: each block is on both servers, and
        # the bucket holds exactly the blocks, nothing else.
        blocks_one = {b.md5 for b in open_volume(local).index()}
        in_a, in_b = _block_keys(s3_server, spec_a), _block_keys(s3_server, spec_b)
        assert blocks_one and in_a and not (blocks_one & in_a)
        assert in_b == blocks_one | in_a
        index = httpx.get(
            f"{pool.servers[0].url}/index",
            headers={"Authorization": f"Bearer {pool.admin_token}"},
        ).text
        assert {line.split("+")[0] for line in index.splitlines() if line} == in_b
        assert "clean" in run("fsck").output

        # A copy changed in the store is found on read (502: no good copy
        # on that server), moved aside, and balance pulls a good one back.
        victim = sorted(in_a)[0]
        volume_a = open_volume(spec_a)
        assert isinstance(volume_a, S3Volume)
        good = volume_a.get(victim)
        replace_bytes(volume_a, victim, b"\0" * len(good))
        got = httpx.get(
            f"{pool.servers[0].url}/{victim}+{len(good)}",
            headers={"Authorization": f"Bearer {pool.admin_token}"},
        )
        assert got.status_code == 502
        assert victim not in _block_keys(s3_server, spec_a)
        report = run("fsck", code=5).output
        assert victim in report
        run("balance")
        _wait("pulled back", lambda: victim in _block_keys(s3_server, spec_a))
        assert volume_a.get(victim) == good
        assert "clean" in run("fsck").output

        # GC over S3 volumes: an unnamed collection's blocks are trashed
        # (moved under trash/) once older than the TTL; named ones stay.
        run("put", str(_tree(tmp_path / "junk", 3)))
        time.sleep(TTL + 1.5)
        run("gc")
        kept = _block_keys(s3_server, spec_b)
        assert blocks_one | in_a <= kept, "named collections' blocks stay"
        trash_b = f"{_prefix(spec_b)}trash/"
        trashed = {
            o["Key"][len(trash_b) :].split(".")[0] for o in listed(s3_server.client(), trash_b)
        }
        assert trashed, "the unnamed collection's blocks were trashed"
        assert not trashed & kept
        assert one["pdh"] != two["pdh"]


def test_a_missing_bucket_or_wrong_credentials_stop_the_start(
    tmp_path: Path,
    s3_server: S3Server,  # noqa: F811
    s3_spec: str,  # noqa: F811
) -> None:
    missing = s3_spec.replace(f"s3://{BUCKET}/", "s3://wh-no-such-bucket/")
    for spec, env, says in [
        (missing, {}, "no bucket 'wh-no-such-bucket'"),
        (s3_spec, {"AWS_SECRET_ACCESS_KEY": "wrong"}, "check the credentials"),
        ("s3://Bad_Bucket!/x", {}, "not a bucket name"),
        (s3_spec + "&colour=blue", {}, "unknown option 'colour'"),
    ]:
        proc = wh_process("keepd", "--volume", spec, "--listen", "127.0.0.1:0", env=env, timeout=60)
        assert proc.returncode == 2, (spec, proc.stdout, proc.stderr)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and says in errors[0], proc.stderr
        assert "Traceback" not in proc.stderr
        assert not proc.stdout


def test_the_embedded_warehouse_on_an_s3_volume(
    tmp_path: Path,
    s3_server: S3Server,  # noqa: F811
    s3_spec: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WH_VOLUME", s3_spec)
    monkeypatch.delenv("WH_URL", raising=False)
    run = Runner()
    tree = _tree(tmp_path / "t", 4)
    out = json.loads(run("put", str(tree), "--name", "t", "--json").output)
    run("get", "t", str(tmp_path / "got"))
    assert (tmp_path / "got" / "big").read_bytes() == (tree / "big").read_bytes()
    local = tmp_path / "home" / "blocks"
    assert not local.exists() or not any(local.iterdir()), "nothing on the home's disk"
    stored = _block_keys(s3_server, s3_spec)
    named = set(re.findall(r"\b([0-9a-f]{32})\+\d+", run("manifest", "t").output))
    assert named and named <= stored, "the collection's blocks are objects in the bucket"
    assert "clean" in run("fsck").output
    run("gc")
    assert _block_keys(s3_server, s3_spec) == stored
    assert out["pdh"]
    # The home recorded its volume: a process without WH_VOLUME (a job
    # manager, a step) finds the same blocks; another volume is refused.
    monkeypatch.delenv("WH_VOLUME")
    run("get", "t", str(tmp_path / "again"))
    assert (tmp_path / "again" / "big").read_bytes() == (tree / "big").read_bytes()
    monkeypatch.setenv("WH_VOLUME", str(tmp_path / "elsewhere"))
    refused = run("ls", "t", code=2).stderr
    assert "keeps its blocks in s3://" in refused and "unset WH_VOLUME" in refused


def test_a_home_with_blocks_keeps_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("WH_URL", raising=False)
    monkeypatch.delenv("WH_VOLUME", raising=False)
    run = Runner()
    run("put", str(_tree(tmp_path / "t", 5)), "--name", "t")
    monkeypatch.setenv("WH_VOLUME", str(tmp_path / "other"))
    refused = run("ls", "t", code=2).stderr
    assert "already keeps blocks in" in refused
    assert not (tmp_path / "home" / "volume").exists()


def test_serve_with_keep_servers_on_s3(
    tmp_path: Path,
    s3_server: S3Server,  # noqa: F811
    s3_spec: str,  # noqa: F811
) -> None:
    """`wh serve --keep 2 --keep-s3 SPEC`: each keep server writes to its own
    prefix of the bucket; put, get, fsck and gc work, and the bucket holds
    exactly the blocks."""
    env = {**os.environ, "WH_HOME": str(tmp_path / "home")}
    env.pop("WH_URL", None)
    server = wh_serve(env, "--keep", "2", "--keep-s3", s3_spec, "--executor", "none")
    try:
        url = listening(server, keep=2)[0]
        admin = subprocess.run(
            [WH_BIN, "user", "add", "admin", "--admin"], env=env, capture_output=True, text=True
        )
        assert admin.returncode == 0, admin.stderr
        remote = {**env, "WH_URL": url, "WH_TOKEN": admin.stdout.strip()}

        def wh(*args: str, code: int = 0) -> str:
            done = subprocess.run([WH_BIN, *args], env=remote, capture_output=True, text=True)
            assert done.returncode == code, (args, done.stderr)
            return done.stdout

        tree = _tree(tmp_path / "t", 6)
        wh("put", str(tree), "--name", "t")
        wh("get", "t", str(tmp_path / "out"))
        assert (tmp_path / "out" / "big").read_bytes() == (tree / "big").read_bytes()
        named = set(re.findall(r"\b([0-9a-f]{32})\+\d+", wh("manifest", "t")))
        keep0 = _block_keys(s3_server, child_spec(s3_spec, "keep0"))
        keep1 = _block_keys(s3_server, child_spec(s3_spec, "keep1"))
        assert named <= keep0 and named <= keep1, "two copies: one on each server's volume"
        assert "clean" in wh("fsck")
        wh("gc")
        assert _block_keys(s3_server, child_spec(s3_spec, "keep0")) == keep0
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
        if server.stdout:
            server.stdout.close()


def test_serve_refuses_a_missing_bucket_at_once(
    tmp_path: Path,
    s3_spec: str,  # noqa: F811
) -> None:
    env = {**os.environ, "WH_HOME": str(tmp_path / "home")}
    env.pop("WH_URL", None)
    missing = s3_spec.replace(f"s3://{BUCKET}/", "s3://wh-no-such-bucket/")
    done = subprocess.run(
        [WH_BIN, "serve", "--listen", "127.0.0.1:0", "--keep", "1", "--keep-s3", missing],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.count("Error:") == 1 and "no bucket" in done.stderr, done.stderr


ONE_STEP = """#!/bin/sh
set -e
printf 'made by step %s\\n' "$WH_STEP" > "$WH_SCRATCH/out.txt"
pdh=$(wh put "$WH_SCRATCH/out.txt")
wh manifest "$pdh" | wh step output -
"""


def test_a_job_on_an_embedded_s3_volume(
    tmp_path: Path,
    s3_server: S3Server,  # noqa: F811
    s3_spec: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step's own `wh put` finds the home's S3 volume without being told."""
    monkeypatch.setenv("WH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WH_VOLUME", s3_spec)
    monkeypatch.delenv("WH_URL", raising=False)
    wh = EmbeddedWarehouse()
    try:
        monkeypatch.delenv("WH_VOLUME")  # recorded in the home from now on
        fn = put_function(wh, tmp_path, "one.sh", ONE_STEP)
        job = run_job(wh, fn, wh.put([_tree(tmp_path / "in", 7)]).pdh)
        assert job.state == "complete", job
        assert job.output_pdh is not None
        assert wh.reader(job.output_pdh).read_file("out.txt") == b"made by step 0\n"
    finally:
        wh.close()
    stored = _block_keys(s3_server, s3_spec)
    assert hashlib.md5(b"made by step 0\n").hexdigest() in stored
    assert not any((tmp_path / "home" / "blocks").glob("*/*")), "nothing on the home's disk"
