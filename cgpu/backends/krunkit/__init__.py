"""The krunkit backend (macOS on Apple silicon): Vulkan through Venus.

Containers on a Mac get a GPU only in a libkrun VM (krunkit), whose virtio-gpu carries Vulkan
(Mesa Venus -> virglrenderer -> MoltenVK -> Metal) to the host. Whether it works depends on the
image (Mesa's libkrun build; stock Mesa fails `vkCreateInstance`) and on the VM, so the answer
comes from running the Venus probe image with `/dev/dri` in that VM: the agent's podman machine
on the libkrun provider, or a VM booted from `--vm-image`. The answer is cached (booting a VM
for every doctor run is too slow).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from cgpu.backends.krunkit.answer_cache import AnswerCache
from cgpu.backends.krunkit.vm import (
    BREW_INSTALL,
    LIBKRUN_MACHINE_INIT,
    Machine,
    VMError,
    boot_and_probe,
    find_krunkit,
    krunkit_version,
    list_machines,
    machine_socket,
)
from cgpu.cache import default_cache_dir, is_private, key_digest, open_private, private_directory
from cgpu.errors import CgpuError
from cgpu.gpu_probe import PROBE_SCRIPT, RUN_FROM_STDIN
from cgpu.gpu_probe.answer import (
    NOT_JSON,
    ApiAnswer,
    Device,
    ProbeAnswer,
    apply_answer,
    read_answer,
)
from cgpu.problem import Problem
from cgpu.report import ReportBuilder, current_platform
from cgpu.run import CommandError, Completed, decode, run
from cgpu.version import __version__

DEFAULT_PROBE_IMAGE: Final = "localhost/cgpu-venus-probe:latest"
BUILD_PROBE_IMAGE: Final = (
    "cgpu krunkit write-assets cgpu-venus-probe && podman build -t localhost/cgpu-venus-probe:latest cgpu-venus-probe"
)
GPU_DEVICE: Final = "/dev/dri"  # what ramalama and Podman Desktop pass for the VM's virtio-gpu
LIBKRUN_MESA_FIX: Final = (
    "build the image with Mesa's libkrun build (dnf copr enable slp/mesa-libkrun-vulkan, then "
    "mesa-vulkan-drivers pinned to that build and version-locked, as the Containerfile that "
    "`cgpu krunkit write-assets` writes does)"
)
CACHE_TTL_S: Final = 24 * 3600
VM_FOLDER_DAYS: Final = 7  # the probe VM's logs, kept for the report that names them
QUICK_TIMEOUT_S: Final = 30.0  # podman machine list/inspect, krunkit --version, image inspect
RUN_TIMEOUT_S: Final = 180.0  # the probe container
BOOT_TIMEOUT_S: Final = 300.0  # boot + probe in a krunkit VM
VK_DRIVER_ID_MESA_VENUS: Final = 22
VK_PHYSICAL_DEVICE_TYPE_CPU: Final = 4
INSTANCE_FAILURES: Final = frozenset({"VK_ERROR_OUT_OF_HOST_MEMORY", "VK_ERROR_INITIALIZATION_FAILED"})


class ProbeFailed(CgpuError):
    """The probe could not give an answer (not cached: the next run tries again)."""

    def __init__(self, source: str, message: str) -> None:
        super().__init__(message)
        self.source = source
        self.message = message


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
            report.problem("error", exc.source, exc.message)
    elif vm_image:  # a podman machine finds krunkit itself; booting needs it here
        _krunkit_missing(report)
        return
    try:
        if vm_image:
            if exe is None or version is None:
                report.failed(exe or "krunkit", f"krunkit does not work here; reinstall it: {BREW_INSTALL}")
                report.absent("vulkan", "not provided: krunkit does not work on this host, so no VM can carry Vulkan")
                return
            _probe_booted_vm(report, exe, version, vm_image, probe_image, refresh=refresh, timeout=timeout)
        else:
            _probe_machine(report, exe, version, machine, probe_image, refresh=refresh, timeout=timeout, quick=quick)
    except (VMError, ProbeFailed) as exc:
        message = exc.message
        if isinstance(exc, VMError) and exc.log_tail:
            message += f"; VM log tail: {exc.log_tail}"
        report.failed(exc.source, message)
        report.unknown("vulkan", f"unknown: cgpu could not get the Venus probe's answer ({exc.message})")


# --- where the probe runs ---------------------------------------------------------------


def _probe_machine(
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
    podman = shutil.which("podman")
    if podman is None and exe is None:
        _krunkit_missing(report)
        return
    if podman is None:
        report.failed(
            "podman",
            "podman not found on PATH: install it (brew install podman) and create a "
            f"libkrun machine ({LIBKRUN_MACHINE_INIT}), or pass --vm-image to boot a VM with krunkit",
        )
        report.unknown("vulkan", "unknown: no podman machine and no --vm-image to run the Venus probe in")
        return
    report.progress("looking for the podman machine")
    machines = list_machines(podman, timeout=quick)
    if exe is None and not any(m.vm_type == "libkrun" for m in machines):
        _krunkit_missing(report)
        return
    chosen = _choose_machine(machines, name)
    if chosen.vm_type != "libkrun":
        report.problem(
            "error",
            f"podman machine {chosen.name}",
            f"the machine runs on the {chosen.vm_type or 'unknown'} provider, which gives containers no GPU; "
            f"only libkrun does: recreate it with {LIBKRUN_MACHINE_INIT}",
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
        )
    if not chosen.running:
        raise ProbeFailed(
            f"podman machine {chosen.name}",
            f"the machine is stopped; start it (podman machine start {chosen.name}) and ask again",
        )
    api = machine_socket(podman, chosen.name, timeout=quick)
    connection = [podman, "--url", f"unix://{api}"]
    ref = probe_image or DEFAULT_PROBE_IMAGE
    image_id = _image_id(connection, ref, chosen.name, timeout=quick)
    key = {
        "backend": "krunkit",
        "cgpu": __version__,  # its probe is what runs in the image
        "host": _host(),
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
        # Killing the podman client does not stop the container in the VM: name it to remove it.
        container = f"cgpu-venus-probe-{uuid.uuid4().hex[:12]}"
        # cgpu's own probe, whatever the image's entry point: python3 from the image runs it from stdin.
        argv = [
            *connection,
            "run",
            "--rm",
            "--interactive",
            "--name",
            container,
            "--pull=never",
            "--network=none",
            "--device",
            GPU_DEVICE,
            "--entrypoint",
            "python3",
            ref,
            "-c",
            RUN_FROM_STDIN,
        ]
        try:
            done = run(argv, timeout=timeout or RUN_TIMEOUT_S, input=probe_source)
        except CommandError as exc:
            _remove_container(connection, container, timeout=quick)
            raise ProbeFailed("podman run", str(exc)) from None
        except BaseException:  # Ctrl-C
            _remove_container(connection, container, timeout=quick)
            raise
        return judge(done, where=f"podman machine {chosen.name}", image=ref)

    _answer(report, key, compute, refresh=refresh, lock_timeout=(timeout or RUN_TIMEOUT_S) + 30)


def _probe_booted_vm(
    report: ReportBuilder,
    exe: str,
    version: str,
    disk: str,
    probe_image: str | None,
    *,
    refresh: bool,
    timeout: float | None,
) -> None:
    try:
        stat = os.stat(disk)
    except OSError as exc:
        raise ProbeFailed(disk, f"--vm-image cannot be read: {exc.strerror or exc}") from None
    key = {
        "backend": "krunkit",
        "cgpu": __version__,  # its probe is what runs in the image
        "host": _host(),
        "krunkit": version,
        "vm": {"image": os.path.abspath(disk), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns},
        "probe_image": {"ref": probe_image},
    }
    run_dir = _vm_run_dir(report, key)

    def compute() -> ProbeAnswer:
        report.progress(f"booting {disk} with krunkit {version}")
        result = boot_and_probe(
            exe,
            disk,
            run_dir=run_dir,
            probe_image=probe_image,
            timeout=timeout or BOOT_TIMEOUT_S,
            progress=report.progress,
        )
        answer = judge(result, where=f"the krunkit VM booted from {disk}", image=probe_image or DEFAULT_PROBE_IMAGE)
        logs = Problem("info", str(run_dir), "the probe VM's logs (krunkit.log, console.log) are kept here")
        return replace(answer, problems=(*answer.problems, logs))

    _answer(report, key, compute, refresh=refresh, lock_timeout=(timeout or BOOT_TIMEOUT_S) + 30)


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


def _remove_container(connection: list[str], name: str, *, timeout: float) -> None:
    """Best effort: a probe container left running in the VM after a timeout or Ctrl-C."""
    try:
        run([*connection, "rm", "--force", "--time", "0", "--ignore", name], timeout=timeout)
    except CommandError:
        pass


def _image_id(connection: list[str], ref: str, machine: str, *, timeout: float) -> str:
    argv = [*connection, "image", "inspect", "--format", "{{.Id}}", ref]
    try:
        done = run(argv, timeout=timeout)
    except CommandError as exc:
        raise ProbeFailed("podman image inspect", str(exc)) from None
    stderr = decode(done.stderr).strip()
    if done.returncode != 0 and ("connect" in stderr.lower() or "socket" in stderr.lower()):
        raise ProbeFailed(connection[-1], f"the API of podman machine {machine} does not answer: {stderr[-300:]}")
    if done.returncode != 0:
        hint = (
            f"build it in the machine: {BUILD_PROBE_IMAGE.replace('podman ', f'podman --connection {machine} ', 1)}"
            if ref == DEFAULT_PROBE_IMAGE
            else f"pull or build {ref} in the machine"
        )
        raise ProbeFailed(
            f"podman image inspect {ref}",
            f"the probe image is not in podman machine {machine}: {stderr[-200:]}; {hint}",
        )
    return decode(done.stdout).strip()


def _note_platform(report: ReportBuilder) -> None:
    here = current_platform()
    if sys.platform != "darwin":
        report.problem(
            "info",
            "cgpu",
            f"krunkit exists only for macOS 14+ on Apple silicon and this is {here}: "
            "checking anyway because --backend krunkit was asked for",
        )
    elif platform.machine().lower() not in ("arm64", "aarch64"):
        report.problem(
            "warning",
            "cgpu",
            f"this Mac is {here}: libkrun (krunkit) needs Apple silicon, so containers here get no GPU",
        )


def _krunkit_missing(report: ReportBuilder) -> None:
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


def _host() -> dict[str, str]:
    return {"name": socket.gethostname(), "platform": current_platform()}


def _vm_run_dir(report: ReportBuilder, key: dict[str, Any]) -> Path:
    """Where the probe VM's logs and shared folder live (the latest run per VM image): in the
    cache, or a temp folder when the cache cannot take them (read-only, full disk: a folder can
    still be made on a full disk, so a block is written to know; not private: another user
    could swap a folder for a link to one cgpu then empties). Folders unused for a week go."""
    root = default_cache_dir()
    folders = root / "krunkit-vm"
    preferred = folders / key_digest(key)[:16]
    check = preferred / ".write-check"
    try:
        for folder in (root, folders, preferred):
            private_directory(folder, create=True)
        with contextlib.suppress(FileNotFoundError):
            check.unlink()  # a link is removed, never followed
        fd = open_private(check, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
        check.unlink()
        os.utime(preferred)  # in use: kept by the pruning below
    except OSError as exc:
        import tempfile

        with contextlib.suppress(OSError):
            check.unlink()
        fallback = Path(tempfile.mkdtemp(prefix="cgpu-krunkit-vm-"))
        report.problem(
            "warning",
            str(preferred),
            f"cannot write the VM's folder in the cache ({exc.strerror or exc}); using {fallback} instead",
        )
        return fallback
    _prune_vm_folders(folders)
    return preferred


def _prune_vm_folders(folders: Path) -> None:
    """Remove this user's VM folders unused for VM_FOLDER_DAYS (never through a link)."""
    import stat as stat_module

    cutoff = time.time() - VM_FOLDER_DAYS * 86400
    with contextlib.suppress(OSError):
        for entry in os.scandir(folders):
            info = entry.stat(follow_symlinks=False)
            if stat_module.S_ISDIR(info.st_mode) and is_private(info) and info.st_mtime < cutoff:
                shutil.rmtree(entry.path, ignore_errors=True)  # does not follow links inside


# --- the answer, cached -----------------------------------------------------------------


def _answer(
    report: ReportBuilder,
    key: dict[str, Any],
    compute: Callable[[], ProbeAnswer],
    *,
    refresh: bool,
    lock_timeout: float,
) -> None:
    cache = AnswerCache(
        "krunkit", ttl=CACHE_TTL_S, warn=lambda source, message: report.problem("warning", source, message)
    )
    with cache.locked(key, timeout=lock_timeout):
        cached = None if refresh else cache.get(key)
        answer = None
        if cached is not None:
            answer = _from_cache(cached[0])
            if answer is None:
                report.problem(
                    "warning", str(cache.path(key)), "the cached answer has an unexpected shape; checking afresh"
                )
            else:
                when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(cached[1]))
                report.problem(
                    "info",
                    str(cache.path(key)),
                    f"answer cached at {when} (kept {CACHE_TTL_S // 3600} h); --refresh checks again",
                )
        if answer is None:
            answer = compute()
            cache.put(key, answer.to_json())
    apply_answer(report, answer)


def _from_cache(value: Any) -> ProbeAnswer | None:
    """A cached krunkit answer (`ProbeAnswer.to_json`, Vulkan only), or None for any other shape:
    the cache file can hold anything."""
    try:
        answer = ProbeAnswer.from_json(value)
    except ValueError:
        return None
    return answer if set(answer.apis) == {"vulkan"} and answer.unusable is None else None


# --- judging the probe's output ---------------------------------------------------------


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
    return Problem("error", source, message)


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
