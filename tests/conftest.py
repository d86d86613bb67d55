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

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
# This run's value of the label on cgpu's verify containers: leftover checks count only this run's
# containers, so test runs sharing a host (and their podman) do not fail each other.
VERIFY_LABEL = f"test-{uuid.uuid4().hex[:12]}"
VERIFY_FILTER = f"label=cgpu.verify={VERIFY_LABEL}"


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
        return proc.returncode, proc.stdout, proc.stderr

    return run


def validate_report(data: dict[str, Any] | str) -> Any:
    """Validate a report (dict or JSON text) against the contract; returns the model."""
    from cgpu.model import Report

    if isinstance(data, str):
        data = json.loads(data)
    return Report.model_validate(data)


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir_and_label(tmp_path_factory):
    """Every test (and every CLI it starts) caches under a temporary dir, never the user's, and
    labels its verify containers with this run's value."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CGPU_CACHE_DIR", str(tmp_path_factory.mktemp("cgpu-cache")))
        patch.setenv("CGPU_VERIFY_LABEL", VERIFY_LABEL)
        yield
