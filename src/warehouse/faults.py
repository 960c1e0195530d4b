"""Fault points: the crash tests kill a process at a named point of its work.

``WH_FAULT_POINT=NAME`` makes ``fault_point(NAME)`` SIGKILL the process, so
a test can stop it exactly where a crash would do harm (between two writes
that must be kept together) rather than hope to hit that moment from outside.
"""

from __future__ import annotations

import os
import signal

__all__ = ["fault_point"]


def fault_point(name: str) -> None:
    if os.environ.get("WH_FAULT_POINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
