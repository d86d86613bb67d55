"""The local backend's entry: run the probe (`cgpu/gpu_probe/standalone.py`) right here and report what it found."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from cgpu.apis import CONTAINER_APIS
from cgpu.gpu_probe import PROBE_SCRIPT
from cgpu.gpu_probe.answer import apply_answer, check_answer
from cgpu.report import ReportBuilder

if TYPE_CHECKING:
    from collections.abc import Callable


def probe(report: ReportBuilder, *, timeout: float | None = None) -> None:
    """Probe this environment: each API in a child process, at most `timeout` seconds each."""
    if not sys.platform.startswith("linux"):
        report.failed(
            "local",
            "the local backend probes a Linux environment (a container or VM); "
            "on macOS use --backend krunkit, on Windows --backend wsl",
        )
        return
    from cgpu.gpu_probe import standalone as probe_module

    limit = timeout if timeout is not None else probe_module.DEFAULT_TIMEOUT
    report.progress(f"probing GPU APIs in child processes (up to {limit:g} s)")
    try:
        run_probe: Callable[..., dict[str, Any]] = probe_module.run_probe  # the probe is untyped: Python 3.8
        data = run_probe(timeout=limit)
    except OSError as exc:
        report.failed(str(PROBE_SCRIPT), f"the probe could not run: {exc}")
        return
    answer = check_answer(data, source="local probe")
    apply_answer(report, answer)
    if all(answer.apis[api].state == "unknown" for api in CONTAINER_APIS):
        report.failed("local probe", "the probe got no answer for any GPU API (see problems)")
