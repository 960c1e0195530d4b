"""The documentation's recipes run as written: every ```sh runnable block of
README.md and docs/*.md, in bash with -euo pipefail, in a fresh $HOME.

The one liberty taken: a recipe's fixed controller port (8440) becomes a free
one, so that the test does not depend on that port being unused here.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import WH_BIN, make_tree

ROOT = Path(__file__).resolve().parent.parent
MARKER = "```sh runnable"
BLOCK = re.compile(r"^```sh runnable\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def runnable_blocks() -> list[tuple[str, int, str]]:
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append((doc.relative_to(ROOT).as_posix(), line, m.group(1)))
    return found


BLOCKS = runnable_blocks()


def test_the_readme_has_runnable_recipes() -> None:
    # The marker must not silently stop matching (a test that cannot fail).
    assert any(doc == "README.md" for doc, _, _ in BLOCKS)
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        assert doc.read_text().count(MARKER) == sum(1 for d, _, _ in BLOCKS if ROOT / d == doc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gone(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
@pytest.mark.parametrize(("doc", "line", "script"), BLOCKS, ids=[f"{d}:{n}" for d, n, _ in BLOCKS])
def test_runnable_block(tmp_path: Path, doc: str, line: int, script: str) -> None:
    home = tmp_path / "home"
    make_tree(home / "data" / "run42")
    script = script.replace("127.0.0.1:8440", f"127.0.0.1:{_free_port()}")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("WH_") and not k.startswith("XDG_")
    }
    env.update(HOME=str(home), PATH=f"{Path(WH_BIN).parent}:{env.get('PATH', '')}")
    log = tmp_path / "out.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=home,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its background servers are stopped with it
        )
        try:
            code = proc.wait(240)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            if not _gone(proc.pid, 30):
                os.killpg(proc.pid, signal.SIGKILL)
    output = log.read_text()
    sys.stdout.write(output)
    assert code == 0, f"{doc}:{line} failed:\n{output}"
    assert "Traceback" not in output
