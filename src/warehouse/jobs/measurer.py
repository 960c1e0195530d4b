"""The program a step runs under where its executor cannot reap it itself
(inside a sandbox, in a Slurm batch): it runs the step and writes what the
step used (docs/usage.md).

Run by path as ``python -I -S measurer.py FILE -- PROGRAM ARG…``, once per
step, so it imports only modules built into the interpreter or loaded by
its own start (``os``, ``sys``, ``resource``, ``signal``): json, subprocess
and typing would triple its start, which every sandboxed step pays.
"""

import os
import resource
import signal
import sys

# (cpu seconds, peak memory bytes, bytes read, bytes written)
Measured = tuple[float, int, int, int]


def io_counters(pid: int) -> tuple[int, int]:
    """(rchar, wchar) of ``pid`` and the children it reaped; (0, 0) where
    the kernel keeps no such account or will not show it."""
    found = {"rchar": 0, "wchar": 0}
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            for line in f.read().decode().splitlines():
                name, _, value = line.partition(":")
                if name in found:
                    found[name] = int(value)
    except (OSError, ValueError):
        pass
    return found["rchar"], found["wchar"]


def wait_measured(pid: int) -> tuple[int, Measured]:
    """Wait for ``pid`` to end, measure it and reap it: (wait status, usage).

    ``/proc/PID/io`` is read between, while the zombie holds it."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    io = io_counters(pid)
    _, status, ru = os.wait4(pid, 0)
    return status, measured(ru, io)


def measured(ru: resource.struct_rusage, io: tuple[int, int]) -> Measured:
    # ru_maxrss is in KiB on Linux.
    return (ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024, io[0], io[1])


def main() -> None:
    """Run PROGRAM (its output is ours), then write its usage to FILE as a
    JSON list and exit as it did (128+N for a signal, as a shell says)."""
    out, argv = sys.argv[1], sys.argv[3:]
    if out.startswith("/dev/fd/"):
        # A pipe from the executor: the step must not inherit it (it could
        # write figures of its own there first).
        os.set_inheritable(int(out[len("/dev/fd/") :]), False)
    try:
        pid = os.posix_spawnp(argv[0], argv, os.environ)
    except OSError as e:
        print(f"wh: the step could not be started: {e}", file=sys.stderr)
        sys.exit(127 if isinstance(e, FileNotFoundError) else 126)
    # Signals a batch script's step gets (scancel) are the step's to end with.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda n, _f: os.kill(pid, n))
    status, usage = wait_measured(pid)
    cpu, peak, read, written = usage
    with open(out, "w") as f:
        f.write(f"[{cpu!r}, {peak}, {read}, {written}]")  # JSON, without json's import
    code = os.waitstatus_to_exitcode(status)
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
