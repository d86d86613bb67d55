"""Shared fixtures: run the CLI in-process or as a real subprocess, and check every report
against the pydantic contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parent.parent
# The project's own spec files in the shapes real generators publish, with what the CDI library makes of each.
CORPUS = REPO / "tests" / "cdi" / "corpus"
# This run's value of the label on cgpu's verify containers: leftover checks count only this run's
# containers, so test runs sharing a host (and their podman) do not fail each other.
VERIFY_LABEL = f"test-{uuid.uuid4().hex[:12]}"
VERIFY_FILTER = f"label=cgpu.verify={VERIFY_LABEL}"


# Hypothesis' default 200 ms per example is a wall-clock limit: a busy host fails a correct test
# with it (an example took 304 ms there, then 13 ms on replay). The suite's profile has no
# per-example deadline and does not count slow data generation as a failure; the examples and
# their number stay each test's own. CGPU_HYPOTHESIS_PROFILE=timed brings the deadline back, for
# someone hunting a slow example on an idle machine.
settings.register_profile("load-proof", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("timed", deadline=200)
settings.load_profile(os.environ.get("CGPU_HYPOTHESIS_PROFILE", "load-proof"))


# Fixtures that need a working podman: a test that uses one is a podman test, so that
# `-m "not podman"` (the quick tier, README "Development") leaves out every test that needs it.
PODMAN_FIXTURES = frozenset(
    {
        "stand_in_image",
        "babbling_image",
        "probe_image",
        "podman_service",
        "no_leftover_containers",
        "machines",
        "podman_api",
        "probe_images",
        "real_probe_image",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PODMAN_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.podman)


@pytest.fixture
def run_cli():
    """Run `python -m cgpu ARGS` as a subprocess; returns (exit code, stdout, stderr)."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> tuple[int, str, str]:
        proc = subprocess.run(
            [sys.executable, "-m", "cgpu", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
            env={**os.environ, **(env or {})},
        )
        validate_cli_output(args, proc.stdout)
        return proc.returncode, proc.stdout, proc.stderr

    return run


def corpus_expected() -> dict[str, dict[str, Any]]:
    """file name -> {kind, cdiVersion, devices[, templated]} or {error: start of the message}."""
    return json.loads((CORPUS / "expected.json").read_text())


def corpus_files() -> list[Path]:
    return [CORPUS / name for name in sorted(corpus_expected())]


def validate_report(data: dict[str, Any] | str) -> Any:
    """Validate a report (dict or JSON text) against the JSON Schema `cgpu schema` prints and the
    pydantic model; returns the model."""
    from cgpu.model import Report, report_schema

    if isinstance(data, str):
        data = json.loads(data)
    model = Report.model_validate(data)
    _schema_validator("report", report_schema).validate(data)
    return model


def validate_image_check(data: dict[str, Any] | str) -> Any:
    """Validate an image check's answer against `cgpu schema image-check` and its model."""
    from cgpu.model import ImageCheck, image_check_schema

    if isinstance(data, str):
        data = json.loads(data)
    model = ImageCheck.model_validate(data)
    _schema_validator("image-check", image_check_schema).validate(data)
    return model


def validate_cli_output(args: tuple[str, ...] | list[str], stdout: str) -> None:
    """Every JSON answer a CLI run in the tests prints is checked against its schema."""
    args = list(args)
    if "--json" not in args or not stdout.strip():
        return  # a usage error or an interrupted run prints no answer
    if args[:2] == ["image", "check"]:
        validate_image_check(stdout)
    elif args[:1] == ["probe"]:
        validate_report(stdout)


_VALIDATORS: dict[str, Any] = {}


def _schema_validator(name: str, schema: Any) -> Any:
    if name not in _VALIDATORS:
        import jsonschema

        jsonschema.Draft202012Validator.check_schema(schema())
        _VALIDATORS[name] = jsonschema.Draft202012Validator(schema())
    return _VALIDATORS[name]


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """The paths the spec reader parses from now on (rather than reading back from a cache)."""
    from cgpu.cdi import scan

    calls: list[str] = []
    real = scan.parse_spec

    def counting(data: bytes, *, path: str, **kwargs: Any) -> Any:
        calls.append(path)
        return real(data, path=path, **kwargs)

    monkeypatch.setattr(scan, "parse_spec", counting)
    return calls


@pytest.fixture(autouse=True)
def _every_built_report_is_valid(monkeypatch):
    """Every report a backend builds in a test (in-process) is checked against the model."""
    from cgpu.report import ReportBuilder

    build = ReportBuilder.build

    def checked(self: ReportBuilder) -> dict[str, Any]:
        from cgpu.model import Report

        report = build(self)
        Report.model_validate(report)
        return report

    monkeypatch.setattr(ReportBuilder, "build", checked)


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir_and_label(tmp_path_factory):
    """Every test (and every CLI it starts) caches under a temporary dir, never the user's, and
    labels its verify containers with this run's value."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CGPU_CACHE_DIR", str(tmp_path_factory.mktemp("cgpu-cache")))
        patch.setenv("CGPU_VERIFY_LABEL", VERIFY_LABEL)
        yield
