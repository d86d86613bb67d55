"""Time in the tests, measured so that a busy host cannot fail a correct run.

A test that bounds how long cgpu took never uses a small fixed margin: it measures a baseline on
the same host at the same moment (the same command where nothing hangs, or an immediate no-op run
of it) and allows the limit under test plus that baseline, scaled (`allowed`). A test that waits
for something polls for the condition with a deadline (`wait_for`), never a fixed sleep."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# What cgpu promises past a --timeout on a host at load 8 on 2 cores (docs/hardening.md,
# "Deadlines"): the floor of every allowance, so an idle host checks the promise itself.
PROMISED_S = 2.0
# A baseline is one run; the run under test does that work about once before its deadline and
# once after (start-up before, the report and exit after), and the load moves between the two.
BASELINE_FACTOR = 2.0


def timed(action: Callable[[], T]) -> tuple[T, float]:
    """What `action()` returned and the seconds it took (monotonic clock)."""
    started = time.monotonic()
    result = action()
    return result, time.monotonic() - started


def allowed(limit: float, baseline: float, *, promise: float = PROMISED_S) -> float:
    """The most seconds a run stopped at `limit` may take in all: the limit, plus the promise
    (cgpu's 2 s past a --timeout, unless the test's subject promises another) or, on a host slow
    enough that the baseline says so, the baseline scaled."""
    return limit + max(promise, BASELINE_FACTOR * baseline)


def assert_within(
    seconds: float, limit: float, baseline: Callable[[], float], what: str, *, promise: float = PROMISED_S
) -> None:
    """Fail unless a run that took `seconds` under a limit of `limit` is within `allowed`. The
    baseline (seconds of the same command with nothing to wait for, on this host, now) is
    measured only when the promise alone is not met: an idle host needs none."""
    if seconds <= limit + promise:
        return
    base = baseline()
    assert seconds <= allowed(limit, base, promise=promise), (
        f"{what}: {seconds:.1f} s under a limit of {limit:g} s, while the same with nothing to wait for took "
        f"{base:.1f} s here"
    )


def interpreter_run() -> float:
    """Seconds to start a Python interpreter that does nothing and collect it: the baseline of a
    test whose command is cgpu's own process handling (start, stop, kill), not a cgpu run."""
    return timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=600))[1]


def wait_for(condition: Callable[[], T], *, within: float, what: str, every: float = 0.05) -> T:
    """Poll `condition` until it returns something true and return that; AssertionError naming
    `what` when it has not after `within` seconds (one last look first)."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            value = condition()
            if value:
                return value
            raise AssertionError(f"not within {within:g} s: {what}")
        time.sleep(every)


def asleep(pid: int) -> bool:
    """Every thread of the process is asleep (waiting on something), none running or ready to
    run: it has settled into a wait. Linux (/proc); False where it cannot be read."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        states = [open(f"/proc/{pid}/task/{t}/stat").read().rpartition(")")[2].split()[0] for t in tasks]
    except (OSError, IndexError):
        return False
    return bool(states) and all(state in ("S", "D") for state in states)
