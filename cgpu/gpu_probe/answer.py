"""Reading the probe's answer: JSON from this process's children, a container, a VM or a WSL
session. That output is untrusted (any image can print anything), so it is checked field by
field, and only what passes becomes one typed `ProbeAnswer`: a state per API, its evidence,
the devices the probe listed, problems and the discovery env that steered it.

This is the one reader of the probe's output: the local backend, `--verify`, krunkit and wsl
all take a `ProbeAnswer` (or, for one `--child API` run, an `ApiAnswer`) from here; a change to
the probe's output format touches this file only. Standard library only (the CLI path).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cgpu.apis import API_ORDER, CONTAINER_APIS, METAL_EVIDENCE, STATES, State
from cgpu.errors import CgpuValueError
from cgpu.problem import Problem

if TYPE_CHECKING:
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
    "work": (str,),
    "work_step": (str,),
    "work_error": (str,),
    "work_detail": (str,),
    "work_seconds": (float, int),
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")
# Errors that only say "nothing of this API here": the summary says it, no problem needed.
_QUIET_ERRORS = frozenset({None, "library_not_found", "no_device_node", "not_probed"})
# Errors that mean the probe itself did not get an answer for that API.
PROBE_FAILURES = frozenset({"timeout", "crashed", "probe_failed", "probe_error", "no_ctypes"})
# The shape `ProbeAnswer.to_json` writes (krunkit's answer cache); raise it when that shape changes.
ANSWER_FORMAT = 1
NOT_JSON = "its output is not a JSON object"
Detail = str | bool | int | float | None


@dataclass(frozen=True)
class Device:
    """One device the probe listed for one API; `counted`: a real GPU by the probe's rules (or
    the backend's, krunkit). `details`: the probe's other scalar fields, cleaned and capped."""

    name: str
    api: str
    counted: bool
    details: Mapping[str, Detail] = field(default_factory=dict)


@dataclass(frozen=True)
class ApiAnswer:
    """One API: its state, the sentence the report gives as evidence, the probe's own summary
    (cleaned, no source), its error code (None when it gave none) and the devices it listed."""

    state: State
    evidence: str
    summary: str = ""
    error: str | None = None
    devices: tuple[Device, ...] = ()


@dataclass(frozen=True)
class ProbeAnswer:
    """The probe's whole answer, checked. `unusable` says why the output could not be read at all
    (then every API but metal is unknown); `apis` holds all six, metal always absent."""

    source: str
    apis: Mapping[str, ApiAnswer]
    problems: tuple[Problem, ...] = ()
    steering_env: str = ""  # "NAME=value, ..." of discovery variables set where the probe ran
    unusable: str | None = None

    @property
    def provided(self) -> list[str]:
        return [api for api in API_ORDER if api in self.apis and self.apis[api].state == "provided"]

    @property
    def devices(self) -> list[Device]:
        return [device for api in API_ORDER if api in self.apis for device in self.apis[api].devices]

    def to_json(self) -> dict[str, Any]:
        """The documented cache shape (docs/krunkit.md), read back by `from_json`."""
        return {
            "answer_format": ANSWER_FORMAT,
            "source": self.source,
            "unusable": self.unusable,
            "steering_env": self.steering_env,
            "apis": {
                api: {
                    "state": entry.state,
                    "evidence": entry.evidence,
                    "summary": entry.summary,
                    "error": entry.error,
                    "devices": [
                        {"name": d.name, "api": d.api, "counted": d.counted, "details": dict(d.details)}
                        for d in entry.devices
                    ],
                }
                for api, entry in self.apis.items()
            },
            "problems": [problem.as_dict() for problem in self.problems],
        }

    @classmethod
    def from_json(cls, data: object) -> ProbeAnswer:
        """Read back what `to_json` wrote; ValueError for anything of another shape (a cache
        file can hold anything)."""
        try:
            if not isinstance(data, dict) or data["answer_format"] != ANSWER_FORMAT:
                raise CgpuValueError(f"not an answer of format {ANSWER_FORMAT}")
            apis = {api: _api_from_json(api, entry) for api, entry in _dict(data["apis"]).items()}
            problems = tuple(Problem.from_json(_dict(p)) for p in _list(data["problems"]))
            unusable = data["unusable"]
            if unusable is not None:
                unusable = _str(unusable)
            return cls(_str(data["source"]), apis, problems, _str(data["steering_env"]), unusable)
        except (KeyError, TypeError) as exc:
            raise CgpuValueError(f"{type(exc).__name__}: {exc}") from None


def _api_from_json(api: object, entry: object) -> ApiAnswer:
    if api not in API_ORDER:
        raise CgpuValueError(f"unknown API {api!r}")
    entry = _dict(entry)
    error = entry["error"]
    devices = []
    for device in _list(entry["devices"]):
        device = _dict(device)
        details = _dict(device["details"])
        if not all(k in PROBE_DETAILS and type(v) in PROBE_DETAILS[k] for k, v in details.items()):
            raise CgpuValueError("a device detail is not one the probe reports")
        counted = device["counted"]
        if type(counted) is not bool or device["api"] != api:
            raise CgpuValueError("a device entry is malformed")
        devices.append(Device(_str(device["name"]), api, counted, details))
    return ApiAnswer(
        _one_of(entry["state"], STATES),  # type: ignore[arg-type]
        _str(entry["evidence"]),
        _str(entry["summary"]),
        None if error is None else _str(error),
        tuple(devices),
    )


def _dict(value: object) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise CgpuValueError(f"expected an object, got {type(value).__name__}")
    return value


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise CgpuValueError(f"expected a list, got {type(value).__name__}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise CgpuValueError(f"expected a string, got {type(value).__name__}")
    return value


def _one_of(value: object, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise CgpuValueError(f"{value!r} is not one of {', '.join(allowed)}")
    return str(value)


# --- reading the probe's output ----------------------------------------------------------


def read_answer(stdout: bytes, *, source: str) -> ProbeAnswer:
    """The probe's one JSON object from a container or VM, checked; anything else (nothing, an
    engine's error, garbage nested deeper than json can walk) is an unusable answer."""
    text = stdout.decode("utf-8", errors="replace").strip()
    data: object = None
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
    if not isinstance(data, dict):
        return _unusable_answer(source, NOT_JSON)
    return check_answer(data, source=source)


def check_answer(data: object, *, source: str) -> ProbeAnswer:
    """Turn one probe answer (parsed JSON, untrusted) into a `ProbeAnswer`.

    An API is provided only when the probe says `available` AND lists a device it counted;
    inconsistent answers are absent with a problem naming `source`. An API the probe got no
    answer for (timeout, crash, missing or malformed entry) is unknown. Metal is never provided.
    Unusable output (not an object, unknown `probe_version`) makes every API unknown.
    """
    unusable = _unusable(data)
    if unusable:
        return _unusable_answer(source, unusable)
    assert isinstance(data, dict)
    problems: list[Problem] = []
    steering = _steering_env(data.get("env"))
    if steering:
        problems.append(Problem("info", source, f"discovery is steered by {steering}"))
    apis: dict[str, ApiAnswer] = {}
    for api in API_ORDER:
        entry = data["apis"].get(api)
        if api == "metal":
            if isinstance(entry, dict) and entry.get("available") is True:
                claim = "the probe claims Metal, which no Linux guest can have; ignored"
                problems.append(Problem("warning", source, claim))
            apis[api] = ApiAnswer("absent", METAL_EVIDENCE)
            continue
        apis[api] = _check_api(api, entry, source, problems)
    return ProbeAnswer(source, apis, tuple(problems), steering)


def read_child_answer(raw: bytes, api: str, *, source: str) -> tuple[ApiAnswer, list[Problem]] | None:
    """One `standalone.py --child API` answer ({available, summary, devices, ...}) checked as
    `check_answer` checks one API's entry, with its problems; None when it is not such an answer."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("available"), bool):
        return None
    problems: list[Problem] = []
    return _check_api(api, data, source, problems), problems


def _unusable_answer(source: str, why: str) -> ProbeAnswer:
    apis = {api: ApiAnswer("unknown", f"unknown: {why}") for api in CONTAINER_APIS}
    apis["metal"] = ApiAnswer("absent", METAL_EVIDENCE)
    return ProbeAnswer(source, apis, (Problem("error", source, why),), unusable=why)


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


def _check_api(api: str, entry: object, source: str, problems: list[Problem]) -> ApiAnswer:
    if not isinstance(entry, dict):
        problems.append(Problem("warning", source, f"the probe's answer for {api} is missing or not an object"))
        return ApiAnswer("unknown", f"unknown: {source}: the probe gave no readable answer for {api}")
    summary = _clean(entry.get("summary")) or f"no summary for {api}"
    error = _clean(entry.get("error"), 80) or None
    available = entry.get("available") is True
    listed = entry.get("devices")
    devices: list[Device] = []
    if isinstance(listed, list):
        for item in listed[:MAX_DEVICES]:
            device = _check_device(api, item)
            if device is None:
                problems.append(Problem("warning", source, f"a {api} device entry is not an object; ignored"))
            else:
                devices.append(device)
        if len(listed) > MAX_DEVICES:
            kept = f"the probe listed {len(listed)} {api} devices; kept the first {MAX_DEVICES}"
            problems.append(Problem("warning", source, kept))
    elif listed is not None:
        problems.append(Problem("warning", source, f"the probe's {api} devices are not a list; ignored"))
    counted = any(device.counted for device in devices)
    found = tuple(devices)
    if available and counted:
        return ApiAnswer("provided", f"{source}: {summary}", summary, error, found)
    if error in PROBE_FAILURES and not counted:
        answer = ApiAnswer("unknown", f"unknown: {source}: {summary}", summary, error, found)
    else:
        answer = ApiAnswer("absent", f"{source}: {summary}", summary, error, found)
    if available:
        problems.append(
            Problem("warning", source, f"the probe says {api} is available but lists no device it counted; withheld")
        )
    elif counted:
        problems.append(
            Problem("warning", source, f"the probe counted a {api} device but says {api} is not available; withheld")
        )
    if error in PROBE_FAILURES:
        problems.append(Problem("warning", source, f"{api}: {summary}"))
    elif error not in _QUIET_ERRORS:
        problems.append(Problem("warning", source, f"{api} driver error {error}: {summary}"))
    return answer


def _check_device(api: str, device: object) -> Device | None:
    """One listed device, its scalar details cleaned; None when it is not an object."""
    if not isinstance(device, dict):
        return None
    name = _clean(device.get("name"), 200) or f"unnamed {api} device"
    details: dict[str, Detail] = {}
    for key, types in PROBE_DETAILS.items():
        value = device.get(key)
        if key not in device or type(value) not in types or (type(value) is int and not 0 <= value < 2**64):
            continue
        details[key] = _clean(value, 200) if isinstance(value, str) else value
    details.setdefault("reason", "")
    return Device(name, api, device.get("counted") is True, details)


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


# --- into a report -----------------------------------------------------------------------


def apply_answer(report: ReportBuilder, answer: ProbeAnswer) -> None:
    """Put an answer into a report: each API's state and evidence (metal is the report's own),
    each device under the API it was listed for, every problem. An unusable answer does not
    mark the backend failed (the caller decides)."""
    for api, entry in answer.apis.items():
        if api == "metal":
            continue
        if entry.state == "provided":
            report.provide(api, entry.evidence)
        elif entry.state == "absent":
            report.absent(api, entry.evidence)
        else:
            report.unknown(api, entry.evidence)
    report.add(*answer.problems)
    for device in answer.devices:
        report.device(
            device.name,
            [device.api] if device.counted else [],
            status="counted" if device.counted else "ignored",
            api=device.api,
            counted=device.counted,
            source=answer.source,
            **device.details,
        )
