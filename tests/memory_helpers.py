"""Running `wh` under an address-space limit, learning its peak resident
size; what this process holds open."""

from __future__ import annotations

import os
import sys
from pathlib import Path

WH = str(Path(sys.executable).with_name("wh"))

# wh runs as the child of a small launcher that sets the limit, passes on a
# SIGTERM, waits and writes the child's peak resident size to a file. Not a
# child of pytest: a child's peak counts what its parent had mapped when it
# forked (the memory is its own until exec), so it would measure pytest.
_LAUNCH = """\
import os, resource, signal, sys
limit = int(sys.argv[1])
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.execv(sys.argv[3], sys.argv[3:])
signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGTERM))
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[2], "w") as f:
    f.write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def limited(limit: int, peak: Path, *args: str) -> list[str]:
    """The command running ``wh ARGS`` within ``limit`` bytes of address
    space; its peak resident size is written to ``peak`` when it ends."""
    return [sys.executable, "-S", "-c", _LAUNCH, str(limit), str(peak), WH, *args]


def open_under(*roots: Path) -> set[str]:
    """What this process has open under ``roots`` (unnamed scratch files
    show as "DIR/#INODE (deleted)")."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed since
        if any(target.startswith(f"{root}/") for root in roots):
            found.add(target)
    return found
