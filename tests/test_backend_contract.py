"""The backend contract beyond `probe`: what a backend module offers (`new_memory`, `answer_inputs`,
a memory's `tidy`) is asked for by name, never by which backend it is, and a library process keeps
one memory per backend."""

from __future__ import annotations

import sys
import types

import pytest

import cgpu.backends as backends
from cgpu.backends import AnswerInputs, Backend, memory, run_backend
from cgpu.report import ReportBuilder
from tests.conftest import REPO

SPEC = REPO / "cdi-samples" / "nvidia-8gpu-mig" / "spec"
HOST = REPO / "cdi-samples" / "hosts" / "nvidia-580"


class _Memory:
    def __init__(self) -> None:
        self.tidied = 0

    def clear(self) -> None:
        pass

    def stats(self) -> dict[str, int]:
        return {}

    def tidy(self) -> None:
        self.tidied += 1


@pytest.fixture
def offering(monkeypatch) -> types.ModuleType:
    """A backend module that offers everything, under a name no switch knows."""
    module = types.ModuleType("cgpu.backends.offering")
    given: list[object] = []

    def probe(report: ReportBuilder, memory: object = None, /, *, timeout: float | None = None) -> None:
        given.append(memory)

    def answer_inputs(report: object = None, **options: object) -> AnswerInputs:
        return AnswerInputs([f"/dirs/of/{sorted(options)}"], [], [])

    module.probe = probe  # type: ignore[attr-defined]
    module.new_memory = _Memory  # type: ignore[attr-defined]
    module.answer_inputs = answer_inputs  # type: ignore[attr-defined]
    module.given = given  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cgpu.backends.offering", module)
    monkeypatch.setattr(backends, "BACKENDS", (*backends.BACKENDS, "offering"))
    monkeypatch.setattr(backends, "check_names", lambda name, options: None)
    return module


def test_what_a_backend_offers_is_found_by_name(offering):
    backend = Backend("offering")
    kept = backend.new_memory()
    assert isinstance(kept, _Memory)
    watching = backend.watching({"timeout": 5.0}, kept)
    assert watching.inputs is not None and watching.inputs(None).spec_dirs == ["/dirs/of/['timeout']"]
    assert watching.tidy is not None
    watching.tidy()
    assert kept.tidied == 1
    backend.probe({}, memory=kept)
    assert offering.given == [kept]


def test_a_backend_that_offers_nothing_more_is_probed_as_before():
    backend = Backend("wsl")
    assert backend.new_memory() is None and memory("wsl") is None
    watching = backend.watching({})
    assert watching.inputs is None and watching.tidy is None


def test_a_library_process_keeps_one_memory_per_backend(monkeypatch, tmp_path):
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))
    kept = memory("cdi")
    assert kept is not None and memory("cdi") is kept
    kept.clear()
    assert kept.stats()["files"] == 0
    options = {"spec_dirs": [str(SPEC)], "root": str(HOST), "engine": "none"}
    first = run_backend("cdi", options).build()
    assert kept.stats()["files"] == 1 and kept.stats()["answers"] == 1
    own = Backend("cdi").new_memory()  # a memory of its own (a watch's): the process's is not touched
    assert own is not None and own is not kept
    kept.clear()
    again = run_backend("cdi", options, memory=own).build()
    assert own.stats()["files"] == 1 and kept.stats()["files"] == 0
    assert {k: v for k, v in again.items() if k != "checked_at"} == {
        k: v for k, v in first.items() if k != "checked_at"
    }
