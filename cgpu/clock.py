"""Where a whole run's time limit starts. A library call counts its --timeout from the call; the
CLI counts it from the process's own start, so that a busy host's slow start (the interpreter and
the imports: 1.5 s at load 10 on 2 cores) is inside the limit, not added to it. Standard library
only, and cheap: the CLI imports this before anything else."""

from __future__ import annotations

import os
import time

_from_process_start = False


def count_from_process_start() -> None:
    """Make the next whole-run limit (`limit_start`) start when this process started. The CLI
    calls this first when it runs as the program (not when called in-process with arguments)."""
    global _from_process_start
    _from_process_start = True


def limit_start() -> float:
    """Where a whole-run limit set now starts, on the monotonic clock: the process's start, once,
    after `count_from_process_start`; else now (and so does every later limit of a long-running
    command, such as `cgpu watch`)."""
    global _from_process_start
    first, _from_process_start = _from_process_start, False
    return process_started() if first else time.monotonic()


def process_started() -> float:
    """When this process started, on the monotonic clock: from /proc on Linux (to the 10 ms of a
    clock tick); now where that cannot be read."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat", "rb") as stat:
            ticks = int(stat.read().rpartition(b")")[2].split()[19])  # field 22, starttime
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):  # no /proc, no CLOCK_BOOTTIME (macOS)
        return now
    return now - age if 0 <= age < 3600 else now
