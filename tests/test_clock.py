"""Where a whole run's --timeout starts: the CLI counts from the process's start (a busy host's
slow start-up is inside the limit), a library call and every later limit from the call."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from cgpu import clock

_AGE = (
    "import time; time.sleep({pause}); from cgpu.clock import process_started; "
    "print(time.monotonic() - process_started())"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process's start is read from /proc")
def test_the_process_start_is_before_its_imports():
    """A process that waits before it imports cgpu: its start is at least that wait before now."""
    pause = 0.5
    done = subprocess.run(
        [sys.executable, "-c", _AGE.format(pause=pause)], capture_output=True, text=True, timeout=60, check=True
    )
    age = float(done.stdout)
    assert age >= pause - 0.02  # a clock tick of rounding


def test_a_limit_counts_from_the_process_start_once(monkeypatch):
    monkeypatch.setattr(clock, "process_started", lambda: 100.0)
    clock.count_from_process_start()
    assert clock.limit_start() == 100.0
    before = time.monotonic()
    assert before <= clock.limit_start() <= time.monotonic()  # the next one: from now


def test_the_cli_called_in_process_counts_from_the_call(monkeypatch, capsys):
    """`main([...])` in a long-running process (a test, an agent) must not start its limit at that
    process's start, long ago."""
    from cgpu.cli import main

    asked = []
    monkeypatch.setattr(clock, "count_from_process_start", lambda: asked.append(True))
    assert main(["schema"]) == 0
    assert asked == []
    monkeypatch.setattr(sys, "argv", ["cgpu", "schema"])
    assert main() == 0
    assert asked == [True]
