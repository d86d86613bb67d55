"""The backends, one module each, imported only when chosen.

Each module has `probe(report: ReportBuilder, **options) -> None`: it fills the report
and calls `report.failed(...)` when it could not run. Options are the backend's own
options (`cgpu.options.OPTIONS`, the table of them), passed as keywords.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from cgpu.errors import CgpuValueError
from cgpu.options import BACKENDS, check_names, seconds
from cgpu.report import ReportBuilder

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

__all__ = ["BACKENDS", "default_backend", "run_backend"]


def default_backend(platform: str = sys.platform) -> str:
    if platform == "win32":
        return "wsl"
    if platform == "darwin":
        return "krunkit"
    return "cdi"


def run_backend(name: str, options: dict[str, Any], *, progress: Callable[[str], None] | None = None) -> ReportBuilder:
    """Run one backend; unknown options raise TypeError, a timeout out of range ValueError."""
    if name not in BACKENDS:
        raise CgpuValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    check_names(name, options)
    seconds("timeout", options.get("timeout"))
    report = ReportBuilder(name, progress=progress)
    module = importlib.import_module(f"cgpu.backends.{name}")
    module.probe(report, **options)
    return report
