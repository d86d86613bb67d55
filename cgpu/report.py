"""Building a report: the one place backends put their findings.

The CLI path stays free of pydantic (its import alone costs more than the whole CDI
answer); `cgpu.model` holds the pydantic models that describe this same JSON, and the
tests validate every report a backend builds against them.
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Callable
from typing import Any, Literal

from cgpu import __version__
from cgpu.apis import API_ORDER, METAL_EVIDENCE

Severity = Literal["error", "warning", "info"]


class ReportBuilder:
    """Collects what one backend found; `build()` turns it into the report dict.

    A backend calls `provide`/`withhold` for each API (metal has a default), `device`
    per device it saw, `problem` for every bad input or failed command, and `failed`
    when it could not run at all (the CLI then exits non-zero).
    """

    def __init__(self, backend: str, *, progress: Callable[[str], None] | None = None) -> None:
        self.backend = backend
        self._progress = progress
        self._evidence: dict[str, str] = {"metal": METAL_EVIDENCE}
        self._provided: set[str] = set()
        self.devices: list[dict[str, Any]] = []
        self.problems: list[dict[str, str]] = []
        self.could_not_run = False
        self.bad_usage = False

    def provide(self, api: str, evidence: str) -> None:
        self._check(api)
        self._provided.add(api)
        self._evidence[api] = evidence

    def withhold(self, api: str, evidence: str) -> None:
        self._check(api)
        self._provided.discard(api)
        self._evidence[api] = evidence

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
        evidence = {}
        for api in API_ORDER:
            evidence[api] = self._evidence.get(
                api, f"not provided: the {self.backend} backend found nothing that gives {api}"
            )
        return {
            "containers": [api for api in API_ORDER if api in self._provided],
            "evidence": evidence,
            "backend": self.backend,
            "platform": current_platform(),
            "devices": self.devices,
            "problems": self.problems,
            "cgpu_version": __version__,
            "checked_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }

    @staticmethod
    def _check(api: str) -> None:
        if api not in API_ORDER:
            raise ValueError(f"unknown GPU API name {api!r}")


def current_platform() -> str:
    """`linux-x86_64`, `darwin-arm64`, `windows-amd64`: OS and machine as the agent names them."""
    if sys.platform == "win32":
        machine = os.environ.get("PROCESSOR_ARCHITECTURE", "unknown")
        return f"windows-{machine.lower()}"
    system = "darwin" if sys.platform == "darwin" else sys.platform.rstrip("0123456789")
    return f"{system}-{os.uname().machine.lower()}"
