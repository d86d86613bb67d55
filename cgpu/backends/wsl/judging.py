"""Judging a WSL session's facts: DirectML and CUDA from /dev/dxg, the WSL libraries, the driver
store, the local probe and nvidia-smi; why there is no GPU; the device entries."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cgpu.backends.wsl.output import Session, adapters, host_wslconfig_disables_gpu, ini_value
from cgpu.gpu_probe.answer import ApiAnswer, read_child_answer
from cgpu.problem import Problem
from cgpu.report import ReportBuilder

# Linux user-mode drivers that a GPU vendor's Windows driver package puts in the driver store.
VENDOR_FILES = {
    "libcuda.so.1.1": "NVIDIA",
    "libnvwgf2umx.so": "NVIDIA",
    "libnvidia-ml.so.1": "NVIDIA",
    "libigd12umd64.so": "Intel",
    "libigd12um64xel.so": "Intel",
}
# Driver package folders (INF names) of display drivers, for vendors whose Linux files are not known:
# Intel's iigd_dch (also OEM-prefixed, 6_lenovo_iigd_dch), AMD's u0NNNNNN.
VENDOR_FOLDERS = (
    (re.compile(r"(?:\d+_\w+_)?iigd_dch\.inf_", re.I), "Intel"),
    (re.compile(r"u\d{7}\.inf_", re.I), "AMD"),
)

OTHER_APIS = {
    "rocm": "not provided: WSL exposes no /dev/kfd; HIP on WSL needs ROCm with librocdxg in the image, "
    "which cgpu does not assume",
    "vulkan": "not provided: the Windows drivers project only D3D12 (and CUDA) into WSL; Vulkan there is "
    "Mesa's non-conformant Dozen in the image, not a host capability",
    "opencl": "not provided: the Windows drivers project only D3D12 (and CUDA) into WSL; OpenCL needs a "
    "vendor runtime in the image (Intel compute-runtime), not a host capability",
}
CONTAINER_NOTE = (
    "a container gets it with /dev/dxg and /usr/lib/wsl mounted and a glibc-based image "
    "(musl images such as Alpine cannot load these libraries)"
)


def judge(report: ReportBuilder, session: Session, distro: str, sent_local_probe: bool) -> None:
    source = f"WSL distro {distro}"
    for api, evidence in OTHER_APIS.items():
        report.absent(api, evidence)
    dri = session.names("dri")
    if dri:
        report.problem(
            "info",
            f"{source}: /dev/dri",
            f"/dev/dri ({', '.join(dri)}) is WSL's VGEM device, not the GPU; it counts for nothing",
        )
    libc = _libc(session)
    details = _session_details(session, libc)
    gpu_missing = _gpu_missing(session)
    if gpu_missing:
        why = gpu_missing + "."
        report.absent("directml", f"not provided: {why}")
        report.absent("cuda", f"not provided: {why}")
        report.problem("warning", source, f"no GPU in this WSL session: {why}")
        return

    musl = libc == "musl"
    if musl:
        report.problem(
            "warning",
            source,
            "the session's libc is musl: NVIDIA's and Microsoft's WSL libraries "
            "are glibc binaries, so this session cannot load them itself (its failures to do so are "
            "not counted); containers with glibc images can, musl images cannot",
        )
    libs = set(session.names("wsl_lib") or [])
    stores = _driver_stores(session)
    smi = _nvidia_smi(session)
    # The local probe's answers decide when it ran; in a musl session only its successes count.
    local: dict[str, ApiAnswer] = {}
    for api in ("directml", "cuda"):
        found = _local_result(report, session, api, sent_local_probe, source)
        if found is not None and (found[0].state == "provided" or not musl):
            local[api] = found[0]
            report.add(*found[1])
    directml_ok = _judge_directml(report, source, libs, local.get("directml"), smi, stores)
    cuda_ok = _judge_cuda(report, libs, local.get("cuda"), smi, musl)
    _devices(report, local.get("directml"), directml_ok, cuda_ok, stores, smi, details)


def _judge_directml(
    report: ReportBuilder,
    source: str,
    libs: set[str],
    local: ApiAnswer | None,
    smi: NvidiaSmi,
    stores: dict[str, str],
) -> bool:
    """DirectML: /dev/dxg (checked before), libdxcore.so, libd3d12.so and a hardware adapter."""
    missing = [name for name in ("libdxcore.so", "libd3d12.so") if name not in libs]
    if missing:
        report.absent(
            "directml",
            f"not provided: {' and '.join(missing)} missing from /usr/lib/wsl/lib; "
            "update WSL (`wsl.exe --update`), it ships the D3D12 libraries",
        )
        return False
    if "libd3d12core.so" not in libs:
        report.problem(
            "warning", f"{source}: /usr/lib/wsl/lib", "libd3d12core.so is missing; D3D12 needs it (`wsl.exe --update`)"
        )
    vendors = sorted(set(stores.values()))
    if local is not None:
        hardware = [adapter.name for adapter in adapters(local) if adapter.hardware]
        if local.state == "provided" and hardware:
            report.provide(
                "directml",
                f"/dev/dxg, libdxcore.so and libd3d12.so present, and DXCore in the "
                f"session lists {len(hardware)} hardware adapter(s) ({', '.join(hardware)}); software "
                f"adapters (WARP) are not counted; {CONTAINER_NOTE}",
            )
            return True
        report.absent(
            "directml",
            "not provided: /dev/dxg and the D3D12 libraries are present, but the local "
            f"probe in the session found no hardware adapter ({local.summary or 'no details'}); "
            "Windows needs a GPU with a WDDM 2.9+ driver for WSL",
        )
        return False
    if smi.ok:
        report.provide(
            "directml",
            "/dev/dxg, libdxcore.so and libd3d12.so present; the hardware adapter is "
            f"NVIDIA's GPU, confirmed by nvidia-smi (driver {smi.driver or 'unknown'}); adapters "
            f"were not enumerated through DXCore; {CONTAINER_NOTE}",
        )
        return True
    if vendors:
        report.provide(
            "directml",
            "/dev/dxg, libdxcore.so and libd3d12.so present; a hardware adapter is "
            f"inferred from the {', '.join(vendors)} display driver in the driver store "
            f"({', '.join(sorted(stores))}), not enumerated (no python3 with the local probe in "
            f"the session), so the software adapter (WARP) could not be ruled out; {CONTAINER_NOTE}",
        )
        report.problem(
            "warning",
            source,
            "adapters were not enumerated, so DirectML rests on the vendor driver "
            "files (an old driver package can linger); install python3 in the distro so the local "
            "probe can tell hardware adapters from WARP",
        )
        return True
    report.absent(
        "directml",
        "not provided: /dev/dxg and the D3D12 libraries are present, but no GPU vendor's "
        "driver is in /usr/lib/wsl/drivers and adapters could not be enumerated (install python3 in "
        "the distro to enumerate them)",
    )
    return False


def _judge_cuda(report: ReportBuilder, libs: set[str], local: ApiAnswer | None, smi: NvidiaSmi, musl: bool) -> bool:
    """CUDA: NVIDIA's WSL libcuda.so.1 beside /dev/dxg; cuInit (or nvidia-smi) decides when it can run."""
    blocked = "a GPU in TCC mode or Linux NVIDIA packages installed in the distro cause this"
    if "libcuda.so.1" not in libs:
        report.absent(
            "cuda",
            "not provided: no libcuda.so.1 in /usr/lib/wsl/lib; only NVIDIA's Windows driver (WDDM mode) puts it there",
        )
        return False
    if local is not None and local.state != "provided":
        report.absent(
            "cuda",
            "not provided: libcuda.so.1 is present but the local probe in the session says: "
            f"{local.summary or 'no details'}; {blocked}",
        )
        return False
    if local is None and smi.ran and not smi.ok and not musl:
        report.absent("cuda", f"not provided: libcuda.so.1 is present but nvidia-smi failed ({smi.error}); {blocked}")
        return False
    if local is not None:
        how = f"the local probe in the session says: {local.summary or 'CUDA works'}"
    elif smi.ok:
        how = f"nvidia-smi works (driver {smi.driver or 'unknown'}, CUDA {smi.cuda or 'unknown'})"
    elif musl:
        how = "not initialised (the musl session cannot load it)"
    else:
        how = "not initialised (no python3 with the local probe, no nvidia-smi)"
    report.provide("cuda", f"/dev/dxg and NVIDIA's WSL libcuda.so.1 present; {how}; {CONTAINER_NOTE}")
    return True


@dataclass
class NvidiaSmi:
    ran: bool = False
    ok: bool = False
    driver: str | None = None
    cuda: str | None = None
    error: str = ""


def _nvidia_smi(session: Session) -> NvidiaSmi:
    rc = session.text("nvidia_smi_rc")
    if rc is None or not rc.isdigit():
        return NvidiaSmi()
    out = session.text("nvidia_smi") or ""
    driver = re.search(r"Driver Version:\s*([\w.]+)", out)
    cuda = re.search(r"CUDA Version:\s*([\w.]+)", out)
    error = " ".join(out.split())[:200] or f"exit {rc}"
    if rc == "124":
        error = "it did not answer in time"
    return NvidiaSmi(True, rc == "0" and driver is not None, driver and driver.group(1), cuda and cuda.group(1), error)


def _local_result(
    report: ReportBuilder, session: Session, api: str, sent: bool, source: str
) -> tuple[ApiAnswer, list[Problem]] | None:
    """The local probe's answer for one API and the problems found in it, or None (not run: no
    python3; no answer: unusable output, a timeout or a crash, with a warning)."""
    python = session.text("python3")
    if not sent or python in (None, "missing"):
        return None
    rc = session.text(f"local_{api}_rc")
    read = read_child_answer((session.values.get(f"local_{api}") or [b""])[0], api, source=f"{source}: {python}")
    if read is None or read[0].state == "unknown":  # the probe could not tell: other evidence decides
        why = read[0].summary if read is not None else None
        why = why or {
            "124": "it did not finish in time",
            "no-timeout": "the session has no `timeout` command",
            "0": "its output was not a probe answer",
        }.get(rc or "", f"exit {rc}")
        report.problem("warning", f"{source}: {python}", f"the local probe's {api} check gave no answer ({why})")
        return None
    return read


def _gpu_missing(session: Session) -> str | None:
    """Why the session has no GPU at all, with the fix; None when /dev/dxg and the libraries are there."""
    dxg = session.text("dxg")
    kernel = (session.text("kernel") or "").strip()
    if dxg != "char":
        if re.search(r"-Microsoft$", kernel):
            return (
                f"no /dev/dxg: the distro runs under WSL 1 (kernel {kernel}); GPU paravirtualization needs "
                "WSL 2 (`wsl.exe --set-version DISTRO 2`)"
            )
        disabled_by = host_wslconfig_disables_gpu()
        if disabled_by:
            return f"no /dev/dxg: GPU support is turned off by gpuSupport=false in {disabled_by}"
        what = "no /dev/dxg" if dxg == "missing" else "/dev/dxg is not a character device"
        return (
            f"{what}: the WSL kernel has no dxgkrnl (a custom kernel?), `[wsl2] gpuSupport=false` in "
            ".wslconfig, or Windows has no GPU driver for WSL (WDDM 2.9+)"
        )
    if session.text("dxg_access") != "rw":
        return (
            "/dev/dxg is not readable and writable by the session's user (it is crw-rw-rw- on WSL); fix its permissions"
        )
    if not session.names("wsl_lib"):  # absent, or an empty mount point: WSL unmounts it when the GPU is off
        state = "is missing" if session.text("wsl_lib_missing") else "is empty"
        conf = session.text("wsl_conf") or ""
        if ini_value(conf, "gpu", "enabled") in ("false", "0"):
            return f"/usr/lib/wsl/lib {state}: GPU support is turned off by `[gpu] enabled=false` in /etc/wsl.conf"
        return f"/usr/lib/wsl/lib {state} (GPU turned off in /etc/wsl.conf, or not a WSL 2 distro)"
    return None


def _driver_stores(session: Session) -> dict[str, str]:
    """Driver-store folders of a GPU vendor's display driver: folder -> vendor."""
    stores: dict[str, str] = {}
    for raw in session.values.get("driver_so", []):
        folder, _, file = raw.decode("utf-8", "backslashreplace").partition("/")
        if file in VENDOR_FILES:
            stores[folder] = VENDOR_FILES[file]
    for folder in session.names("drivers") or []:
        vendor = next((name for pattern, name in VENDOR_FOLDERS if pattern.match(folder)), None)
        if vendor and folder not in stores:
            stores[folder] = vendor
    return stores


def _libc(session: Session) -> str:
    loaders = session.names("libc_loaders") or []
    if any("ld-musl-" in path for path in loaders):
        return "musl"  # gcompat's ld-linux shim beside it does not make NVIDIA's libraries load
    if any("ld-linux" in path for path in loaders):
        return "glibc"
    return "unknown"


def _session_details(session: Session, libc: str) -> dict[str, str]:
    os_release = session.text("os_release") or ""
    pretty = re.search(r"^PRETTY_NAME=(.*)$", os_release, re.M)
    kernel = (session.text("kernel") or "").strip()
    details = {"libc": libc, "kernel": kernel}
    if pretty:
        details["os"] = pretty.group(1).strip().strip("\"'")
    if "microsoft-standard" in kernel.lower() or session.text("wsl_interop"):
        details["wsl"] = "2"
    return details


def _devices(
    report: ReportBuilder,
    local: ApiAnswer | None,
    directml: bool,
    cuda: bool,
    stores: dict[str, str],
    smi: NvidiaSmi,
    details: dict[str, str],
) -> None:
    if local is not None and local.devices:
        nvidia_listed = False
        for adapter in adapters(local):
            apis = ["directml"] if adapter.hardware and directml else []
            if adapter.hardware and cuda and adapter.vendor == "NVIDIA":
                apis.append("cuda")
                nvidia_listed = True
            report.device(
                adapter.name,
                apis,
                status="ok" if adapter.hardware else "software",
                vendor=adapter.vendor or "unknown",
                **adapter.ids,
                **details,
            )
        if cuda and not nvidia_listed:
            report.device("NVIDIA GPU (libcuda.so.1)", ["cuda"], status="ok", vendor="NVIDIA", **details)
        return
    apis = [api for api, ok in (("directml", directml), ("cuda", cuda)) if ok]
    vendors = sorted(set(stores.values()) | ({"NVIDIA"} if smi.ok else set()))
    report.device(
        "WSL GPU paravirtualization (/dev/dxg)",
        apis,
        status="ok" if apis else "no-gpu",
        adapters_enumerated=False,
        vendors=vendors,
        **details,
    )
