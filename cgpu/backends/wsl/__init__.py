"""The wsl backend (Windows): what a container started in the agent's WSL session gets.

One `wsl.exe -d DISTRO -e sh -c <wsl/probe.sh> ...` call runs the in-session probe (POSIX
sh, busybox is enough); the local probe goes along on stdin for the session's python3. The
probe's answer is in-band (hex-valued `key=value` lines), so wsl.exe's own failures (exit
-1, UTF-16LE text with a `Wsl/...` code) are never mistaken for it.

On WSL the GPU is `/dev/dxg` (dxgkrnl) plus the libraries in `/usr/lib/wsl`: Microsoft's
D3D12/DXCore for every vendor, NVIDIA's `libcuda.so.1` for CUDA. `/dev/dri` there is VGEM,
never a GPU.
"""

from __future__ import annotations

import codecs
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cgpu.apis import CONTAINER_APIS
from cgpu.errors import CgpuError
from cgpu.gpu_probe.answer import ApiAnswer, Device, read_child_answer
from cgpu.problem import Problem
from cgpu.report import ReportBuilder
from cgpu.run import CommandError, CommandNotFoundError, CommandTimeoutError, run

DEFAULT_TIMEOUT = 90.0  # the first call boots the WSL VM, which can take tens of seconds
FORMAT = b"cgpu-wsl-probe 1"
END = b"cgpu-wsl-probe end"
# wsl.exe exits -1 on its own errors: 4294967295 as a Windows DWORD, 255 where only a byte survives.
WSL_ERROR_EXITS = frozenset({-1, 255, 0xFFFFFFFF})
# WSL's own rule for distro names; anything else would be read as an option or a path.
DISTRO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
LINE = re.compile(rb"([a-z][a-z0-9_]*)=((?:[0-9a-f]{2})*)")
KEYS = frozenset(
    {
        "dxg",
        "dxg_access",
        "dri",
        "wsl_lib",
        "wsl_lib_missing",
        "drivers",
        "driver_so",
        "libc_loaders",
        "kernel",
        "os_release",
        "wsl_conf",
        "wsl_distro_name",
        "wsl_interop",
        "python3",
        "local_directml_rc",
        "local_directml",
        "local_cuda_rc",
        "local_cuda",
        "nvidia_smi_rc",
        "nvidia_smi",
    }
)
REPEATED_KEYS = frozenset({"driver_so"})
MAX_EXCERPT = 300
MAX_LOCAL_PROBE = 120_000  # it travels as one argument of python3 -c; Linux allows 128 KiB

# The WSL error codes a user can act on (wsl.exe prints `Error code: Wsl/<where>/<code>`).
WSL_ERRORS = {
    "WSL_E_DISTRO_NOT_FOUND": "there is no WSL distro named {distro}; list them with `wsl.exe -l -v` "
    "and pass the agent's containers session with --distro (or CGPU_WSL_DISTRO)",
    "WSL_E_DEFAULT_DISTRO_NOT_FOUND": "WSL has no default distro; install one (`wsl.exe --install`) or pass "
    "the agent's containers session with --distro",
    "WSL_E_WSL_OPTIONAL_COMPONENT_REQUIRED": "WSL is not installed or not enabled yet: run "
    "`wsl.exe --install --no-distribution` as administrator and restart Windows",
    "WSL_E_VIRTUAL_MACHINE_PLATFORM_REQUIRED": "the Virtual Machine Platform Windows feature is off: run "
    "`wsl.exe --install --no-distribution` as administrator and restart Windows",
    "WSL_E_USER_NOT_FOUND": "the distro's default user does not exist; set one with `wsl.exe --manage "
    "{distro} --set-default-user NAME`",
}

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
WARP_IDS = (0x1414, 0x8C)  # Microsoft Basic Render Driver: a software adapter

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


class ProbeOutputError(CgpuError, ValueError):
    """The probe's output is not format 1 (truncated, corrupted, or not ours)."""


@dataclass
class Adapter:
    name: str
    vendor: str | None
    hardware: bool
    ids: dict[str, str]


@dataclass
class Session:
    """The facts probe.sh reported, decoded."""

    values: dict[str, list[bytes]] = field(default_factory=dict)

    def text(self, key: str) -> str | None:
        found = self.values.get(key)
        return found[0].decode("utf-8", "backslashreplace") if found else None

    def names(self, key: str) -> list[str] | None:
        found = self.text(key)
        return None if found is None else [n for n in found.split("/") if n]


# -- running it ----------------------------------------------------------------------------


def probe(report: ReportBuilder, *, distro: str | None = None, timeout: float | None = None) -> None:
    distro = distro or os.environ.get("CGPU_WSL_DISTRO") or None
    if distro is not None and not DISTRO_NAME.fullmatch(distro):
        report.usage_error("distro", f"{distro!r} is not a WSL distro name (letters, digits, '.', '_', '-')")
        return
    exe = _find_wsl_exe(report)
    script = _probe_script(report)
    if exe is None or script is None:
        return
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    local_probe = _local_probe_source(report)
    # Inside the session: two python runs and nvidia-smi, well within the whole call's limit.
    py_timeout = max(1, int(timeout / 4)) if local_probe is not None else 0
    smi_timeout = max(1, int(timeout / 8))
    argv = [
        exe,
        *(["-d", distro] if distro else []),
        "-e",
        "sh",
        "-c",
        script,
        "cgpu-wsl-probe",
        str(smi_timeout),
        str(py_timeout),
    ]
    where = f"distro {distro}" if distro else "the default distro"
    report.progress(f"probing WSL {where} (the first call starts WSL and can take a while)")
    try:
        done = run(argv, timeout=timeout, input=local_probe or b"", env={**os.environ, "WSL_UTF8": "1"})
    except CommandNotFoundError as exc:  # the argv holds the whole probe script: name the executable only
        _could_not_run(report, exe, f"could not run {exe}: {exc.reason}; {_INSTALL_WSL}")
        return
    except CommandTimeoutError:
        _could_not_run(
            report,
            exe,
            f"wsl.exe gave no answer for {where} within {timeout:g} s and was "
            "stopped; check `wsl.exe -l -v` and try a longer --timeout",
        )
        return
    except CommandError as exc:
        _could_not_run(report, exe, f"could not run {exe}: {exc.reason}")
        return
    source = f"wsl.exe ({where})"
    start = done.stdout.find(FORMAT + b"\n")
    if start < 0:
        _could_not_run(report, source, _explain_failure(done.returncode, done.stdout, done.stderr, distro))
        return
    try:
        session = parse_output(done.stdout[start:])
    except ProbeOutputError as exc:
        _could_not_run(report, source, f"the probe's output was not understood: {exc}")
        return
    if done.stdout[:start].strip():
        report.problem("info", source, f"text before the probe's output: {excerpt(done.stdout[:start])}")
    judge(report, session, distro or session.text("wsl_distro_name") or "default", local_probe is not None)


def _could_not_run(report: ReportBuilder, source: str, message: str) -> None:
    report.failed(source, message)
    for api in CONTAINER_APIS:
        report.unknown(api, "unknown: cgpu could not probe the WSL session (see problems)")


_INSTALL_WSL = "install WSL 2 (`wsl.exe --install` as administrator, then restart), or point CGPU_WSL_EXE at wsl.exe"


def _find_wsl_exe(report: ReportBuilder) -> str | None:
    configured = os.environ.get("CGPU_WSL_EXE")
    if configured:
        if not os.path.isfile(configured):
            _could_not_run(report, "CGPU_WSL_EXE", f"{configured} does not exist; {_INSTALL_WSL}")
            return None
        return configured
    found = shutil.which("wsl.exe")
    if found is None and sys.platform != "win32":
        _could_not_run(
            report,
            "wsl.exe",
            "wsl.exe is not on PATH: the wsl backend asks a WSL session on Windows "
            "(run cgpu there, or point CGPU_WSL_EXE at a wsl.exe)",
        )
    elif found is None:
        _could_not_run(report, "wsl.exe", f"wsl.exe is not on PATH; {_INSTALL_WSL}")
    return found


def _probe_script(report: ReportBuilder) -> str | None:
    from importlib.resources import files

    try:  # text mode turns a Windows checkout's CRLF into the LF sh needs
        return files(__name__).joinpath("probe.sh").read_text(encoding="utf-8")
    except OSError:
        _could_not_run(
            report,
            "cgpu",
            "the in-session probe cgpu/backends/wsl/probe.sh is missing from this installation; reinstall cgpu",
        )
        return None


def _local_probe_source(report: ReportBuilder) -> bytes | None:
    """The local backend's probe (probe.py), to enumerate adapters with the session's python3."""
    from cgpu.gpu_probe import PROBE_SCRIPT

    try:
        source = PROBE_SCRIPT.read_bytes()
    except OSError:
        return None
    if len(source) > MAX_LOCAL_PROBE:
        report.problem(
            "warning",
            str(PROBE_SCRIPT),
            f"{len(source)} bytes is too big to pass to the session's python3 "
            f"(limit {MAX_LOCAL_PROBE}); adapters are not enumerated",
        )
        return None
    return source


# -- reading what came back ----------------------------------------------------------------


def decode_wsl_text(data: bytes) -> str:
    """wsl.exe's own messages: UTF-16LE (BOM, or NULs: its ASCII parts like `Error code: Wsl/...`
    are NUL-interleaved) unless WSL_UTF8=1 took, else UTF-8. Never raises."""
    if data.startswith(codecs.BOM_UTF16_LE):
        return data[2:].decode("utf-16-le", "replace")
    if b"\x00" in data:
        return data[: len(data) // 2 * 2].decode("utf-16-le", "replace")
    return data.decode("utf-8", "backslashreplace")


def excerpt(data: bytes) -> str:
    return shorten(decode_wsl_text(data))


def shorten(text: str) -> str:
    """Text for a problem message: one line, capped, quoted (so odd bytes show as escapes)."""
    text = " ".join(text.split())
    return repr(text if len(text) <= MAX_EXCERPT else text[:MAX_EXCERPT] + "...")


def _explain_failure(returncode: int, stdout: bytes, stderr: bytes, distro: str | None) -> str:
    text = decode_wsl_text(stdout) + "\n" + decode_wsl_text(stderr)
    codes = re.findall(r"Wsl/[A-Za-z0-9_/]*?(WSL_E_[A-Z0-9_]+|E_[A-Z0-9_]+)", text)
    full = re.search(r"Wsl/[A-Za-z0-9_/]+", text)
    shown = shorten(text) if text.strip() else "no output"
    if returncode in WSL_ERROR_EXITS and codes:
        advice = WSL_ERRORS.get(codes[-1])
        if advice:
            return f"{full.group(0) if full else codes[-1]}: " + advice.format(distro=distro or "(default)")
        return f"wsl.exe failed with {full.group(0) if full else codes[-1]}: {shown}"
    if returncode in WSL_ERROR_EXITS:
        return f"wsl.exe failed (exit {returncode}) without an error code: {shown}"
    return (
        f"the probe did not answer (exit {returncode}); the distro needs a POSIX sh with od, tr and head "
        f"(busybox is enough). Output: {shown}"
    )


def parse_output(data: bytes) -> Session:
    """Strictly parse probe.sh's format 1: header, `key=hex` lines, end line, nothing else."""
    lines = data.split(b"\n")
    if not lines or lines[0] != FORMAT:
        raise ProbeOutputError("it does not start with the format line")
    session = Session()
    for number, line in enumerate(lines[1:], start=2):
        if number == len(lines) and not line:
            break  # output ended with a newline but no end line
        line = line.removesuffix(b"\r")
        if line == END:
            if any(rest.strip() for rest in lines[number:]):
                raise ProbeOutputError(f"text after the end line (line {number + 1})")
            return session
        match = LINE.fullmatch(line)
        if match is None:
            raise ProbeOutputError(f"line {number} is not key=hex: {excerpt(line)}")
        key = match.group(1).decode()
        if key not in KEYS:
            raise ProbeOutputError(f"line {number} has an unknown key {key!r}")
        if key in session.values and key not in REPEATED_KEYS:
            raise ProbeOutputError(f"line {number} repeats the key {key!r}")
        session.values.setdefault(key, []).append(bytes.fromhex(match.group(2).decode()))
    raise ProbeOutputError("it stops before the end line (cut short?)")


def adapters(local: ApiAnswer) -> list[Adapter]:
    """The DXCore adapters the local probe listed (its devices, already checked and cleaned)."""
    return [_adapter(device) for device in local.devices]


def _adapter(device: Device) -> Adapter:
    vendor_id = _int(device.details.get("vendor_id"))
    device_id = _int(device.details.get("device_id"))
    name = device.name[:MAX_EXCERPT]
    software = (
        device.details.get("hardware") is False
        or not device.counted
        or (vendor_id, device_id) == WARP_IDS
        or "Basic Render Driver" in name
    )
    vendor = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x5143: "Qualcomm"}.get(vendor_id or -1)
    ids = {
        key: f"0x{value:04x}"
        for key, value in (("vendor_id", vendor_id), ("device_id", device_id))
        if value is not None
    }
    return Adapter(name, vendor, not software, ids)


def _int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return None
    return None


def ini_value(text: str, section: str, key: str) -> str | None:
    """A value from wsl.conf/.wslconfig (INI; sections and keys compare case-insensitively)."""
    current = None
    found = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip().lower()
        elif "=" in line and current == section.lower():
            name, value = line.split("=", 1)
            if name.strip().lower() == key.lower():
                found = value.strip().strip("\"'").lower()
    return found


def _host_wslconfig_disables_gpu() -> str | None:
    """%USERPROFILE%\\.wslconfig with `[wsl2] gpuSupport=false` turns GPU-PV off for every distro."""
    profile = os.environ.get("USERPROFILE")
    if not profile:
        return None
    path = Path(profile) / ".wslconfig"
    try:
        with path.open("rb") as handle:
            text = decode_wsl_text(handle.read(1 << 16)).lstrip("\ufeff")
    except OSError:
        return None
    return str(path) if ini_value(text, "wsl2", "gpuSupport") in ("false", "0") else None


# -- judging ------------------------------------------------------------------------------


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
        disabled_by = _host_wslconfig_disables_gpu()
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
