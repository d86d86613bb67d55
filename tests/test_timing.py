"""The suite's own time rules (tests/timing.py): a busy host cannot fail a correct run."""

from __future__ import annotations

import importlib
import inspect
import threading
import time

import pytest
from hypothesis.internal.detection import is_hypothesis_test

from tests.conftest import REPO
from tests.timing import PROMISED_S, allowed, timed, wait_for


def _hypothesis_tests() -> dict[str, object]:
    """Every Hypothesis test in the suite: 'module::name' -> the test function."""
    found: dict[str, object] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        if "hypothesis" not in path.read_text():
            continue
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        module = importlib.import_module(name)
        places = [module, *(c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == name)]
        for place in places:
            for attribute, value in vars(place).items():
                if is_hypothesis_test(value):
                    found[f"{name}::{attribute}"] = value
    return found


def test_every_hypothesis_test_runs_without_a_per_example_deadline():
    """The suite's profile (tests/conftest.py) reaches every Hypothesis test, those with their own
    @settings included: a 200 ms per-example limit fails a correct example on a busy host."""
    found = _hypothesis_tests()
    assert len(found) >= 37, sorted(found)  # the suite has 37; fewer means some were not found
    timed_out = {name: s.deadline for name, t in found.items() if (s := t._hypothesis_internal_use_settings).deadline}
    assert timed_out == {}


def test_a_bound_is_the_promise_on_an_idle_host_and_scales_with_a_slow_one():
    assert allowed(10, baseline=0.3) == 10 + PROMISED_S
    assert allowed(10, baseline=3) == 16


def test_wait_for_returns_the_condition_once_it_holds():
    flag: list[int] = []
    threading.Timer(0.1, flag.append, (1,)).start()
    value, seconds = timed(lambda: wait_for(lambda: flag, within=30, what="the flag"))
    assert value == [1] and seconds < 30


def test_wait_for_names_what_never_came():
    started = time.monotonic()
    with pytest.raises(AssertionError, match="not within 0.2 s: the door opening"):
        wait_for(lambda: False, within=0.2, what="the door opening")
    assert time.monotonic() - started >= 0.2
