"""Reading what came back from the session: probe.sh's format 1, wsl.exe's own text and error
codes, the local probe's adapters, and wsl.conf/.wslconfig values."""

from __future__ import annotations

import codecs
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from cgpu.errors import CgpuError
from cgpu.gpu_probe.answer import ApiAnswer, Device

FORMAT = b"cgpu-wsl-probe 1"
END = b"cgpu-wsl-probe end"
# wsl.exe exits -1 on its own errors: 4294967295 as a Windows DWORD, 255 where only a byte survives.
WSL_ERROR_EXITS = frozenset({-1, 255, 0xFFFFFFFF})
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
        "rocdxg",
        "dzn_icd",
    }
)
REPEATED_KEYS = frozenset({"driver_so", "rocdxg", "dzn_icd"})
MAX_EXCERPT = 300

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
WARP_IDS = (0x1414, 0x8C)  # Microsoft Basic Render Driver: a software adapter


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


def explain_failure(returncode: int, stdout: bytes, stderr: bytes, distro: str | None) -> str:
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


def host_wslconfig_disables_gpu() -> str | None:
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
