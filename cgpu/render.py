"""The human-readable form of a report: devices and their APIs, the answer, then problems."""

from __future__ import annotations

from typing import Any

from cgpu.apis import API_ORDER


def render_report(report: dict[str, Any]) -> str:
    lines = [f"cgpu {report['cgpu_version']} · backend {report['backend']} · {report['platform']}", ""]
    devices = report["devices"]
    if devices:
        width = max(len("DEVICE"), *(len(d["name"]) for d in devices))
        lines.append(f"{'DEVICE':<{width}}  STATUS    APIS")
        for device in devices:
            status = str(device.get("status", ""))
            apis = ", ".join(device["apis"]) or "-"
            lines.append(f"{device['name']:<{width}}  {status:<8}  {apis}")
    else:
        lines.append("no devices found")
    lines.append("")
    containers = ", ".join(report["containers"]) or "none"
    lines.append(f"containers get: {containers}")
    for api in API_ORDER:
        mark = "+" if api in report["containers"] else "-"
        lines.append(f"  {mark} {api:<8} {report['evidence'][api]}")
    lines.extend(render_problems(report["problems"]))
    return "\n".join(lines)


def render_problems(problems: list[dict[str, str]]) -> list[str]:
    """The problems block shared by every human output: empty when there are none."""
    if not problems:
        return []
    return ["", "problems:", *(f"  {p['severity']:<7} {p['source']}: {p['message']}" for p in problems)]
