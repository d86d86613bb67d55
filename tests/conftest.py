"""Shared fixtures: run the CLI in-process or as a real subprocess, and check every report
against the pydantic contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


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
def _private_cache_dir(tmp_path_factory):
    """Every test (and every CLI it starts) caches under a temporary dir, never the user's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CGPU_CACHE_DIR", str(tmp_path_factory.mktemp("cgpu-cache")))
        yield
