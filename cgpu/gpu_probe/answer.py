"""Reading the probe's answer: JSON from this process's children, a container, a VM or a WSL
session. That output is untrusted (any image can print anything), so it is checked field by
field and only what passes becomes a state per API, devices and problems.
"""

from __future__ import annotations

import re
from typing import Any

from cgpu.apis import API_ORDER
from cgpu.report import ReportBuilder

MAX_TEXT = 500
MAX_DEVICES = 64
MAX_DETAILS = 24
_DETAIL_KEY = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_OWN_KEYS = frozenset({"name", "apis", "api", "counted", "source", "status"})  # set by cgpu, not the probe
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")
# Errors that only say "nothing of this API here": the summary says it, no problem needed.
_QUIET_ERRORS = frozenset({None, "library_not_found", "no_device_node", "not_probed"})
# Errors that mean the probe itself did not get an answer for that API.
PROBE_FAILURES = frozenset({"timeout", "crashed", "probe_failed", "probe_error", "no_ctypes"})


def read_probe_output(stdout: bytes) -> dict[str, Any] | None:
    """The probe's one JSON object from a container or VM; anything else (nothing, an engine's
    error, garbage nested deeper than json can walk) is None."""
    import json

    text = stdout.decode("utf-8", errors="replace").strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def apply_probe_output(report: ReportBuilder, data: object, *, source: str) -> None:
    """Turn one probe answer (parsed JSON, untrusted) into a state per API, devices and problems.

    An API is provided only when the probe says `available` AND lists a device it counted;
    inconsistent answers are absent with a problem naming `source`. An API the probe got no
    answer for (timeout, crash, missing or malformed entry) is unknown. Metal is never provided.
    Unusable output (not an object, unknown `probe_version`) makes every API unknown and adds
    one error problem; it does not mark the backend failed (the caller decides).
    """
    unusable = _unusable(data)
    if unusable:
        report.problem("error", source, unusable)
        for api in API_ORDER[:-1]:
            report.unknown(api, f"unknown: {unusable}")
        return
    assert isinstance(data, dict)
    apis = data["apis"]
    steering = _steering_env(data.get("env"))
    if steering:
        report.problem("info", source, f"discovery is steered by {steering}")
    for api in API_ORDER:
        entry = apis.get(api)
        if api == "metal":
            if isinstance(entry, dict) and entry.get("available") is True:
                report.problem("warning", source, "the probe claims Metal, which no Linux guest can have; ignored")
            continue
        _apply_api(report, api, entry, source)


def _unusable(data: object) -> str | None:
    """Why a probe answer cannot be read at all, or None."""
    if not isinstance(data, dict):
        return f"the probe output is a JSON {type(data).__name__}, not an object"
    version = data.get("probe_version")
    if type(version) is not int:
        return "the probe output has no probe_version: not output of cgpu's probe"
    from cgpu.gpu_probe.standalone import PROBE_VERSION as known

    if version != known:
        return f"the probe output is version {version}; this cgpu reads version {known} (update cgpu or the probe)"
    if not isinstance(data.get("apis"), dict):
        return "the probe output has no 'apis' object"
    return None


def _apply_api(report: ReportBuilder, api: str, entry: object, source: str) -> None:
    if not isinstance(entry, dict):
        report.unknown(api, f"unknown: {source}: the probe gave no readable answer for {api}")
        report.problem("warning", source, f"the probe's answer for {api} is missing or not an object")
        return
    summary = _clean(entry.get("summary")) or f"no summary for {api}"
    error = _clean(entry.get("error"), 80) or None
    available = entry.get("available") is True
    devices = entry.get("devices")
    counted = 0
    if isinstance(devices, list):
        for device in devices[:MAX_DEVICES]:
            if _add_device(report, api, device, source):
                counted += 1
        if len(devices) > MAX_DEVICES:
            report.problem(
                "warning", source, f"the probe listed {len(devices)} {api} devices; kept the first {MAX_DEVICES}"
            )
    elif devices is not None:
        report.problem("warning", source, f"the probe's {api} devices are not a list; ignored")
    if available and counted:
        report.provide(api, f"{source}: {summary}")
        return
    if error in PROBE_FAILURES and not counted:
        report.unknown(api, f"unknown: {source}: {summary}")
    else:
        report.absent(api, f"{source}: {summary}")
    if available:
        report.problem("warning", source, f"the probe says {api} is available but lists no device it counted; withheld")
    elif counted:
        report.problem("warning", source, f"the probe counted a {api} device but says {api} is not available; withheld")
    if error in PROBE_FAILURES:
        report.problem("warning", source, f"{api}: {summary}")
    elif error not in _QUIET_ERRORS:
        report.problem("warning", source, f"{api} driver error {error}: {summary}")


def _add_device(report: ReportBuilder, api: str, device: object, source: str) -> bool:
    """Record one probed device; returns whether the probe counted it (a real GPU)."""
    if not isinstance(device, dict):
        report.problem("warning", source, f"a {api} device entry is not an object; ignored")
        return False
    name = _clean(device.get("name"), 200) or f"unnamed {api} device"
    counted = device.get("counted") is True
    details: dict[str, Any] = {}
    for key, value in device.items():
        if len(details) >= MAX_DETAILS:
            break
        if key in _OWN_KEYS or not isinstance(key, str) or not _DETAIL_KEY.match(key):
            continue
        if isinstance(value, str):
            details[key] = _clean(value, 200)
        elif (
            isinstance(value, bool)
            or value is None
            or (isinstance(value, int) and -(2**63) <= value < 2**64)
            or (isinstance(value, float) and value == value and abs(value) != float("inf"))
        ):
            details[key] = value
    details.setdefault("reason", "")
    report.device(
        name,
        [api] if counted else [],
        status="counted" if counted else "ignored",
        api=api,
        counted=counted,
        source=source,
        **details,
    )
    return counted


def _steering_env(env: object) -> str:
    if not isinstance(env, dict):
        return ""
    pairs = [
        f"{_clean(k, 60)}={_clean(v, 120)}"
        for k, v in list(env.items())[:32]
        if isinstance(k, str) and isinstance(v, str) and k != "LD_LIBRARY_PATH"
    ]
    return ", ".join(pairs)


def _clean(value: object, limit: int = MAX_TEXT) -> str:
    """A string from untrusted output, one line, capped; anything else gives ''."""
    if not isinstance(value, str):
        return ""
    text = _CONTROL.sub(" ", value).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
