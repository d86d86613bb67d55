"""The report as a node_exporter textfile (Prometheus text exposition format 0.0.4), for
`cgpu watch --metrics-file DIR/cgpu.prom` and node_exporter's `--collector.textfile.directory`.

Metrics (gauges; stable like the labels, see docs/kubernetes.md):
  cgpu_api_state{api, state}            1 for each API's current state, 0 for the other states
  cgpu_devices                          distinct devices containers can be given
  cgpu_problems{severity}               problems in the last report, by severity
  cgpu_last_probe_timestamp_seconds     when the last probe finished (Unix time)
  cgpu_last_probe_duration_seconds      how long it took
  cgpu_write_ok{file}                   1 when the last write of that output file succeeded
  cgpu_nvidia_driver_info{version, cuda, cuda_state}
                                        1, where the report has an NVIDIA driver (`nvidia_driver`)
  cgpu_nvidia_driver_cuda_version       the highest CUDA the driver supports, as cuDriverGetVersion
                                        encodes it (1000 * major + 10 * minor: 12080 for 12.8); only
                                        where it is known (or a floor: cuda_state at-least)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cgpu.apis import API_ORDER

STATES = ("provided", "absent", "unknown")
SEVERITIES = ("error", "warning", "info")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def metrics_text(report: Mapping[str, Any], *, finished_at: float, duration: float, writes: Mapping[str, bool]) -> str:
    from cgpu.fleet.nfd import device_count

    lines = [
        "# HELP cgpu_api_state Whether each GPU API is provided to containers, absent, or unknown (1: current).",
        "# TYPE cgpu_api_state gauge",
    ]
    for api in API_ORDER:
        current = report["apis"][api]["state"]
        lines += [f'cgpu_api_state{{api="{api}",state="{state}"}} {int(state == current)}' for state in STATES]
    lines += [
        "# HELP cgpu_devices Distinct devices containers can be given on this node.",
        "# TYPE cgpu_devices gauge",
        f"cgpu_devices {device_count(report)}",
        "# HELP cgpu_problems Problems in the last report, by severity.",
        "# TYPE cgpu_problems gauge",
    ]
    counts = dict.fromkeys(SEVERITIES, 0)
    for problem in report.get("problems", []):
        severity = problem.get("severity")
        if severity in counts:
            counts[severity] += 1
    lines += [f'cgpu_problems{{severity="{severity}"}} {count}' for severity, count in counts.items()]
    lines += [
        "# HELP cgpu_last_probe_timestamp_seconds When the last probe finished (Unix time).",
        "# TYPE cgpu_last_probe_timestamp_seconds gauge",
        f"cgpu_last_probe_timestamp_seconds {finished_at:.3f}",
        "# HELP cgpu_last_probe_duration_seconds How long the last probe took.",
        "# TYPE cgpu_last_probe_duration_seconds gauge",
        f"cgpu_last_probe_duration_seconds {duration:.6f}",
        "# HELP cgpu_write_ok Whether the last write of each output file succeeded.",
        "# TYPE cgpu_write_ok gauge",
    ]
    lines += [f'cgpu_write_ok{{file="{_escape(name)}"}} {int(ok)}' for name, ok in writes.items()]
    lines += _driver_cuda_lines(report.get("nvidia_driver"))
    return "\n".join(lines) + "\n"


def _driver_cuda_lines(driver: Any) -> list[str]:
    if not isinstance(driver, Mapping):
        return []
    version, cuda, state = (str(driver.get(key) or "") for key in ("version", "cuda", "cuda_state"))
    lines = [
        "# HELP cgpu_nvidia_driver_info The host's NVIDIA driver and the highest CUDA it supports (1: current).",
        "# TYPE cgpu_nvidia_driver_info gauge",
        f'cgpu_nvidia_driver_info{{version="{_escape(version)}",cuda="{_escape(cuda)}",'
        f'cuda_state="{_escape(state)}"}} 1',
    ]
    major, dot, minor = cuda.partition(".")
    if state in ("known", "at-least") and dot and f"{major}{minor}".isascii() and major.isdigit() and minor.isdigit():
        lines += [
            "# HELP cgpu_nvidia_driver_cuda_version The highest CUDA the driver supports, 1000 * major + 10 * minor.",
            "# TYPE cgpu_nvidia_driver_cuda_version gauge",
            f"cgpu_nvidia_driver_cuda_version {1000 * int(major) + 10 * int(minor)}",
        ]
    return lines
