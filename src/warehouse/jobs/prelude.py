"""What a step's process does before it execs the step, as a shell prelude.

A hook run between fork and exec (``preexec_fn``) makes Python fork the
whole manager instead of using vfork: its page tables copied, every thread
stalled while it happens, then each page it writes copied again until the
child execs — about 25 ms a step for a controller of 100 MB, the larger
part of a trivial step's cost. What a step's process must do first is
simple enough for ``/bin/sh`` (run by vfork, its start about a
millisecond): join the step's control groups, and tell the lifeline its
pid with a moment its manager was seen alive (``Lifeline.teller``). A step
outside the sandbox also asks the kernel to stop it when its manager's
thread ends (``PR_SET_PDEATHSIG``): util-linux's ``setpriv --pdeathsig``
does that, then a second short shell checks the manager did not die
before (as ``lifeline.on_parent_death`` does). Bubblewrap does the same for
a sandboxed step (``--die-with-parent``). Without ``setpriv``, where a
step's limits are resource limits (set in its own process), or where
``/bin/sh`` is not dash (whose changes to what it passes on are known and
undone), the Python hook stays.

The shell is given its values as arguments (never in the script's text),
leaves the step's environment exactly as it was (dash would set ``PWD``,
``IFS``, ``OPTIND`` and ``PPID``),
reads the clock and its parent from ``/proc`` (``/proc/uptime`` is the boot
time clock the lifeline reads, in hundredths), and writes to the
lifeline's pipe through ``/proc/MANAGER/fd/N``, so the pipe is never among
the step's open descriptors.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
from collections.abc import Callable, Mapping, Sequence
from functools import cache

from warehouse.jobs.lifeline import Lifeline, on_parent_death
from warehouse.limits import Guard

__all__ = ["before_exec", "prelude"]

# Both scripts' own variables start "_wh" (a step whose environment has
# such a name keeps the Python hook: the scripts would change it). Dash
# sets PWD, IFS, OPTIND and PPID for what it runs: $1-$4 say how the step's
# environment had them ("-": not at all, "=VALUE"), put back before exec
# (of those it did not have, dash passes on only PWD; it takes only a
# number for OPTIND: a step with another keeps the Python hook).
_KEPT = ("PWD", "IFS", "OPTIND", "PPID")
_RESTORE = """\
case $1 in -) unset PWD ;; *) PWD=${1#=} ;; esac
case $3 in -) ;; *) OPTIND=${3#=} ;; esac
case $4 in -) ;; *) PPID=${4#=} ;; esac
case $2 in -) ;; *) IFS=${2#=} ;; esac
shift 4
exec "$@"
"""

# $5 manager pid (0: no lifeline), $6 its end of the lifeline's pipe, then
# cgroup.procs files up to "--", then the step. "001": the lifeline takes
# int(seconds * ticks), which 12.34 * 100 would round down a tick.
_SCRIPT = """\
_whm=$5 _whfd=$6
read _whup _whrest < /proc/uptime
read _whs _whc _wht _whpp _whrest < /proc/self/stat
_wh1=$1 _wh2=$2 _wh3=$3 _wh4=$4
shift 6
while [ "$1" != -- ]; do
  echo 0 2>/dev/null > "$1" || { echo "wh: the step's limits could not be set ($1)" >&2; exit 126; }
  shift
done
shift
if [ "$_whm" != 0 ] && [ "$_whpp" = "$_whm" ]; then
  echo "+$$ ${_whup}001 ?" 2>/dev/null >> "/proc/$_whm/fd/$_whfd"
fi
set -- "$_wh1" "$_wh2" "$_wh3" "$_wh4" "$@"
""" + _RESTORE

# After setpriv asked for the death signal: $5 the manager's pid, $6 that
# signal; taken now if the manager died before the request took.
_ORPHANED = """\
read _whs _whc _wht _whpp _whrest < /proc/self/stat
[ "$_whpp" = "$5" ] || kill -s "$6" $$
_wh1=$1 _wh2=$2 _wh3=$3 _wh4=$4
shift 6
set -- "$_wh1" "$_wh2" "$_wh3" "$_wh4" "$@"
""" + _RESTORE


def _kept(env: Mapping[str, str]) -> list[str]:
    """How ``env`` has what dash changes, for ``_RESTORE``."""
    return ["-" if name not in env else "=" + env[name] for name in _KEPT]


@cache
def _dash() -> bool:
    """Whether /bin/sh is dash, whose changes to the environment are known."""
    return os.path.basename(os.path.realpath("/bin/sh")) == "dash"


@cache
def _setpriv() -> str | None:
    return shutil.which("setpriv")


def startable(program: str, path: str | None, cwd: str) -> None:
    """Raise the error exec would give for ``program`` (found on ``path``
    like exec does, a relative path from ``cwd``, the directory the step
    starts in) when it is surely not a program: not found, not
    executable, neither a binary nor a script with an interpreter that is
    there. A shell's exec would report these its own way, and run a file it
    cannot exec as a shell script (as glibc's execvp would): the step's
    process must fail as Python's exec does, before it is started."""
    if "/" in program:
        found: str | None = os.path.join(cwd, program)
    else:
        found = shutil.which(program, path=path or os.defpath)
    if found is None or not os.path.exists(found):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    with open(found, "rb") as f:
        head = f.read(256)
    if head.startswith(b"\x7fELF"):
        return
    if not head.startswith(b"#!"):
        raise OSError(errno.ENOEXEC, os.strerror(errno.ENOEXEC), program)
    interpreter = head[2:].split(b"\n", 1)[0].split()
    if not interpreter or not os.access(interpreter[0], os.X_OK):
        name = interpreter[0].decode(errors="replace") if interpreter else ""
        raise FileNotFoundError(errno.ENOENT, f"no interpreter {name!r} for it", program)


def prelude(
    argv: Sequence[str],
    groups: Sequence[str],
    teller: tuple[int, int] | None,
    env: Mapping[str, str],
) -> list[str]:
    """``argv`` run by a shell that first joins ``groups`` (``cgroup.procs``
    files) and, with ``teller`` (the manager's pid, its descriptor of the
    lifeline's pipe), tells the lifeline its pid; ``env``: the environment
    the shell is given, which the step gets as it is."""
    manager, fd = teller or (0, 0)
    told = [str(manager), str(fd)]
    return ["/bin/sh", "-c", _SCRIPT, "wh-step", *_kept(env), *told, *groups, "--", *argv]


def before_exec(
    argv: Sequence[str],
    *,
    program: str,
    env: Mapping[str, str],
    cwd: str,
    sandboxed: bool,
    guard: Guard | None,
    lifeline: bool,
    tell: Lifeline | None,
) -> tuple[list[str], Callable[[], None] | None]:
    """The argv to start and the hook to run before exec (None: none, so
    Python starts it by vfork). The step's process is stopped by the kernel
    when the thread starting it ends, then killed whole by the lifeline
    (bubblewrap kills its whole sandbox itself; without a lifeline it is
    killed), and held to its limits. ``program``: the step's program (in
    the sandbox, not ``argv[0]``); ``env`` its environment; ``cwd`` the
    directory it starts in. OSError as exec
    would raise for a program that surely cannot start."""
    groups = guard.group_files() if guard is not None else []
    setpriv = _setpriv()
    death = signal.SIGSTOP if lifeline else signal.SIGKILL
    shell = _dash() and not any(name.startswith("_wh") for name in env)
    shell = shell and env.get("OPTIND", "0").isdigit()
    if groups is not None and shell and (sandboxed or setpriv is not None):
        startable(program, env.get("PATH"), cwd)
        told = tell.teller_args() if tell is not None else None
        if not sandboxed:
            name = death.name.removeprefix("SIG")
            checked = ["/bin/sh", "-c", _ORPHANED, "wh-step", *_kept(env), str(os.getpid()), name]
            checked += argv
            argv = [str(setpriv), "--pdeathsig", name, "--", *checked]
        return (prelude(argv, groups, told, env) if groups or told else list(argv)), None
    teller = tell.teller() if tell is not None else None
    hooks = [teller] if teller is not None else []
    hooks += [] if sandboxed else [on_parent_death(death)]
    hooks += [guard.hook()] if guard is not None else []
    if len(hooks) < 2:
        return list(argv), (hooks[0] if hooks else None)

    def each() -> None:
        for hook in hooks:
            hook()

    return list(argv), each
