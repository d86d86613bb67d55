"""The human-readable forms of a report: the answer first, then per-API lines, devices, problems.

Every string taken from the report passes through `cgpu.terminal.escape` (it may hold spec
values, file names, stderr); lines are wrapped to `columns` with a hanging indent, and colour
is added after wrapping so it never counts towards a line's width.
"""

from __future__ import annotations

from typing import Any

from cgpu.apis import API_ORDER, METAL_EVIDENCE
from cgpu.options import DEFAULT_ROOT
from cgpu.problem import SEVERITIES
from cgpu.terminal import PLAIN, Style, escape, wrap

SEVERITY_ORDER = SEVERITIES  # a built report's problems are its JSON objects here (also read back from a file)
_SEVERITY_STYLE = {"error": ("bold", "red"), "warning": ("yellow",), "info": ("dim",)}
_MARK = {"provided": "+", "absent": "-", "unknown": "?"}
_STATE_STYLE = {"provided": ("green",), "absent": (), "unknown": ("yellow",)}
_METAL_SHORT = "Apple host API: never reaches a Linux container (Vulkan over Venus does)"


def states(report: dict[str, Any]) -> dict[str, str]:
    return {api: report["apis"][api]["state"] for api in API_ORDER}


def summary(report: dict[str, Any]) -> str:
    """The answer in one line: what containers get, what cgpu could not tell, devices and problems."""
    state = states(report)
    provided = [api for api in API_ORDER if state[api] == "provided"]
    unknown = [api for api in API_ORDER if state[api] == "unknown"]
    # never "none" while an API is unknown: that would pass for a no
    got = ", ".join(provided) or ("nothing known" if unknown else "none")
    parts = [f"containers get: {got}" + (f"; unknown: {', '.join(unknown)}" if unknown else "")]
    devices, distinct = report["devices"], len(group_aliases(report["devices"]))
    names = f" ({len(devices)} names)" if len(devices) != distinct else ""
    parts.append(f"{distinct} device{'' if distinct == 1 else 's'}{names}")
    problems = merge_problems(report["problems"])
    if problems:
        counts = [f"{n} {s}{'' if n == 1 else 's'}" for s in SEVERITY_ORDER if (n := _count(problems, s))]
        parts.append(", ".join(counts))
    else:
        parts.append("no problems")
    return " · ".join(parts)


def _count(problems: list[dict[str, str]], severity: str) -> int:
    return sum(1 for p in problems if p["severity"] == severity)


def brief(report: dict[str, Any]) -> str:
    """One line for scripts: provided APIs, then unknown ones marked `?`; `-` when nothing is."""
    state = states(report)
    words = [api for api in API_ORDER if state[api] == "provided"]
    words += [f"{api}?" for api in API_ORDER if state[api] == "unknown"]
    return ",".join(words) or "-"


def render_report(report: dict[str, Any], *, columns: int = 80, style: Style = PLAIN) -> str:
    state = states(report)
    colour = ("bold", "yellow") if "unknown" in state.values() else ("bold",)
    lines = [style(line, *colour) for line in wrap(summary(report), columns, indent=2)]
    about = (
        f"cgpu {escape(report['cgpu_version'])} · backend {escape(report['backend'])} · {escape(report['platform'])}"
    )
    lines += [style(line, "dim") for line in wrap(about, columns, indent=2)]
    lines.append("")
    for api in API_ORDER:
        text = _METAL_SHORT if api == "metal" and report["evidence"][api] == METAL_EVIDENCE else report["evidence"][api]
        lines += _item(f"  {_MARK[state[api]]} {api:<9}", escape(text), columns, style, *_STATE_STYLE[state[api]])
    lines.append("")
    lines += render_devices(report["devices"], columns=columns, style=style)
    lines += render_problems(report["problems"], columns=columns, style=style)
    return "\n".join(lines)


def _item(head: str, text: str, columns: int, style: Style, *styles: str) -> list[str]:
    """`head` then `text`, wrapped under the text's start; `head` coloured after wrapping."""
    lines = wrap(text, columns, first=head)
    lines[0] = style(head, *styles) + lines[0][len(head) :]
    return lines


# --- devices -------------------------------------------------------------------------------------


def device_status(device: dict[str, Any]) -> str:
    """The device's status as a person reads it: `no APIs` where it starts but gives nothing."""
    status = str(device.get("status") or "")
    if status in ("ok", "") and not device["apis"]:
        return "no APIs"
    return status or "-"


def group_aliases(devices: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Names a container gets exactly the same from (a GPU's index and UUID: the backend marks
    the later ones `alias_of` the first) share one group, in the report's order."""
    names = {d["name"] for d in devices}
    groups: dict[str, list[dict[str, Any]]] = {}
    for device in devices:
        alias_of = device.get("alias_of")
        name = alias_of if isinstance(alias_of, str) and alias_of in names else device["name"]
        live = (device.get("live_status"), device.get("live_apis"))  # --verify ran each name on its own
        groups.setdefault(repr((name, live)), []).append(device)
    return list(groups.values())


def _short(name: str, first: str) -> str:
    """An alias without the `vendor/class=` it shares with the row's name."""
    kind, sep, _ = first.partition("=")
    return name[len(kind) + 1 :] if sep and name.startswith(kind + "=") else name


def render_devices(devices: list[dict[str, Any]], *, columns: int = 80, style: Style = PLAIN) -> list[str]:
    if not devices:
        return ["no devices found"]
    groups = [sorted(g, key=lambda d: (len(d["name"]), d["name"])) for g in group_aliases(devices)]
    verified = any("live_status" in d for d in devices)  # --verify ran: live answer beside the static one
    rows = []
    for group in groups:
        first = group[0]
        row = [escape(first["name"]), device_status(first), ", ".join(first["apis"]) or "-"]
        if verified:
            live = ", ".join(first.get("live_apis", [])) or "-"
            state = first.get("live_status", "")
            row.append("" if not state else state if state == "failed" else f"{live} ({state})")
        aliases = [escape(_short(d["name"], first["name"])) for d in group[1:]]
        rows.append((row, aliases, first))
    header = ["DEVICE", "STATUS", "APIS"] + (["LIVE (--verify)"] if verified else [])
    widths = [max(len(header[i]), *(len(r[0][i]) for r in rows)) for i in range(len(header))]
    rest = sum(widths[1:]) + 2 * (len(widths) - 1)
    # A name too long for the column goes on a line of its own, its row below it.
    widths[0] = max([len(r[0][0]) for r in rows if len(r[0][0]) + 2 + rest <= columns], default=len(header[0]))
    title = f"devices: {len(groups)}"
    if len(groups) != len(devices):
        title += f" ({len(devices)} names: a device's other names are its aliases, shown as `also`)"
    lines = wrap(title, columns)
    lines.append(style(_cells(header, widths), "bold"))
    for row, aliases, device in rows:
        if len(row[0]) > widths[0]:
            lines += wrap(row[0], columns, indent=4)
            row = ["", *row[1:]]
        text = _cells(row, widths)
        also = f"  (also {', '.join(aliases)})" if aliases else ""
        if len(text + also) <= columns:
            lines.append(text + also)
        else:
            lines += wrap(text, columns, indent=widths[0] + 2)
            if also:
                lines += wrap(f"also {', '.join(aliases)}", columns, first="    ")
        if device.get("reason") and device_status(device) != "ok":
            lines += wrap(escape(device["reason"]), columns, first="    ")
    return lines


def _cells(cells: list[str], widths: list[int]) -> str:
    return "  ".join(f"{cell:<{width}}" for cell, width in zip(cells, widths, strict=True)).rstrip()


# --- problems ------------------------------------------------------------------------------------


def merge_problems(problems: list[dict[str, str]]) -> list[dict[str, str]]:
    """Most severe first; one entry per message, naming every source that reported it."""
    merged: dict[tuple[str, str], list[str]] = {}
    for problem in problems:
        sources = merged.setdefault((problem["severity"], problem["message"]), [])
        if problem["source"] not in sources:
            sources.append(problem["source"])
    rank = {severity: i for i, severity in enumerate(SEVERITY_ORDER)}
    ordered = sorted(merged.items(), key=lambda item: rank.get(item[0][0], len(rank)))
    return [
        {"severity": severity, "source": _join(sources), "message": message} for (severity, message), sources in ordered
    ]


def _join(sources: list[str], limit: int = 3) -> str:
    if len(sources) <= limit:
        return ", ".join(sources)
    return f"{', '.join(sources[:limit])} and {len(sources) - limit} more"


def render_problems(problems: list[dict[str, str]], *, columns: int = 80, style: Style = PLAIN) -> list[str]:
    """The problems block shared by every human output: empty when there are none."""
    if not problems:
        return []
    lines = ["", style("problems:", "bold")]
    for problem in merge_problems(problems):
        severity = problem["severity"]
        head = f"  {severity:<8}"
        text = f"{escape(problem['source'])}: {escape(problem['message'])}"
        lines += _item(head, text, columns, style, *_SEVERITY_STYLE.get(severity, ()))
    return lines


# --- other views of the same report --------------------------------------------------------------


def render_device_list(report: dict[str, Any], *, columns: int = 80, style: Style = PLAIN, wide: bool = False) -> str:
    """Every device name, one per line, with its status and APIs, under the spec file that
    defines it (as `nvidia-ctk cdi list` lists names, with cgpu's answer beside each), under a
    header row. A name never wraps: one too wide for the column is cut in the middle (`…`; its
    end tells UUIDs apart), whole in `--json` and `-o wide`. The report's errors and warnings go
    to stderr (the CLI), one line each, so the list stays a list."""
    devices = report["devices"]
    lines: list[str] = [] if devices else ["no devices found"]
    by_spec: dict[str, list[dict[str, Any]]] = {}
    for device in devices:
        by_spec.setdefault(str(device.get("spec", "")), []).append(device)
    status_width = max([len("STATUS"), *(len(device_status(d)) for d in devices)])
    apis_width = max([len("APIS"), *(len(", ".join(d["apis"]) or "-") for d in devices)])
    names = [escape(d["name"]) for d in devices]
    name_width = max([len("DEVICE"), *map(len, names)])
    if not wide:  # the name column gives way, never the status or the APIs
        name_width = max(min(name_width, columns - 2 - status_width - apis_width - 4), len("DEVICE"))
    header = f"  {'DEVICE':<{name_width}}  {'STATUS':<{status_width}}  APIS"
    for spec, group in by_spec.items():
        if lines:
            lines.append("")
        lines += [style(line, "bold") for line in wrap(f"spec {escape(spec)}" if spec else "devices", columns)]
        lines.append(style(header, "bold"))
        for device in group:
            name = _fit(escape(device["name"]), name_width)
            apis = ", ".join(device["apis"]) or "-"
            lines.append(f"  {name:<{name_width}}  {device_status(device):<{status_width}}  {apis}".rstrip())
    return "\n".join(lines)


def _fit(name: str, width: int) -> str:
    """`name` in `width` characters: cut in the middle with `…` when longer (a UUID's end stays)."""
    if len(name) <= width:
        return name
    tail = (width - 1) // 2
    return name[: width - 1 - tail] + "…" + name[len(name) - tail :]


_CHECK = {"provided": "✓", "partial": "~", "absent": "✗", "unknown": "?"}


def render_explain(
    report: dict[str, Any],
    api: str,
    *,
    devices: list[str] | None = None,
    root: str = DEFAULT_ROOT,
    columns: int = 80,
    style: Style = PLAIN,
) -> str:
    """The checklist behind one API's answer: per device, whether a container can start with it
    (every host path it needs, looked for under `root`) and what it gives for `api`."""
    state = states(report)[api]
    lines = _item(f"{api} ({state}): ", escape(report["evidence"][api]), columns, style, "bold")
    if api == "metal":  # no device is checked for it: the evidence is the whole answer
        return "\n".join(lines)
    # a device the probe saw for one API only (local, krunkit: PoCL's CPU device) is not `api`'s
    chosen = [d for d in report["devices"] if (not devices or d["name"] in devices) and d.get("api") in (None, api)]
    if not chosen:
        lines.append("")
        lines.append("no device to explain" + (f" (asked for {', '.join(map(escape, devices))})" if devices else ""))
    where = "the host" if root in ("", "/") else f"--root {escape(root)}"
    for group in group_aliases(chosen):
        device = group[0]
        names = ", ".join(escape(d["name"]) for d in group)
        lines.append("")
        lines += wrap(names + (f"  (spec {escape(device['spec'])})" if device.get("spec") else ""), columns)
        missing = device.get("missing") or []
        if "checks" in device:
            if missing:
                lines += _check(
                    "absent",
                    f"a container starts: these host paths it needs are missing under {where}:",
                    columns,
                    style,
                )
                for path in missing:
                    lines += _item("      ✗ ", escape(path), columns, style, "red")
            elif device.get("status") == "blocked":
                lines += _check("absent", f"a container starts: {escape(device.get('reason', 'no'))}", columns, style)
            else:
                lines += _check(
                    "provided",
                    f"a container starts: every device node, mount source and hook binary exists under {where}",
                    columns,
                    style,
                )
            found, _, text = str(device["checks"].get(api, "unknown: not checked")).partition(": ")
            lines += _check(found, f"{api}: {escape(text)}", columns, style)
        else:  # a backend that judged the device as a whole
            found = "provided" if api in device["apis"] else "absent"
            lines += _check(found, f"{api}: status {escape(device_status(device))}", columns, style)
    return "\n".join(lines)


def _check(state: str, text: str, columns: int, style: Style) -> list[str]:
    mark = _CHECK.get(state, "?")
    colour = {"✓": ("green",), "✗": ("red",), "~": ("yellow",), "?": ("yellow",)}[mark]
    return _item(f"  {mark} ", text, columns, style, *colour)
