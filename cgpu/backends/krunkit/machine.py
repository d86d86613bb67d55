"""The krunkit probe in the agent's podman machine (libkrun provider): which machine, its API
socket, the probe image's ID there, and cgpu's probe run in it through podman (`cgpu.engines.client`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final, TypeVar

from cgpu.backends.krunkit.cached import answer, host
from cgpu.backends.krunkit.judging import GPU_DEVICE, ProbeFailed, judge
from cgpu.backends.krunkit.vm import BREW_INSTALL, LIBKRUN_MACHINE_INIT, VMError
from cgpu.engines.client import EngineError, EngineUnreachable, ImageNotFound, Machine, PodmanEngine
from cgpu.gpu_probe import PROBE_SCRIPT, RUN_FROM_STDIN
from cgpu.gpu_probe.answer import ProbeAnswer
from cgpu.report import ReportBuilder
from cgpu.version import __version__

DEFAULT_PROBE_IMAGE: Final = "localhost/cgpu-venus-probe:latest"
BUILD_PROBE_IMAGE: Final = (
    "cgpu krunkit write-assets cgpu-venus-probe && podman build -t localhost/cgpu-venus-probe:latest cgpu-venus-probe"
)
RUN_TIMEOUT_S: Final = 180.0  # the probe container

T = TypeVar("T")


def probe_machine(
    report: ReportBuilder,
    exe: str | None,
    version: str | None,
    name: str | None,
    probe_image: str | None,
    *,
    refresh: bool,
    timeout: float | None,
    quick: float,
) -> None:
    host_podman = PodmanEngine()
    if host_podman.executable() is None and exe is None:
        krunkit_missing(report)
        return
    if host_podman.executable() is None:
        report.failed(
            "podman",
            "podman not found on PATH: install it (brew install podman) and create a "
            f"libkrun machine ({LIBKRUN_MACHINE_INIT}), or pass --vm-image to boot a VM with krunkit",
        )
        report.unknown("vulkan", "unknown: no podman machine and no --vm-image to run the Venus probe in")
        return
    report.progress("looking for the podman machine")
    machines = _asked(lambda: host_podman.machines(timeout=quick))
    if exe is None and not any(m.vm_type == "libkrun" for m in machines):
        krunkit_missing(report)
        return
    chosen = _choose_machine(machines, name)
    if chosen.vm_type != "libkrun":
        report.problem(
            "error",
            f"podman machine {chosen.name}",
            f"the machine runs on the {chosen.vm_type or 'unknown'} provider, which gives containers no GPU; "
            f"only libkrun does: recreate it with {LIBKRUN_MACHINE_INIT}",
            "probe",
        )
        report.absent(
            "vulkan",
            f"not provided: podman machine {chosen.name} uses the {chosen.vm_type or 'unknown'} "
            "provider, which has no virtio-gpu; recreate it on the libkrun provider",
        )
        return
    if exe is None:
        report.problem(
            "warning",
            "krunkit",
            "krunkit not found on PATH or in podman's helper directories, "
            f"though machine {chosen.name} uses libkrun; if it does not start: {BREW_INSTALL}",
            "probe",
        )
    if not chosen.running:
        raise ProbeFailed(
            f"podman machine {chosen.name}",
            f"the machine is stopped; start it (podman machine start {chosen.name}) and ask again",
        )
    api = _asked(lambda: host_podman.machine_socket(chosen.name, timeout=quick))
    in_machine = PodmanEngine(url=f"unix://{api}")
    ref = probe_image or DEFAULT_PROBE_IMAGE
    image_id = _image_id(in_machine, ref, chosen.name, timeout=quick)
    key = {
        "backend": "krunkit",
        "cgpu": __version__,  # its probe is what runs in the image
        "host": host(),
        "krunkit": version,
        "vm": {"podman_machine": chosen.name, "provider": chosen.vm_type, "api": api},
        "probe_image": {"ref": ref, "id": image_id},
    }

    def compute() -> ProbeAnswer:
        report.progress(f"running the Venus probe (cgpu's probe in {ref}) in podman machine {chosen.name}")
        try:
            probe_source = PROBE_SCRIPT.read_bytes()
        except OSError as exc:
            raise ProbeFailed(str(PROBE_SCRIPT), f"cannot read cgpu's probe: {exc.strerror or exc}") from None
        try:
            # cgpu's own probe, whatever the image's entry point: python3 from the image runs it from stdin.
            done = in_machine.run_attached(
                ref,
                ["python3", "-c", RUN_FROM_STDIN],
                devices=[GPU_DEVICE],
                input=probe_source,
                timeout=timeout or RUN_TIMEOUT_S,
                cleanup_timeout=quick,
                name_prefix="cgpu-venus-probe",
            )
        except EngineError as exc:
            raise ProbeFailed("podman run", str(exc)) from None
        return judge(done, where=f"podman machine {chosen.name}", image=ref)

    answer(report, key, compute, refresh=refresh, lock_timeout=(timeout or RUN_TIMEOUT_S) + 30)


def _asked(ask: Callable[[], T]) -> T:
    """An answer from the host's podman about its machines; VMError naming what failed."""
    try:
        return ask()
    except EngineError as exc:
        raise VMError(exc.source or "podman machine", exc.message) from None


def _choose_machine(machines: list[Machine], name: str | None) -> Machine:
    if name is not None:
        for entry in machines:
            if entry.name == name:
                return entry
        known = ", ".join(f"{m.name} ({m.vm_type})" for m in machines) or "none"
        raise ProbeFailed("podman machine list", f"no podman machine named {name!r} (machines: {known})")
    if not machines:
        raise ProbeFailed(
            "podman machine list",
            "no podman machine: create one on the libkrun provider "
            f"({LIBKRUN_MACHINE_INIT}) or pass --vm-image to boot a VM with krunkit",
        )
    # The machine the agent's containers run on: the running one, libkrun first, then the default.
    return sorted(machines, key=lambda m: (not m.running, m.vm_type != "libkrun", not m.default))[0]


def _image_id(engine: PodmanEngine, ref: str, machine: str, *, timeout: float) -> str:
    try:
        return engine.image_id(ref, timeout=timeout)
    except EngineUnreachable as exc:
        raise ProbeFailed(str(engine.url), f"the API of podman machine {machine} does not answer: {exc.said}") from None
    except ImageNotFound as exc:
        hint = (
            f"build it in the machine: {BUILD_PROBE_IMAGE.replace('podman ', f'podman --connection {machine} ', 1)}"
            if ref == DEFAULT_PROBE_IMAGE
            else f"pull or build {ref} in the machine"
        )
        raise ProbeFailed(
            f"podman image inspect {ref}",
            f"the probe image is not in podman machine {machine}: {exc.said}; {hint}",
        ) from None
    except EngineError as exc:
        raise ProbeFailed("podman image inspect", exc.message) from None


def krunkit_missing(report: ReportBuilder) -> None:
    where = "" if sys.platform == "darwin" else " (it exists only for macOS on Apple silicon)"
    report.failed(
        "krunkit",
        f"krunkit not found on PATH, in $CGPU_KRUNKIT_EXE or in podman's helper directories"
        f"{where}; install it: {BREW_INSTALL}",
    )
    report.absent(
        "vulkan",
        f"not provided: krunkit is not installed, so no VM can carry Vulkan to the GPU; install it: {BREW_INSTALL}",
    )
