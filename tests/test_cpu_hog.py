"""scripts/cpu_hog.py, which checks the suite on an oversubscribed host: it passes the command's
exit status through, and its busy processes end with it or at its time limit, whichever first."""

from __future__ import annotations

import multiprocessing
import sys

from scripts import cpu_hog
from tests.timing import wait_for


def test_the_command_runs_under_the_hog_and_nothing_outlives_it():
    code = cpu_hog.main(["--times", "0.5", "--seconds", "120", "--", sys.executable, "-c", "raise SystemExit(3)"])
    assert code == 3
    assert multiprocessing.active_children() == []


def test_the_hog_stops_by_itself_at_its_time_limit():
    hogs = cpu_hog.start(0.5, 0.3)
    try:
        assert hogs
        wait_for(lambda: not any(hog.is_alive() for hog in hogs), within=60, what="the hog to end by itself")
    finally:
        cpu_hog.stop(hogs)
