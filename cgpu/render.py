"""The human-readable form of a report: devices and their APIs, the answer, then problems."""

from __future__ import annotations

from typing import Any

from cgpu.apis import API_ORDER


def render_report(report: dict[str, Any]) -> str:
    lines = [f"cgpu {report['cgpu_version']} · backend {report['backend']} · {report['platform']}", ""]
    devices = report["devices"]
    if devices:
        width = max(len("DEVICE"), *(len(d["name"]) for d in devices))
        verified = any("live_status" in d for d in devices)  # --verify ran: live answer beside the static one
        apis_width = max(len("APIS"), *(len(", ".join(d["apis"]) or "-") for d in devices))
        header = f"{'DEVICE':<{width}}  STATUS    APIS"
        lines.append(f"{header}{' ' * (apis_width - 4)}  LIVE (--verify)" if verified else header)
        for device in devices:
            status = str(device.get("status", ""))
            apis = ", ".join(device["apis"]) or "-"
            row = f"{device['name']:<{width}}  {status:<8}  {apis}"
            if verified and "live_status" in device:
                live = ", ".join(device.get("live_apis", [])) or "-"
                state = device["live_status"]
                row = f"{row:<{len(row) + apis_width - len(apis)}}  " + (
                    state if state == "failed" else f"{live} ({state})"
                )
            lines.append(row)
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
