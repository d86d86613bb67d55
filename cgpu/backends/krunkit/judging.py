"""Judging the Venus probe's output: one probe run (exit status, stdout, stderr) becomes the
krunkit answer, Vulkan provided or absent with its evidence, or ProbeFailed."""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from cgpu.backends.krunkit.vm import BREW_INSTALL, LIBKRUN_MACHINE_INIT
from cgpu.errors import CgpuError
from cgpu.gpu_probe.answer import NOT_JSON, ApiAnswer, Device, ProbeAnswer, read_answer
from cgpu.problem import Problem
from cgpu.run import Completed, decode

GPU_DEVICE: Final = "/dev/dri"  # what ramalama and Podman Desktop pass for the VM's virtio-gpu
LIBKRUN_MESA_FIX: Final = (
    "build the image with Mesa's libkrun build (dnf copr enable slp/mesa-libkrun-vulkan, then "
    "mesa-vulkan-drivers pinned to that build and version-locked, as the Containerfile that "
    "`cgpu krunkit write-assets` writes does)"
)
VK_DRIVER_ID_MESA_VENUS: Final = 22
VK_PHYSICAL_DEVICE_TYPE_CPU: Final = 4
INSTANCE_FAILURES: Final = frozenset({"VK_ERROR_OUT_OF_HOST_MEMORY", "VK_ERROR_INITIALIZATION_FAILED"})


class ProbeFailed(CgpuError):
    """The probe could not give an answer (not cached: the next run tries again)."""

    def __init__(self, source: str, message: str) -> None:
        super().__init__(message)
        self.source = source
        self.message = message


def judge(result: Completed, *, where: str, image: str) -> ProbeAnswer:
    """Turn one probe run (exit status, stdout, stderr) into the krunkit answer: Vulkan provided
    or absent with its evidence, the devices, and every failure named with its fix.

    The probe's JSON is read by `read_answer` (the one reader of the probe's output), which
    checks it and keeps only clean device entries; the krunkit rule on top is: a Venus device
    that is not a CPU and allocated memory. Raises ProbeFailed when the run said nothing
    usable about Vulkan."""
    stderr = decode(result.stderr).strip()
    source = f"probe image {image}"
    probe = read_answer(result.stdout, source=source)
    if probe.unusable == NOT_JSON:
        if "/dev/dri" in stderr and ("no such file" in stderr.lower() or "not found" in stderr.lower()):
            message = (
                f"{where} has no /dev/dri: its virtio-gpu is missing, so it is not a libkrun VM with a GPU "
                f"or its kernel lacks virtio-gpu; use a podman machine on the libkrun provider ({LIBKRUN_MACHINE_INIT})"
            )
            return _out(
                source,
                f"not provided: {where} has no /dev/dri to give containers",
                [_problem(f"podman run --device {GPU_DEVICE}", message)],
            )
        raise ProbeFailed(
            source,
            f"the probe gave no JSON (exit {result.returncode}): "
            f"{stderr[-400:] or decode(result.stdout)[:200] or 'no output'}",
        )
    if probe.unusable:
        raise ProbeFailed(source, probe.unusable)
    vulkan = probe.apis["vulkan"]
    devices = vulkan.devices
    if vulkan.state == "unknown" and not devices:
        raise ProbeFailed(
            source, f"the probe got no Vulkan answer ({vulkan.error or 'no readable entry'}): {vulkan.summary[:300]}"
        )
    error = vulkan.error if vulkan.error in INSTANCE_FAILURES else None
    venus = [d for d in devices if _is_venus(d)]
    working = [d for d in venus if _works(d)]
    seen = tuple(replace(d, counted=any(d is w for w in working)) for d in devices)
    if working:
        evidence = (
            f"provided: {working[0].name} (Mesa Venus over virtio-gpu, to the Mac's GPU through "
            f"virglrenderer, MoltenVK and Metal) created a Vulkan instance and allocated memory in {where} "
            f"with {GPU_DEVICE}; images need Mesa's libkrun build, as {image} has"
        )
        return ProbeAnswer(source, {"vulkan": ApiAnswer("provided", evidence, vulkan.summary, vulkan.error, seen)})

    if not devices and error:
        return _out(
            source,
            f"not provided: stock Mesa fails vkCreateInstance ({error}) under krunkit; {LIBKRUN_MESA_FIX}",
            [
                _problem(
                    source,
                    f"vkCreateInstance failed with {error} in {where}: the image's Mesa is the stock "
                    "build, whose Venus driver cannot map krunkit's memory (16 KiB alignment on Apple "
                    f"silicon) and makes the Vulkan loader give up; {LIBKRUN_MESA_FIX}",
                )
            ],
            seen,
        )
    on_cpu = [d for d in venus if _is_cpu(d)]
    if on_cpu:
        name = on_cpu[0].name
        return _out(
            source,
            f"not provided: {name} runs on a software device of the host, not the GPU",
            [
                _problem(
                    source,
                    f"{name} is Venus on a CPU (software) Vulkan device of the host, not the Mac's "
                    "GPU: the host's virglrenderer does not reach MoltenVK; reinstall krunkit and its "
                    f"libraries ({BREW_INSTALL}), which bring virglrenderer built for MoltenVK",
                )
            ],
            seen,
        )
    unallocated = [d for d in venus if d.details.get("allocated") is not True]
    if unallocated:
        name = unallocated[0].name
        failure = unallocated[0].details.get("allocation_error") or "no allocation reported"
        return _out(
            source,
            f"not provided: {name} enumerates but cannot allocate memory; {LIBKRUN_MESA_FIX}",
            [
                _problem(
                    source,
                    f"{name} enumerates but allocating or mapping memory fails in {where} "
                    f"({failure}; the Venus 16 KiB alignment bug): Mesa without the libkrun "
                    f"patches; {LIBKRUN_MESA_FIX}",
                )
            ],
            seen,
        )
    if vulkan.error == "library_not_found" and not devices:
        return _out(
            source,
            f"not provided: {image} has no Vulkan loader",
            [
                _problem(
                    source,
                    f"the image has no Vulkan loader (libvulkan.so.1); install vulkan-loader and {LIBKRUN_MESA_FIX}",
                )
            ],
            seen,
        )
    what = ", ".join(d.name for d in devices) or "no device"
    return _out(
        source,
        f"not provided: no Venus device in {where}, only {what}",
        [
            _problem(
                source,
                f"no Venus device in {where} (saw: {what}): the image lacks Mesa's Venus driver "
                "(virtio_icd) or it was skipped; software devices such as llvmpipe never count; "
                f"{LIBKRUN_MESA_FIX}",
            )
        ],
        seen,
    )


def _problem(source: str, message: str) -> Problem:
    return Problem("error", source, message, "probe")


def _out(source: str, evidence: str, problems: list[Problem], devices: tuple[Device, ...] = ()) -> ProbeAnswer:
    return ProbeAnswer(source, {"vulkan": ApiAnswer("absent", evidence, devices=devices)}, tuple(problems))


def _is_venus(device: Device) -> bool:
    return (
        device.details.get("driver_id") == VK_DRIVER_ID_MESA_VENUS
        or str(device.details.get("driver_name") or "").lower() == "venus"
        or "venus" in device.name.lower()
    )


def _is_cpu(device: Device) -> bool:
    name = device.name.lower()
    return device.details.get("type") == VK_PHYSICAL_DEVICE_TYPE_CPU or "llvmpipe" in name or "swiftshader" in name


def _works(device: Device) -> bool:
    return device.counted and device.details.get("allocated") is True and not _is_cpu(device)
