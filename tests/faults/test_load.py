"""A light run of scripts/load_cdi.py for CI: concurrent CLI runs and library calls give the
answer each case gives alone, concurrent --verify runs against one podman service agree and
leave nothing behind, and concurrent cache users compute each answer once.

What counts is that every answer got is right and that enough came to be a load: a minimum
count, never how many fit in a number of seconds (a busy host does fewer; each part's time
limit only ends it)."""

from __future__ import annotations

import pytest

from scripts.load_cdi import CASES, cache_load, cli_load, library_load, reference_answers, verify_load
from tests.verify.conftest import private_spec_dir  # noqa: F401 - a fixture


@pytest.fixture(scope="module")
def expected() -> list[str]:
    return reference_answers()


@pytest.mark.slow
def test_concurrent_cli_runs(expected):
    result = cli_load(procs=8, runs=16, seconds=120, expected=expected)
    assert result["wrong"] == [] and result["left_running"] == []
    assert result["runs"] >= 8, result  # at least the first 8, all at once


@pytest.mark.slow
def test_concurrent_library_calls(expected):
    result = library_load(threads=8, calls=600, seconds=90, expected=expected, minimum=8 * len(CASES))
    for part, figures in result.items():
        assert figures["wrong"] == [], part
        assert figures["calls"] >= 8 * len(CASES), (part, figures)  # over 8 threads: each case in each


@pytest.mark.podman
def test_concurrent_verify_runs_share_one_service(private_spec_dir):
    """Both runs build the probe image when it is missing (at once: part of the test); it is kept,
    as another run on the host may be using it. Its spec goes to this process's private /etc/cdi."""
    result = verify_load(runs=2, seconds=300)
    if "skipped" in result:
        pytest.skip(result["skipped"])
    assert result["wrong"] == [] and result["containers_left"] == [] and result["left_running"] == []


def test_concurrent_cache_users_compute_each_answer_once():
    result = cache_load(procs=6, keys=2)
    assert result["wrong"] == [] and result["torn"] == [] and result["temp_left"] == []
    assert result["computations"] == 2 and result["entries"] == 2
