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
# The per-device details the probe reports (standalone.py), and the JSON types each may take;
# anything else a probe sends is dropped, so every field of a device is in the report's schema
# (cgpu.model.ProbeDetails describes each). `reason` is always kept ("" when missing).
PROBE_DETAILS: dict[str, tuple[type, ...]] = {
    "reason": (str,),
    "index": (int,),
    "compute_capability": (str,),
    "integrated": (bool,),
    "total_memory": (int,),
    "gfx_target": (str,),
    "type": (int,),
    "type_name": (str,),
    "vendor": (str,),
    "vendor_id": (str,),
    "device_id": (str,),
    "api_version": (str,),
    "driver_id": (int, type(None)),
    "driver_id_name": (str, type(None)),
    "driver_name": (str,),
    "driver_info": (str,),
    "driver_version": (str,),
    "platform": (str,),
    "allocated": (bool,),
    "allocation_error": (str,),
    "hardware": (bool,),
}
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
    for key, types in PROBE_DETAILS.items():
        value = device.get(key)
        if key not in device or type(value) not in types or (type(value) is int and not 0 <= value < 2**64):
            continue
        details[key] = _clean(value, 200) if isinstance(value, str) else value
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
