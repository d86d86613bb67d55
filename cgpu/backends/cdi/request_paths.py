"""The ways a container asks for a GPU and what each gives (docs/cdi.md "Request styles"): CDI names,
`--gpus` and `NVIDIA_VISIBLE_DEVICES`, each resolved as the judging engine resolves it.

Docker's `--gpus` goes to its "nvidia" device driver, which tries NVIDIA's legacy runtime hook first
(`nvidia-container-runtime-hook` on the daemon's PATH: NVIDIA_VISIBLE_DEVICES and the request's driver
capabilities) and, from 29.2, CDI (`nvidia-cdi-hook` on the PATH: `nvidia.com/gpu=<id>`) (moby
`daemon/devices_nvidia_linux.go`, `firstSuccessfulUpdater`); from 29.3 AMD's `--gpus` asks for
`amd.com/gpu=<id>`. Podman 5.0 and later turn `--gpus` into CDI names. The legacy hook injects the
driver's files by NVIDIA_DRIVER_CAPABILITIES, whose default `utility,compute` brings no Vulkan.
"""

from __future__ import annotations

import posixpath

from cgpu.backends.cdi.device import APIS, DeviceAnswer
from cgpu.node.host import HostFS
from cgpu.report import ReportBuilder

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

    from cgpu.engines.installed import InstalledEngine

RUNTIME_HOOK, CDI_HOOK = "nvidia-container-runtime-hook", "nvidia-cdi-hook"
PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
NVIDIA_ALL, AMD_ALL = "nvidia.com/gpu=all", "amd.com/gpu=all"
DOCKER_NVIDIA_CDI, DOCKER_AMD_CDI, PODMAN_GPUS = (29, 2), (29, 3), (5, 0)
# NVIDIA_DRIVER_CAPABILITIES' default (nvidia-container-toolkit cmd/nvidia-container-runtime/README.md):
# compute brings CUDA and OpenCL; Vulkan needs graphics.
DEFAULT_CAPABILITIES = ("cuda", "opencl")
LEGACY_WHY = (
    "the hook mounts the driver's files by NVIDIA_DRIVER_CAPABILITIES, whose default utility,compute (an image "
    "that sets none, or `--gpus all`, which asks for no capability) brings cuda and opencl but no vulkan: add "
    "graphics (`-e NVIDIA_DRIVER_CAPABILITIES=all`, or `--gpus 'all,\"capabilities=compute,utility,graphics\"'`)"
)


def _on_path(host: HostFS, name: str) -> str | None:
    from cgpu.engines.base import BIN_DIRS  # only where an engine judges (its module is 0.65M instructions)

    for folder in dict.fromkeys((*PATH_DIRS, *BIN_DIRS)):
        path = posixpath.join(folder, name)
        if host.exists(path):
            return path
    return None


def _version(entry: InstalledEngine) -> tuple[int, ...] | None:
    from cgpu.engines.base import parse_engine_version

    try:
        return parse_engine_version(entry.version) if entry.version else None
    except ValueError:
        return None


def _path(style: str, request: str, injected_by: str, apis: list[str], why: str) -> dict[str, Any]:
    return {"style": style, "request": request, "injected_by": injected_by, "apis": apis, "why": why}


class _Answers:
    """What the devices of this answer give, looked up by name only where a style asks; NVIDIA's devices'
    APIs as the legacy hook would reach the same driver files."""

    def __init__(self, answers: list[DeviceAnswer]) -> None:
        self._answers = answers

    def given(self, name: str) -> list[str] | None:
        """The APIs of the device `name`, or None where no spec defines it."""
        return next((a.apis for a in self._answers if a.name == name), None)

    @property
    def has_nvidia(self) -> bool:
        return any(a.name.startswith("nvidia.com/") for a in self._answers)

    @property
    def nvidia(self) -> list[str]:
        found = {api for a in self._answers if a.name.startswith("nvidia.com/") for api in a.apis}
        return [api for api in APIS if api in found]

    def cdi(self, style: str, request: str, name: str, how: str) -> dict[str, Any]:
        apis = self.given(name)
        if apis is None:
            return _path(
                style,
                request,
                "cdi",
                [],
                f"{how} asks for {name}, which no spec the engine reads defines, so the container is refused "
                f"(unresolvable CDI devices): generate a spec with an `all` device",
            )
        return _path(style, request, "cdi", apis, f"{how} asks for {name}: what that CDI device gives")

    def legacy(self, style: str, request: str, how: str) -> dict[str, Any]:
        if not self.has_nvidia:
            return _path(
                style,
                request,
                RUNTIME_HOOK,
                [],
                f"{how}; {LEGACY_WHY}. No NVIDIA CDI spec shows what the driver's files give, so cgpu names no API",
            )
        apis = [api for api in self.nvidia if api in DEFAULT_CAPABILITIES]
        return _path(style, request, RUNTIME_HOOK, apis, f"{how}; {LEGACY_WHY}")


def _docker_gpus(entry: InstalledEngine, host: HostFS, answers: _Answers) -> dict[str, Any]:
    request = "docker run --gpus all"
    version = _version(entry)
    runtime_hook, cdi_hook = _on_path(host, RUNTIME_HOOK), _on_path(host, CDI_HOOK)
    if runtime_hook:
        how = f"{entry.label}'s nvidia device driver finds {runtime_hook} and tries it before CDI"
        return answers.legacy("--gpus", request, how)
    if version is None:
        return _path(
            "--gpus", request, "unknown", [], f"{entry.name}'s version is not known, nor so how it resolves --gpus"
        )
    if cdi_hook and version >= DOCKER_NVIDIA_CDI:
        return answers.cdi("--gpus", request, NVIDIA_ALL, f"{entry.label} finds {cdi_hook}, and `--gpus all`")
    if version >= DOCKER_AMD_CDI and not cdi_hook and answers.given(AMD_ALL) is not None:
        return answers.cdi("--gpus", request, AMD_ALL, f"{entry.label} resolves AMD's `--gpus all` through CDI: it")
    need = f"{CDI_HOOK} (Docker 29.2 and later) or {RUNTIME_HOOK}" if version >= DOCKER_NVIDIA_CDI else RUNTIME_HOOK
    return _path(
        "--gpus",
        request,
        "none",
        [],
        f"{entry.label} registers no GPU device driver without {need} on its PATH, so `--gpus` is refused "
        f'(could not select device driver "" with capabilities: [[gpu]]): install nvidia-container-toolkit, or '
        f"ask by CDI name (`--device {NVIDIA_ALL}`)",
    )


def _podman_gpus(entry: InstalledEngine, answers: _Answers) -> dict[str, Any]:
    request = "podman run --gpus all"
    version = _version(entry)
    if version is None:
        return _path("--gpus", request, "unknown", [], "podman's version is not known, nor so what --gpus does")
    if version < PODMAN_GPUS:
        return _path(
            "--gpus",
            request,
            "none",
            [],
            f"{entry.label} accepts --gpus and ignores it (a compatibility no-op before 5.0: podman#19330), so the "
            f"container gets no GPU: ask by CDI name (`--device {NVIDIA_ALL}`)",
        )
    name = NVIDIA_ALL if answers.given(NVIDIA_ALL) is not None or answers.given(AMD_ALL) is None else AMD_ALL
    return answers.cdi("--gpus", request, name, f"{entry.label} turns `--gpus all` into CDI names: it")


def _visible_devices(entry: InstalledEngine, answers: _Answers) -> dict[str, Any] | None:
    facts = entry.nvidia_runtime
    if not facts:
        return None
    request = "-e NVIDIA_VISIBLE_DEVICES=all"
    mode = facts.get("mode")
    runtime = facts.get("runtime")
    if mode == "cdi":
        return answers.cdi(
            "NVIDIA_VISIBLE_DEVICES", request, NVIDIA_ALL, f"NVIDIA's runtime {runtime} in cdi mode turns it into CDI:"
        )
    if mode in ("legacy", "auto", None):
        how = f"NVIDIA's runtime {runtime} ({mode or 'its default mode'}) injects it through {RUNTIME_HOOK}"
        return answers.legacy("NVIDIA_VISIBLE_DEVICES", request, how)
    return _path(
        "NVIDIA_VISIBLE_DEVICES",
        request,
        "unknown",
        [],
        f"NVIDIA's runtime {runtime} in {mode} mode decides what it injects from the driver; cgpu does not judge that",
    )


def request_paths(
    report: ReportBuilder, answers: list[DeviceAnswer], host: HostFS, entry: InstalledEngine | None
) -> list[dict[str, Any]]:
    """Each request style the judging engine knows, with the APIs it gives and why."""
    known = _Answers(answers)
    containers = [api for api in APIS if report.state(api) == "provided"]
    first = next((a.name for a in answers if a.apis), None)
    paths = [
        _path(
            "cdi",
            f"--device {first or 'VENDOR/CLASS=NAME'}",
            "cdi",
            containers,
            "a CDI name the spec dirs define: the report's containers (each device's own APIs in `devices`)",
        )
    ]
    if entry is None:
        return paths
    if entry.name == "docker":
        paths.append(_docker_gpus(entry, host, known))
    elif entry.name == "podman":
        paths.append(_podman_gpus(entry, known))
    visible = _visible_devices(entry, known)
    if visible is not None:
        paths.append(visible)
    return paths
