"""The highest CUDA version the host's NVIDIA driver supports, from its version and NVIDIA's table.

What `cuDriverGetVersion` answers inside a container is the driver's, not the image's: an image
built for CUDA 12.8 fails with CUDA_ERROR_INSUFFICIENT_DRIVER (35) on a driver below 570.26. The
table is "CUDA Toolkit and Corresponding Driver Versions" (Table 3 of NVIDIA's CUDA Toolkit
Release Notes, read in the CUDA 13.2 Update 2 edition): the lowest Linux x86_64 driver of each
CUDA x.y (its GA row). Cited in docs/cdi.md.
"""

from __future__ import annotations

from cgpu.node.host import DRIVER_VERSION_FILES, HostFS

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

# (CUDA major.minor, the lowest Linux x86_64 driver that supports it), newest first. 12.7 was never
# released (R565 drivers say 12.7; cgpu says at least 12.6 for them).
CUDA_DRIVER_TABLE: tuple[tuple[str, str], ...] = (
    ("13.2", "595.45.04"),
    ("13.1", "590.44.01"),
    ("13.0", "580.65.06"),
    ("12.9", "575.51.03"),
    ("12.8", "570.26"),
    ("12.6", "560.28.03"),
    ("12.5", "555.42.02"),
    ("12.4", "550.54.14"),
    ("12.3", "545.23.06"),
    ("12.2", "535.54.03"),
    ("12.1", "530.30.02"),
    ("12.0", "525.60.13"),
    ("11.8", "520.61.05"),
    ("11.7", "515.43.04"),
    ("11.6", "510.39.01"),
    ("11.5", "495.29.05"),
    ("11.4", "470.42.01"),
    ("11.3", "465.19.01"),
    ("11.2", "460.27.03"),
    ("11.1", "455.23"),
    ("11.0", "450.36.06"),
    ("10.2", "440.33"),
    ("10.1", "418.39"),
    ("10.0", "410.48"),
    ("9.2", "396.26"),
    ("9.1", "390.46"),
    ("9.0", "384.81"),
    ("8.0", "367.48"),
    ("7.5", "352.31"),
    ("7.0", "346.46"),
)
TABLE_SOURCE = "NVIDIA CUDA Toolkit Release Notes (13.2 Update 2), table CUDA Toolkit and Corresponding Driver Versions"


def version_key(version: str) -> tuple[int, ...] | None:
    """`570.86.15` as (570, 86, 15); None for text that is not a dotted number."""
    parts = version.split(".")
    if not all(part.isascii() and part.isdigit() for part in parts):  # not "²", which int() refuses
        return None
    return tuple(int(part) for part in parts)


def cuda_for_driver(driver: str) -> tuple[str | None, str, str]:
    """(CUDA x.y or None, state, reason) for an NVIDIA driver version.

    state: `known` when the driver is of the same branch (major number) as the table's row, so
    it reports that CUDA; `at-least` when its branch is newer than the row's (R565 between 12.6
    and 12.8, or a driver newer than the table's newest row: it may support more, never less);
    `unknown` when the version is unreadable or older than the table's first row."""
    key = version_key(driver)
    if key is None:
        return None, "unknown", f"the driver version {driver!r} is not a dotted number"
    for cuda, minimum in CUDA_DRIVER_TABLE:
        floor = tuple(int(part) for part in minimum.split("."))
        if key >= floor:
            if key[0] == floor[0]:
                return cuda, "known", f"driver {driver} is at least {minimum}, CUDA {cuda}'s minimum ({TABLE_SOURCE})"
            return (
                cuda,
                "at-least",
                f"driver {driver} is at least {minimum}, CUDA {cuda}'s minimum, and of a newer branch than "
                f"cgpu's table knows for a newer CUDA: it supports CUDA {cuda} and may support more ({TABLE_SOURCE})",
            )
    oldest_cuda, oldest = CUDA_DRIVER_TABLE[-1]
    return None, "unknown", f"driver {driver} is older than {oldest} (CUDA {oldest_cuda}), the table's first row"


def nvidia_driver(host: HostFS, *, names: Iterable[str]) -> dict[str, Any] | None:
    """The report's `nvidia_driver`: the running driver's version and the CUDA it supports; None
    where the node shows no NVIDIA driver (no version file, no /dev/nvidiactl, none of the CDI
    device `names` of an NVIDIA kind: nvidia.com/, management.nvidia.com/, k8s.gpu.nvidia.com/...)."""
    version, read_from = host.nvidia_driver_version()
    if version is None:
        vendors = {name.partition("/")[0] for name in names}
        if not any(vendor.endswith("nvidia.com") for vendor in vendors) and not host.exists("/dev/nvidiactl"):
            return None
        return {"version": None, "read_from": None, "cuda": None, "cuda_state": "unknown", "reason": _unread(host)}
    cuda, state, reason = cuda_for_driver(version)
    return {
        "version": version,
        "read_from": read_from,
        "cuda": cuda,
        "cuda_state": state,
        "reason": reason,
    }


def _unread(host: HostFS) -> str:
    """Why the driver's version is not known here, and where it is."""
    if host.exists("/dev/dxg"):
        return (
            "the NVIDIA driver is Windows' (WSL's /dev/dxg), whose version is not under /proc: `nvidia-smi` in the "
            "distro names it and the CUDA it supports"
        )
    if host.exists("/dev/nvmap") or host.exists("/etc/nv_tegra_release"):
        return (
            "a Jetson (Tegra) driver, whose CUDA comes with its L4T/JetPack release (/etc/nv_tegra_release), not "
            "NVIDIA's desktop driver table"
        )
    files = " or ".join(host.display(path) for path in DRIVER_VERSION_FILES)
    return (
        f"the NVIDIA driver's version could not be read ({files} is missing or unreadable: is the nvidia kernel "
        f"module loaded, and /proc and /sys mounted under the root?), so which CUDA it supports is unknown"
    )
