"""One CDI spec per cdiVersion, each with a device whose edits need that version (docs/cdi-reading.md, the CDI
library's specs-go/version.go `requiresVxxx`), and what an engine did with each.

Every device sets an env marker, so a container that got the device's edits says so (`env` in Docker, the OCI
spec's process.env on the CRI path). 0.8.0 and 1.0.0 add no field (nothing requires them: the declared version
is what an older library refuses); 1.1.0's new fields (netDevices, intelRdt schemata) would move host
resources into the container, so its spec declares 1.1.0 with plain edits: every engine here refuses the
version before it reads any field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
VENDOR = "cgpu-real.example"
UNKNOWN_DEVICE = f"{VENDOR}/v030=absent"  # a name no spec defines: unresolvable on every engine


def tag(version: str) -> str:
    return "v" + version.replace(".", "")


def marker(version: str) -> str:
    return f"CGPU_REAL_{tag(version).upper()}=1"


def device_name(version: str) -> str:
    # 0.5.0 allows a device name that starts with a digit; its spec uses one (on top of a deviceNode hostPath
    # rule there would be a real device node to make).
    return f"{VENDOR}/{tag(version)}=" + ("0" if version == "0.5.0" else "dev")


def write_specs(spec_dir: Path, payload: Path) -> None:
    """The specs, one file per version; `payload` is the host file the 0.4.0 spec mounts."""
    spec_dir.mkdir(parents=True, exist_ok=True)
    for version in VERSIONS:
        edits: dict[str, Any] = {"env": [marker(version)]}
        device: dict[str, Any] = {"name": device_name(version).split("=", 1)[1], "containerEdits": edits}
        if version == "0.4.0":  # a mount with a type
            edits["mounts"] = [
                {"hostPath": str(payload), "containerPath": "/cgpu-payload", "type": "bind", "options": ["ro", "bind"]}
            ]
        elif version == "0.6.0":  # device annotations
            device["annotations"] = {f"{VENDOR}/note": "annotations need 0.6.0"}
        elif version == "0.7.0":  # additionalGids, as nvidia-ctk >= 1.19 writes
            edits["additionalGids"] = [4242]
        spec = {"cdiVersion": version, "kind": f"{VENDOR}/{tag(version)}", "devices": [device]}
        (spec_dir / f"{tag(version)}.json").write_text(json.dumps(spec, indent=2) + "\n")


@dataclass(frozen=True)
class Outcome:
    """What an engine did with a request for one device: injected its edits, or not and why."""

    injected: bool
    detail: str


def ceiling(outcomes: dict[str, Outcome]) -> str | None:
    """The highest version whose device the engine injected; None when it injected none."""
    accepted = [v for v in VERSIONS if outcomes[v].injected]
    return accepted[-1] if accepted else None


def major_minor(version: str) -> tuple[int, int]:
    parts = version.lstrip("v").split(".")
    return int(parts[0]), int(parts[1])


def library_ceiling(library_version: str) -> str:
    """The highest cdiVersion a CDI library release accepts: its major.minor.0 (specs-go/version.go)."""
    major, minor = major_minor(library_version)
    return f"{major}.{minor}.0"
