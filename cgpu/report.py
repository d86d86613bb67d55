"""Building a report: the one place backends put their findings.

The CLI path stays free of pydantic (its import alone costs more than the whole CDI
answer); `cgpu.model` holds the pydantic models that describe this same JSON, and the
tests validate every report a backend builds against them.
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, Literal

from cgpu import __version__
from cgpu.apis import API_ORDER, IMAGE_NEEDS, METAL_EVIDENCE, State

FORMAT_VERSION = 2  # additive changes keep it; a removed or re-typed field raises it
Severity = Literal["error", "warning", "info"]


class ReportBuilder:
    """Collects what one backend found; `build()` turns it into the report dict.

    A backend calls `provide`, `absent` or `unknown` for each API it answers for, `device`
    per device it saw, `problem` for every bad input or failed command, and `failed` when it
    could not run at all (the CLI then exits non-zero). An API it says nothing of is absent
    (the backend looked and found nothing), or unknown when the backend could not run; metal
    is always absent.
    """

    def __init__(self, backend: str, *, progress: Callable[[str], None] | None = None) -> None:
        self.backend = backend
        self._progress = progress
        self._evidence: dict[str, str] = {"metal": METAL_EVIDENCE}
        self._states: dict[str, State] = {"metal": "absent"}
        self._image_needs: dict[str, list[str]] = {}
        self.devices: list[dict[str, Any]] = []
        self.engines: list[dict[str, Any]] = []  # cdi: the container engines found, the judging one marked
        self.problems: list[dict[str, str]] = []
        self.could_not_run = False
        self.bad_usage = False

    def provide(self, api: str, evidence: str, *, image_needs: Iterable[str] = ()) -> None:
        """Containers get `api`; `image_needs`: what the image must bring (`IMAGE_NEEDS` tokens)."""
        needs = list(dict.fromkeys(image_needs))
        unknown = [need for need in needs if need not in IMAGE_NEEDS]
        if unknown:
            raise ValueError(f"unknown image need {unknown[0]!r}")
        self._set(api, "provided", evidence)
        self._image_needs[api] = needs

    def absent(self, api: str, evidence: str) -> None:
        """The backend looked, and containers do not get `api`."""
        self._set(api, "absent", evidence)

    def unknown(self, api: str, evidence: str) -> None:
        """The backend could not tell whether containers get `api` (timeout, crash, unreadable input)."""
        self._set(api, "unknown", evidence)

    def state(self, api: str) -> State | None:
        """What the backend said of `api` so far (None: nothing yet)."""
        return self._states.get(api)

    def _set(self, api: str, state: State, evidence: str) -> None:
        if api not in API_ORDER or api == "metal":
            raise ValueError(f"unknown GPU API name {api!r}" if api not in API_ORDER else "metal is always absent")
        self._states[api] = state
        self._evidence[api] = evidence
        self._image_needs.pop(api, None)

    def device(self, name: str, apis: list[str] | set[str], /, **details: Any) -> dict[str, Any]:
        entry = {"name": name, "apis": [a for a in API_ORDER if a in set(apis)], **details}
        self.devices.append(entry)
        return entry

    def problem(self, severity: Severity, source: str, message: str) -> None:
        self.problems.append({"severity": severity, "source": source, "message": message})

    def failed(self, source: str, message: str) -> None:
        """The backend could not answer: an error problem, and the CLI exits non-zero."""
        self.could_not_run = True
        self.problem("error", source, message)

    def usage_error(self, source: str, message: str) -> None:
        """The options given cannot work (a malformed name, conflicting options): exit 2."""
        self.failed(source, message)
        self.bad_usage = True

    def progress(self, message: str) -> None:
        if self._progress is not None:
            self._progress(message)

    def build(self) -> dict[str, Any]:
        evidence: dict[str, str] = {}
        apis: dict[str, dict[str, Any]] = {}
        for api in API_ORDER:
            state = self._states.get(api)
            if state is None and self.could_not_run:
                state, text = "unknown", f"unknown: the {self.backend} backend could not run (see problems)"
            elif state is None:
                state, text = "absent", f"not provided: the {self.backend} backend found nothing that gives {api}"
            else:
                text = self._evidence[api]
            evidence[api] = text
            apis[api] = {"state": state, "image_needs": self._image_needs.get(api, []) if state == "provided" else []}
        return {
            "format_version": FORMAT_VERSION,
            "containers": [api for api in API_ORDER if apis[api]["state"] == "provided"],
            "apis": apis,
            "evidence": evidence,
            "backend": self.backend,
            "platform": current_platform(),
            "devices": self.devices,
            "engines": self.engines,
            "problems": self.problems,
            "cgpu_version": __version__,
            "checked_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }


def current_platform() -> str:
    """`linux-x86_64`, `darwin-arm64`, `windows-amd64`: OS and machine as the agent names them."""
    if sys.platform == "win32":
        machine = os.environ.get("PROCESSOR_ARCHITECTURE", "unknown")
        return f"windows-{machine.lower()}"
    system = "darwin" if sys.platform == "darwin" else sys.platform.rstrip("0123456789")
    return f"{system}-{os.uname().machine.lower()}"
