"""Judging a WSL session's facts: DirectML and CUDA from /dev/dxg, the WSL libraries, the driver
store, the local probe and nvidia-smi; ROCm (AMD's librocdxg) and Vulkan (Mesa's Dozen), whose user
space the image brings; why there is no GPU; the device entries."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cgpu.backends.wsl.output import Adapter, Session, adapters, host_wslconfig_disables_gpu, ini_value
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
    "rocm": "not provided: WSL exposes no /dev/kfd; ROCm reaches WSL only through AMD's librocdxg over /dev/dxg, "
    "which needs an AMD GPU with its Windows driver",
    "vulkan": "not provided: the Windows drivers project only D3D12 (and CUDA) into WSL; Vulkan there is "
    "Mesa's non-conformant Dozen in the image, over a hardware D3D12 adapter",
    "opencl": "not provided: the Windows drivers project only D3D12 (and CUDA) into WSL; OpenCL needs a "
    "vendor runtime in the image (Intel compute-runtime), not a host capability",
}
# The GPUs of librocdxg 1.1.0's compatibility matrix (ROCm 7.2.x; ROCm/librocdxg README.md, "WSL
# Compatiblity Matrix"), as DXCore names the adapters: the Ryzen processors by their integrated GPU.
ROCDXG_GPUS = frozenset(
    {
        "amd radeon rx 9070",
        "amd radeon rx 9070 xt",
        "amd radeon rx 9070 gre",
        "amd radeon ai pro r9700",
        "amd radeon rx 9060",
        "amd radeon rx 9060 xt",
        "amd radeon rx 7900 xtx",
        "amd radeon rx 7900 xt",
        "amd radeon rx 7900 gre",
        "amd radeon pro w7900",
        "amd radeon pro w7900 dual slot",
        "amd radeon pro w7800",
        "amd radeon pro w7800 48gb",
        "amd radeon rx 7800 xt",
        "amd radeon pro w7700",
        "amd radeon 8060s graphics",  # Ryzen AI Max+ 395
        "amd radeon 8050s graphics",  # Ryzen AI Max 390, 385
        "amd radeon 890m graphics",  # Ryzen AI 9 HX 375, HX 370
        "amd radeon 880m graphics",  # Ryzen AI 9 365
    }
)
DOZEN_CRASH = "microsoft/wslg#1492: vkCreateDevice crashes in NVIDIA's D3D12 driver"
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
            "probe",
        )
    libc = _libc(session)
    details = _session_details(session, libc)
    gpu_missing = _gpu_missing(session)
    if gpu_missing:
        why = gpu_missing + "."
        report.absent("directml", f"not provided: {why}")
        report.absent("cuda", f"not provided: {why}")
        report.problem("warning", source, f"no GPU in this WSL session: {why}", "probe")
        return

    musl = libc == "musl"
    if musl:
        report.problem(
            "warning",
            source,
            "the session's libc is musl: NVIDIA's and Microsoft's WSL libraries "
            "are glibc binaries, so this session cannot load them itself (its failures to do so are "
            "not counted); containers with glibc images can, musl images cannot",
            "probe",
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
    listed = adapters(local["directml"]) if "directml" in local else None
    if directml_ok:  # a hardware D3D12 adapter, /dev/dxg and the D3D12 libraries: what Dozen runs on
        _judge_dozen(report, listed, stores, smi, "dzn_icd" in session.values)
    rocm = _judge_rocm(
        report, libs, listed, stores, [p.decode("utf-8", "backslashreplace") for p in session.values.get("rocdxg", [])]
    )
    _devices(report, local.get("directml"), directml_ok, cuda_ok, stores, smi, details, rocm=rocm)


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
            "warning",
            f"{source}: /usr/lib/wsl/lib",
            "libd3d12core.so is missing; D3D12 needs it (`wsl.exe --update`)",
            "probe",
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
            "probe",
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


def _judge_dozen(
    report: ReportBuilder, listed: list[Adapter] | None, stores: dict[str, str], smi: NvidiaSmi, session_has: bool
) -> None:
    """Vulkan through Mesa's Dozen (in the image) over D3D12: experimental everywhere, never counted where an
    NVIDIA adapter is one of those it lists (the crash)."""
    dozen = "Mesa's Dozen (Vulkan on D3D12) in the image, which is not a conformant Vulkan implementation"
    hardware = [a for a in listed if a.hardware] if listed is not None else []
    nvidia = (
        any(a.vendor == "NVIDIA" for a in hardware) if listed is not None else (smi.ok or "NVIDIA" in stores.values())
    )
    if nvidia:
        report.unknown(
            "vulkan",
            f"unknown: Vulkan on WSL is {dozen}, and on an NVIDIA adapter it is known to crash ({DOZEN_CRASH}, "
            "open), so cgpu does not count it: `vulkaninfo` in a container with Dozen decides",
        )
        return
    if listed is None:
        report.unknown(
            "vulkan",
            f"unknown: Vulkan on WSL is {dozen}, over a hardware D3D12 adapter, but adapters were not enumerated "
            "(no python3 with the local probe in the session), so the software adapter (WARP, a CPU device under "
            "Dozen) could not be ruled out: install python3 in the distro",
        )
        return
    names = ", ".join(a.name for a in hardware)
    where = " (the distro has a Dozen ICD too)" if session_has else ""
    report.provide(
        "vulkan",
        f"experimental: Vulkan through {dozen}, over D3D12 on {names}{where}; {CONTAINER_NOTE}",
        image_needs=["glibc", "vulkan-loader", "mesa-dozen"],
    )


def _judge_rocm(
    report: ReportBuilder, libs: set[str], listed: list[Adapter] | None, stores: dict[str, str], rocdxg: list[str]
) -> set[str]:
    """ROCm through AMD's librocdxg over /dev/dxg: an AMD adapter librocdxg supports and libdxcore.so (which
    librocdxg loads); the runtime, librocdxg and HSA_ENABLE_DXG_DETECTION=1 come with the container. Returns
    the names of the adapters that give it."""
    amd_stores = sorted(folder for folder, vendor in stores.items() if vendor == "AMD")
    amd = [a for a in listed if a.hardware and a.vendor == "AMD"] if listed is not None else []
    if not amd and not (listed is None and amd_stores):
        return set()  # OTHER_APIS says why
    if "libdxcore.so" not in libs:
        report.absent(
            "rocm",
            "not provided: libdxcore.so, which librocdxg loads, is missing from /usr/lib/wsl/lib; "
            "update WSL (`wsl.exe --update`)",
        )
        return set()
    if listed is None:
        report.unknown(
            "rocm",
            f"unknown: an AMD display driver is in the driver store ({', '.join(amd_stores)}), and ROCm reaches WSL "
            "through AMD's librocdxg over /dev/dxg, but adapters were not enumerated (no python3 with the local "
            "probe in the session), so whether the GPU is one librocdxg supports is not known: install python3 in "
            "the distro",
        )
        return set()
    supported = [a for a in amd if _plain_name(a.name) in ROCDXG_GPUS]
    if not supported:
        report.unknown(
            "rocm",
            f"unknown: DXCore lists {', '.join(a.name for a in amd)}, which librocdxg 1.1.0's compatibility matrix "
            "(Radeon RX 7000 and 9000 series, Radeon PRO W7000, Ryzen AI Max and AI 9) does not list: `rocminfo` "
            "with HSA_ENABLE_DXG_DETECTION=1 in a container decides",
        )
        return set()
    mount = (
        f" (the distro has {rocdxg[0]}: mount it, e.g. `-v {rocdxg[0]}:/usr/lib/librocdxg.so`, or bring it in the "
        "image)"
        if rocdxg
        else ""
    )
    report.provide(
        "rocm",
        f"/dev/dxg and libdxcore.so present, and DXCore lists {', '.join(a.name for a in supported)}, on librocdxg "
        f"1.1.0's compatibility matrix: ROCm 7.1 or later reaches it through AMD's librocdxg with "
        f"HSA_ENABLE_DXG_DETECTION=1{mount}; {CONTAINER_NOTE}",
        image_needs=["glibc", "rocm-runtime", "rocm-dxg"],
    )
    return {a.name for a in supported}


def _plain_name(name: str) -> str:
    """An adapter's name without trademark marks, lower case, single-spaced: `AMD Radeon(TM) 8060S Graphics`."""
    for mark in ("(TM)", "(tm)", "(R)", "(r)", "\u2122", "\u00ae"):
        name = name.replace(mark, " ")
    return " ".join(name.lower().split())


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
        report.problem(
            "warning", f"{source}: {python}", f"the local probe's {api} check gave no answer ({why})", "probe"
        )
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
    *,
    rocm: set[str],
) -> None:
    vulkan = report.state("vulkan") == "provided"
    if local is not None and local.devices:
        nvidia_listed = False
        for adapter in adapters(local):
            apis = ["directml"] if adapter.hardware and directml else []
            if adapter.hardware and cuda and adapter.vendor == "NVIDIA":
                apis.append("cuda")
                nvidia_listed = True
            if adapter.hardware and vulkan:
                apis.append("vulkan")
            if adapter.name in rocm:
                apis.append("rocm")
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
