"""The krunkit backend's entry: `probe()` notes the platform, says which APIs a Mac's containers
never get, finds krunkit and runs the Venus probe in the podman machine or a booted VM."""

from __future__ import annotations

import platform
import sys
from typing import Final

from cgpu.backends.krunkit.booted import probe_booted_vm
from cgpu.backends.krunkit.judging import ProbeFailed
from cgpu.backends.krunkit.machine import krunkit_missing, probe_machine
from cgpu.backends.krunkit.vm import BREW_INSTALL, VMError, find_krunkit, krunkit_version
from cgpu.report import ReportBuilder, current_platform

QUICK_TIMEOUT_S: Final = 30.0  # podman machine list/inspect, krunkit --version, image inspect


def probe(
    report: ReportBuilder,
    *,
    machine: str | None = None,
    vm_image: str | None = None,
    probe_image: str | None = None,
    refresh: bool = False,
    timeout: float | None = None,
) -> None:
    if machine and vm_image:
        report.usage_error(("machine", "vm_image"), "they exclude each other: use the podman machine or boot a VM")
        return
    _note_platform(report)
    for api in ("cuda", "rocm", "opencl", "directml"):
        report.absent(
            api,
            f"not provided: a krunkit VM's virtio-gpu carries only Vulkan (Venus) to the Mac's GPU; "
            f"{api} does not reach containers on a Mac",
        )
    quick = min(timeout, QUICK_TIMEOUT_S) if timeout else QUICK_TIMEOUT_S
    exe = find_krunkit()
    version: str | None = None
    if exe is not None:
        try:
            version = krunkit_version(exe, timeout=quick)
        except VMError as exc:
            report.problem("error", exc.source, exc.message, "probe")
    elif vm_image:  # a podman machine finds krunkit itself; booting needs it here
        krunkit_missing(report)
        return
    try:
        if vm_image:
            if exe is None or version is None:
                report.failed(exe or "krunkit", f"krunkit does not work here; reinstall it: {BREW_INSTALL}")
                report.absent("vulkan", "not provided: krunkit does not work on this host, so no VM can carry Vulkan")
                return
            probe_booted_vm(report, exe, version, vm_image, probe_image, refresh=refresh, timeout=timeout)
        else:
            probe_machine(report, exe, version, machine, probe_image, refresh=refresh, timeout=timeout, quick=quick)
    except (VMError, ProbeFailed) as exc:
        message = exc.message
        if isinstance(exc, VMError) and exc.log_tail:
            message += f"; VM log tail: {exc.log_tail}"
        report.failed(exc.source, message)
        report.unknown("vulkan", f"unknown: cgpu could not get the Venus probe's answer ({exc.message})")


def _note_platform(report: ReportBuilder) -> None:
    here = current_platform()
    if sys.platform != "darwin":
        report.problem(
            "info",
            "cgpu",
            f"krunkit exists only for macOS 14+ on Apple silicon and this is {here}: "
            "checking anyway because --backend krunkit was asked for",
            "probe",
        )
    elif platform.machine().lower() not in ("arm64", "aarch64"):
        report.problem(
            "warning",
            "cgpu",
            f"this Mac is {here}: libkrun (krunkit) needs Apple silicon, so containers here get no GPU",
            "probe",
        )
