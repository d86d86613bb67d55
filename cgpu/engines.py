"""Container engines on this host: which one, which version.

Only `detect_engines` lives here so far; the engine clients (podman-py, docker-py) are
imported lazily by the code that talks to an engine.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass

from cgpu.run import CommandError, decode, run


@dataclass(frozen=True)
class EngineVersion:
    name: str  # "podman" or "docker"
    version: str  # "4.3.1"


def detect_engines(*, timeout: float = 10) -> tuple[list[EngineVersion], list[str]]:
    """The engines installed here with their versions, podman first; and why any failed."""
    found: list[EngineVersion] = []
    failures: list[str] = []
    for name, argv in (
        ("podman", ["podman", "version", "--format", "{{.Client.Version}}"]),
        ("docker", ["docker", "version", "--format", "{{.Server.Version}}"]),
    ):
        exe = shutil.which(name)
        if exe is None:
            continue
        try:
            done = run([exe, *argv[1:]], timeout=timeout)
        except CommandError as exc:
            failures.append(str(exc))
            continue
        match = re.search(r"\d+\.\d+(\.\d+)?", decode(done.stdout))
        if done.returncode != 0 or match is None:
            failures.append(f"{name} version: exit {done.returncode}: {decode(done.stderr).strip()[:300]}")
            continue
        found.append(EngineVersion(name, match.group(0)))
    return found, failures
