"""One output convention for every command (docs/cli.md, "Output"): `--json`
times are ISO 8601 UTC, a job's params a JSON object; piped listings are
tab-separated under a header line, text times carry their zone; every
`--json` flag says what it prints."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from conftest import Runner
from jobs_helpers import make_text
from warehouse.cli import cli

ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
TEXT_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")

WORKFLOW = """\
workflow: tiny
inputs:
  reads: {default: reads}
jobs:
  hash:
    function: builtin:zhash
    input: $reads
    params: {algorithm: sha256}
outputs:
  sums: $hash
"""


def _walk(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    yield key, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v, key)


def conventional(doc: Any) -> int:
    """Check every time and every params in a JSON document; how many times seen."""
    times = 0
    for key, value in _walk(doc):
        if key == "at" or key.endswith("_at") or key == "last_seen":
            assert value is None or ISO_UTC.fullmatch(value), (key, value)
            times += value is not None
        if key == "params" and value is not None:
            assert isinstance(value, dict), (key, value)
    return times


def as_json(run: Runner, *args: str) -> Any:
    return json.loads(run(*args, "--json").stdout)


def test_json_times_and_params_follow_one_convention(
    run: Runner, tmp_path: Path, home: Path
) -> None:
    src = make_text(tmp_path / "in")
    put = as_json(run, "put", "--name", "reads", str(src))
    manifest = run("manifest", put["pdh"]).stdout
    again = json.loads(run("put", "--manifest", "-", "--json", input=manifest.encode()).stdout)
    assert set(again) == set(put)  # the same keys, whatever path made it

    job = as_json(run, "job", "submit", "builtin:zhash", "--input", "reads", "--param",
                  "algorithm=sha256", "--wait")  # fmt: skip
    shown = as_json(run, "job", "show", str(job["id"]))
    assert shown["params"] == {"algorithm": "sha256"} and shown["input_name"] == "reads"
    assert conventional(shown) >= 3  # created, started, finished
    assert conventional(as_json(run, "job", "ls")) >= 3

    run("name", "set", "reads", job["output_pdh"], "--expect", put["pdh"])
    assert conventional(as_json(run, "name", "log", "reads")) == 2
    assert conventional(as_json(run, "name", "ls")) == 1
    assert conventional(as_json(run, "collection", "ls")) >= 2

    wf = tmp_path / "tiny.wf.yml"
    wf.write_text(WORKFLOW)
    ran = json.loads(run("workflow", "run", str(wf), "--wait", "--json").stdout)
    assert conventional(ran) >= 1
    assert conventional(as_json(run, "workflow", "ls")) >= 1
    shown_run = as_json(run, "workflow", "show", str(ran["id"]))
    assert conventional(shown_run) >= 1 and isinstance(shown_run["inputs"], dict)
    assert conventional(as_json(run, "regol", "ls")) == 0

    db = f"sqlite:///{home / 'warehouse.db'}"
    run("user", "add", "carol", "--db", db)
    run("token", "create", "carol", "--db", db)
    assert conventional(as_json(run, "token", "ls", "--user", "carol", "--db", db)) == 2
    assert any(u["name"] == "carol" for u in as_json(run, "user", "ls", "--db", db))

    # Piped, listings are tab-separated under a header, times with their zone.
    for args, header in (
        (("name", "log", "reads"), "version\told_pdh\tnew_pdh\tby\tat"),
        (("name", "ls"), "name\tpdh\tversion\tupdated_at\tupdated_by"),
        (("collection", "ls"), "pdh\tkind\tfiles\tbytes\tcreated_at\tcreated_by"),
        (("token", "ls", "--user", "carol", "--db", db), "id\tuser\tcreated_at\texpires_at\tlabel"),
    ):
        lines = run(*args).stdout.splitlines()
        assert lines[0] == header, args
        assert all(TEXT_TIME.search(line) for line in lines[1:]), (args, lines)
    accounting = run("accounting").stdout.splitlines()
    assert accounting[0] == "user\twrites\tnew_blocks\tbytes_written\tbytes_new"
    assert accounting[1].split("\t")[3].isdigit()  # bytes when piped, not "1.2 KiB"
    assert TEXT_TIME.search(run("job", "show", str(job["id"])).stdout)
    assert TEXT_TIME.search(run("workflow", "show", str(ran["id"])).stdout)


def test_every_json_flag_says_what_it_prints() -> None:
    ctx = click.Context(cli)

    def commands(cmd: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        yield path, cmd
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, name
                yield from commands(sub, f"{path} {name}")

    found = 0
    for path, cmd in commands(cli, "wh"):
        for p in cmd.params:
            if isinstance(p, click.Option) and "--json" in p.opts:
                found += 1
                assert p.help and len(p.help) > 5, path
    assert found >= 20


def test_ls_sizes_are_bytes_when_piped_and_human_on_a_terminal(home: Path, tmp_path: Path) -> None:
    import os
    import subprocess

    from conftest import WH_BIN

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "big").write_bytes(b"x" * 3_000_000)
    wh_env = {**os.environ, "WH_HOME": str(home)}
    subprocess.run(
        [WH_BIN, "put", str(tmp_path / "t"), "--name", "t", "-q"], env=wh_env, check=True
    )
    piped = subprocess.run([WH_BIN, "ls", "-l", "t"], env=wh_env, capture_output=True, text=True)
    assert piped.stdout.split() == ["3000000", "big"]
    # On a terminal (a pseudo-terminal here) the same size is for people.
    assert _on_a_terminal(["ls", "-l", "t"], wh_env).split() == ["2.9", "MiB", "big"]


def _strict(text: str) -> Any:
    def refuse(word: str) -> Any:
        raise AssertionError(f"not strict JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def test_json_is_strict_even_for_infinite_floats(run: Runner) -> None:
    """Python's json writes NaN and Infinity, which jq and JSON.parse refuse."""
    doc = _strict(run("sql", "select 1e999 as a, -1e999 as b, 1.5 as c", "--json").stdout)
    assert doc["rows"] == [[None, None, 1.5]]


def test_lineage_text_times_carry_their_zone(run: Runner, tmp_path: Path) -> None:
    src = make_text(tmp_path / "in")
    run("put", "--name", "reads", str(src))
    run("job", "submit", "builtin:zhash", "--input", "reads", "--wait")
    up = run("lineage", "reads").stdout
    assert " at " in up and TEXT_TIME.search(up), up
    down = run("lineage", "reads", "--down").stdout
    assert ", ran " in down and TEXT_TIME.search(down.split(", ran ", 1)[1]), down


def test_a_table_on_a_narrow_terminal_keeps_every_value_whole(home: Path, tmp_path: Path) -> None:
    """A PDH cut to `799a55cc…` cannot be copied: the table is as wide as its cells."""
    import os
    import subprocess

    from conftest import WH_BIN

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "f").write_bytes(b"x")
    wh_env = {**os.environ, "WH_HOME": str(home), "COLUMNS": "50"}
    put = subprocess.run(
        [WH_BIN, "put", str(tmp_path / "t"), "--name", "t", "-q"],
        env=wh_env,
        check=True,
        capture_output=True,
        text=True,
    )
    pdh = put.stdout.strip()
    shown = _on_a_terminal(["collection", "ls"], wh_env)
    text = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    assert pdh in text and "…" not in text, text
    assert TEXT_TIME.search(text), text  # a time on one line


def test_a_param_is_json_or_a_string_never_nan(run: Runner, tmp_path: Path) -> None:
    src = make_text(tmp_path / "in")
    run("put", "--name", "reads", str(src))
    job = as_json(run, "job", "submit", "builtin:wordcount", "--input", "reads",
                  "--param", "n=8", "--param", "x=NaN", "--param", "y={bad")  # fmt: skip
    shown = _strict(run("job", "show", str(job["id"]), "--json").stdout)
    assert shown["params"] == {"n": 8, "x": "NaN", "y": "{bad"}


def test_json_is_strict_inside_a_params_text_too(run: Runner, tmp_path: Path, home: Path) -> None:
    """A job row whose params text holds NaN (as an older version let the library
    submit): its JSON is still strict."""
    import sqlalchemy as sa

    import warehouse
    from warehouse import jobs
    from warehouse.catalog import schema

    src = make_text(tmp_path / "in")
    pdh = as_json(run, "put", str(src))["pdh"]
    with warehouse.open(home) as wh:
        job = jobs.submit(wh, jobs.JobRequest("builtin:wordcount", pdh, {"x": 1}))
        with wh.engine.begin() as conn:  # type: ignore[attr-defined]
            conn.execute(
                sa.update(schema.jobs).where(schema.jobs.c.id == job.id).values(params='{"x": NaN}')
            )
    shown = _strict(run("job", "show", str(job.id), "--json").stdout)
    assert shown["params"] == {"x": None}
    assert _strict(run("job", "ls", "--json").stdout)[0]["params"] == {"x": None}


def _on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """What `wh ARGS` writes to a pseudo-terminal as its standard output."""
    import os
    import pty
    import subprocess

    from conftest import WH_BIN

    leader, follower = pty.openpty()
    with subprocess.Popen([WH_BIN, *args], env=env, stdout=follower) as proc:
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closes when wh exits
                break
            if not chunk:
                break
            shown += chunk
    os.close(leader)
    assert proc.returncode == 0
    return shown.decode()
