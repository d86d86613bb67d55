"""The local backend (not implemented yet)."""

from __future__ import annotations

from typing import Any

from cgpu.report import ReportBuilder


def probe(report: ReportBuilder, **options: Any) -> None:
    report.failed("cgpu", "the local backend is not implemented yet")
