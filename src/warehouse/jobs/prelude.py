"""What a step's process does before it execs the step, as a shell prelude.

A hook run between fork and exec (``preexec_fn``) makes Python fork the
whole manager instead of using vfork: its page tables copied, every thread
stalled while it happens, then each page it writes copied again until the
child execs — about 25 ms a step for a controller of 100 MB, the larger
part of a trivial step's cost. What a sandboxed step's process must do
first is simple enough for ``/bin/sh`` (run by vfork, its start about a
millisecond): join the step's control groups, and tell the lifeline its
pid with a moment its manager was seen alive (``Lifeline.teller``). A step
outside the sandbox also needs ``PR_SET_PDEATHSIG``, which a shell cannot
set: it keeps the Python hook.

The shell is given its values as arguments (never in the script's text),
reads the clock and its parent from ``/proc`` (``/proc/uptime`` is the boot
time clock the lifeline reads, in hundredths), and writes to the
lifeline's pipe through ``/proc/MANAGER/fd/N``, so the pipe is never among
the step's open descriptors.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence

from warehouse.jobs.lifeline import Lifeline, on_parent_death
from warehouse.limits import Guard

__all__ = ["before_exec", "prelude"]

# $1 manager pid (0: no lifeline), $2 its end of the lifeline's pipe, then
# cgroup.procs files up to "--", then the step. "001": the lifeline takes
# int(seconds * ticks), which 12.34 * 100 would round down a tick.
_SCRIPT = """\
m=$1 fd=$2
shift 2
read up _ < /proc/uptime
read _ _ _ pp _ < /proc/self/stat
while [ "$1" != -- ]; do
  echo 0 2>/dev/null > "$1" || { echo "wh: the step's limits could not be set ($1)" >&2; exit 126; }
  shift
done
shift
[ "$m" = 0 ] || [ "$pp" != "$m" ] || echo "+$$ ${up}001 ?" 2>/dev/null >> "/proc/$m/fd/$fd"
exec "$@"
"""


def prelude(
    argv: Sequence[str], groups: Sequence[str], teller: tuple[int, int] | None
) -> list[str]:
    """``argv`` run by a shell that first joins ``groups`` (``cgroup.procs``
    files) and, with ``teller`` (the manager's pid, its descriptor of the
    lifeline's pipe), tells the lifeline its pid."""
    manager, fd = teller or (0, 0)
    return ["/bin/sh", "-c", _SCRIPT, "wh-step", str(manager), str(fd), *groups, "--", *argv]


def before_exec(
    argv: Sequence[str],
    *,
    sandboxed: bool,
    guard: Guard | None,
    lifeline: bool,
    tell: Lifeline | None,
) -> tuple[list[str], Callable[[], None] | None]:
    """The argv to start and the hook to run before exec (None: none, so
    Python starts it by vfork). The step's process is stopped by the kernel
    when the thread starting it ends, then killed whole by the lifeline
    (bubblewrap kills its whole sandbox itself), and held to its limits."""
    groups = guard.group_files() if guard is not None else []
    if sandboxed and groups is not None:
        told = tell.teller_args() if tell is not None else None
        return (prelude(argv, groups, told) if groups or told else list(argv)), None
    teller = tell.teller() if tell is not None else None
    hooks = [teller] if teller is not None else []
    death = signal.SIGSTOP if lifeline else signal.SIGKILL
    hooks += [] if sandboxed else [on_parent_death(death)]
    hooks += [guard.hook()] if guard is not None else []
    if len(hooks) < 2:
        return list(argv), (hooks[0] if hooks else None)

    def each() -> None:
        for hook in hooks:
            hook()

    return list(argv), each
