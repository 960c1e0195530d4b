"""Two installations on this machine (`wh serve`, clusters east and west): reading
through +K hints, `wh copy`, and a corrupt source block refused (docs/clusters.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from cluster import WH_BIN, admin_and_alice, listening, wh_serve
from gc_helpers import gc_cluster
from warehouse.blocks.volume import LocalVolume
from warehouse.cli import cli
from warehouse.manifest import Manifest


@dataclass
class Serve:
    name: str
    url: str
    home: Path
    proc: subprocess.Popen[str]
    token: str = ""  # alice's

    def volumes(self) -> list[LocalVolume]:
        return [LocalVolume(p) for p in sorted((self.home / "keep").iterdir()) if p.is_dir()]

    def blocks(self) -> set[str]:
        return {b.md5 for v in self.volumes() for b in v.index()}

    def stop(self) -> int:
        """Stop it (SIGTERM, killed after 30 s); its exit code, 0 for a clean stop."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.proc.returncode


# Far above what any command here takes: a hung command fails its test
# rather than holding it to the per-test timeout.
COMMAND_TIMEOUT = 120


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, env=env, capture_output=True, text=True, check=False, timeout=COMMAND_TIMEOUT
    )


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return env


def _launch(tmp_path: Path, name: str) -> tuple[Serve, dict[str, str]]:
    """Start `wh serve` for cluster ``name``; it is not ready yet."""
    home = tmp_path / name
    env = {**_clean_env(tmp_path), "WH_HOME": str(home)}
    proc = wh_serve(env, "--keep", "2", "--executor", "none", "--cluster-name", name)
    return Serve(name, "", home, proc), env


def _ready(server: Serve, env: dict[str, str]) -> None:
    """Wait until it listens with its keep servers; add its users (alice's token kept)."""
    server.url = listening(server.proc, keep=2)[0]
    server.token = admin_and_alice(env, server.url)["WH_TOKEN"]


@contextmanager
def serving(tmp_path: Path, *names: str) -> Iterator[list[Serve]]:
    """Installations started together (their start-ups overlap), stopped afterwards."""
    started: list[tuple[Serve, dict[str, str]]] = []
    try:
        for name in names:
            started.append(_launch(tmp_path, name))
        for server, env in started:
            _ready(server, env)
        yield [server for server, _ in started]
    finally:
        codes = {server.name: server.stop() for server, _ in reversed(started)}
    # Reached only when the test passed: each installation stopped cleanly.
    assert set(codes.values()) == {0}, codes


@pytest.fixture
def east_west(tmp_path: Path) -> Iterator[tuple[Serve, Serve]]:
    with serving(tmp_path, "east", "west") as (east, west):
        config = tmp_path / "xdg" / "warehouse" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(
            "".join(
                f'[clusters.{s.name}]\nurl = "{s.url}"\ntoken = "{s.token}"\n' for s in (east, west)
            )
        )
        config.chmod(0o600)
        yield east, west


def wh(tmp_path: Path, on: Serve, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**_clean_env(tmp_path), "WH_URL": on.url, "WH_TOKEN": on.token}
    env["WH_HOME"] = str(tmp_path / "client")
    return _run([WH_BIN, *args], env)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.args, done.stderr)
    assert "Traceback" not in done.stderr
    return done.stdout


def tree(root: Path, **dirs: bytes) -> Path:
    # One directory per block: each is its own stream, so its own block.
    for d, data in dirs.items():
        (root / d).mkdir(parents=True)
        (root / d / "data").write_bytes(data)
    return root


@pytest.mark.slow
@pytest.mark.timeout(600)  # two installations started as a user would, about 30 commands
def test_east_to_west_read_copy_refuse_corrupt_and_outlive_east(
    tmp_path: Path, east_west: tuple[Serve, Serve]
) -> None:
    east, west = east_west
    shared, only_east = b"shared block\n" * 1000, b"only on east\n" * 3000
    # West already holds one of the two blocks: stored there by this client.
    ok(wh(tmp_path, west, "put", str(tree(tmp_path / "w", a=shared))))
    pdh = ok(wh(tmp_path, east, "put", str(tree(tmp_path / "e", a=shared, b=only_east)))).strip()

    text = ok(wh(tmp_path, east, "manifest", pdh))
    locators = list(Manifest.parse(text).blocks())
    assert locators and all(loc.hint("K") == "@east" for loc in locators), text
    east_md5 = {loc.md5 for loc in locators}
    missing_on_west = east_md5 - west.blocks()
    assert len(missing_on_west) == 1

    # West reads it through the hints, from east's keep servers, and stores nothing.
    assert ok(wh(tmp_path, west, "ls", pdh)).split() == ["a/data", "b/data"]
    ok(wh(tmp_path, west, "get", pdh, str(tmp_path / "read")))
    assert (tmp_path / "read" / "b" / "data").read_bytes() == only_east
    assert missing_on_west.isdisjoint(west.blocks())

    done = json.loads(ok(wh(tmp_path, east, "copy", pdh, "--to", "west", "--name", "c", "--json")))
    assert done["pdh"] == pdh and done["cluster"] == "west" and not done["already"]
    assert (done["blocks"], done["copied_blocks"]) == (2, 1), done
    assert done["copied_bytes"] == len(only_east)
    assert east_md5 <= west.blocks()
    again = ok(wh(tmp_path, east, "copy", pdh, "--to", "west", "--name", "c"))
    assert "already on west, nothing copied" in again, again

    corrupt_block_is_refused(tmp_path, east, west)

    assert east.stop() == 0
    ok(wh(tmp_path, west, "get", "c", str(tmp_path / "after")))
    assert (tmp_path / "after" / "a" / "data").read_bytes() == shared
    assert (tmp_path / "after" / "b" / "data").read_bytes() == only_east
    west_text = ok(wh(tmp_path, west, "manifest", "c"))
    assert all(loc.hint("K") == "@west" for loc in Manifest.parse(west_text).blocks())


def corrupt_block_is_refused(tmp_path: Path, east: Serve, west: Serve) -> None:
    good = b"good\n" * 5000
    pdh = ok(wh(tmp_path, east, "put", str(tree(tmp_path / "e2", a=good)))).strip()
    for to in ("north", "east"):  # not configured; this cluster itself
        done = wh(tmp_path, east, "copy", pdh, "--to", to)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, done.stderr
    (md5,) = {loc.md5 for loc in Manifest.parse(ok(wh(tmp_path, east, "manifest", pdh))).blocks()}
    # "c" names another collection on west: refused before anything is sent.
    taken = wh(tmp_path, east, "copy", pdh, "--to", "west", "--name", "c")
    assert taken.returncode == 3 and "nothing was copied" in taken.stderr, taken.stderr
    assert md5 not in west.blocks()
    copies = [p for v in east.volumes() if (p := v.path_for(md5)).exists()]
    assert len(copies) == 2
    for path in copies:  # every copy: no good one is left to fall back on
        path.write_bytes(b"bad!\n" * 5000)

    refused = wh(tmp_path, east, "copy", pdh, "--to", "west", "--name", "bad")
    assert refused.returncode == 5, refused.stderr
    last = refused.stderr.splitlines()[-1]
    assert last.startswith("Error: ") and "corrupt" in last, refused.stderr
    assert "Traceback" not in refused.stderr
    assert md5 not in west.blocks()
    nothing = wh(tmp_path, west, "name", "get", "bad")
    assert nothing.returncode == 4, nothing.stderr


def _config(tmp_path: Path, text: str, mode: int = 0o600) -> dict[str, str]:
    path = tmp_path / "xdg" / "warehouse" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return {**_clean_env(tmp_path), "WH_HOME": str(tmp_path / "home")}


@pytest.mark.parametrize(
    ("text", "mode", "said"),
    [
        ('[clusters.east]\nurl = "http://x"\ntoken = "t"\n', 0o644, "chmod 600"),
        ('[clusters.east]\nurl = "ftp://x"\ntoken = "t"\n', 0o600, "clusters.east.url"),
        ('[clusters.east]\nurl = "http://x"\n', 0o600, "clusters.east.token: missing"),
        ('[clusters."a b"]\nurl = "http://x"\ntoken = "t"\n', 0o600, "bad cluster name"),
        ('[clusters.east]\nurl = "http://x"\ntoken = "t"\nport = 1\n', 0o600, "only url and"),
        ("clusters = 3\n", 0o600, "must be a table"),
    ],
)
def test_a_bad_clusters_table_is_one_clear_error(
    tmp_path: Path, text: str, mode: int, said: str
) -> None:
    env = {**_config(tmp_path, text, mode), "WH_URL": "http://127.0.0.1:9", "WH_TOKEN": "t"}
    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("WH_")}
    done = CliRunner().invoke(cli, ["ls", "x"], env={**unset, **env})
    assert done.exit_code == 2, done.stderr
    assert done.stderr.startswith("Error: ") and said in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_a_bad_cluster_name_is_refused(tmp_path: Path) -> None:
    env = {**_config(tmp_path, ""), "WH_CLUSTER_NAME": "no/slash"}
    done = _run([WH_BIN, "config"], env)
    assert done.returncode == 2 and "WH_CLUSTER_NAME" in done.stderr, done.stderr
    served = _run(
        [WH_BIN, "serve", "--listen", "127.0.0.1:0", "--cluster-name", "a b"],
        {k: v for k, v in env.items() if k != "WH_CLUSTER_NAME"},
    )
    assert served.returncode == 2 and "--cluster-name" in served.stderr, served.stderr


def test_wh_cluster_names_the_cluster_too(tmp_path: Path) -> None:
    # DESIGN §4.4 calls the variable WH_CLUSTER; WH_CLUSTER_NAME wins over it.
    env = {**_config(tmp_path, ""), "WH_CLUSTER": "west"}
    shown = _run([WH_BIN, "config"], env)
    assert shown.returncode == 0, shown.stderr
    assert "WH_CLUSTER_NAME\twest\tenv WH_CLUSTER\n" in shown.stdout, shown.stdout
    both = _run([WH_BIN, "config"], {**env, "WH_CLUSTER_NAME": "east"})
    assert both.returncode == 0, both.stderr
    assert "WH_CLUSTER_NAME\teast\tenv WH_CLUSTER_NAME\n" in both.stdout, both.stdout
    bad = _run([WH_BIN, "config"], {**env, "WH_CLUSTER": "no/slash"})
    assert bad.returncode == 2 and bad.stderr.startswith("Error: WH_CLUSTER:"), bad.stderr


def test_copy_says_which_clusters_token_was_refused(tmp_path: Path) -> None:
    # A copy talks to two installations with two tokens; "unknown or expired
    # token" alone did not say which one to fix.
    env = {**_clean_env(tmp_path), "WH_HOME": str(tmp_path / "home")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return _run([WH_BIN, *args], env)

    pdh = ok(run("put", str(tree(tmp_path / "src", a=b"copied\n")))).strip()
    with gc_cluster(tmp_path / "c", count=1) as (_, ctl):
        config = tmp_path / "xdg" / "warehouse" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(f'[clusters.dest]\nurl = "{ctl.url}"\ntoken = "whNotAToken"\n')
        config.chmod(0o600)
        done = run("copy", pdh, "--to", "dest")
        assert done.returncode == 6, done.stderr
        assert done.stderr.startswith("Error: cluster dest: ") and "[clusters.dest]" in done.stderr
