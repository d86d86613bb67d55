"""Device identity: whether the node a container gets reaches the host's device (docs/cdi.md "Device identity").

The CDI library keeps a spec's non-zero `major` (and its `minor`) and fills them from the host only
where the major is 0 (container-device-interface `pkg/cdi/container-edits_unix.go`, `fillMissingInfo`,
the same from v0.5 to v1.1.0). nvidia-ctk 1.19 and later write the numbers it read at generation, and
`nvidia-uvm`'s major is dynamic: after a driver reload or a reboot a spec can pin numbers that reach
no device (toolkit#1934, #1967: cuInit fails with 999). Compared here with the host's: the node's
`st_rdev` under the root, else (no node file) the driver's major in /proc/devices.
"""

from __future__ import annotations

import posixpath
import re

from cgpu.cdi.model import DeviceNode
from cgpu.node.host import HostFS
from cgpu.patterns import lazy

# The nodes nvidia-ctk's `system create-device-nodes --control-devices` makes (toolkit
# pkg/system/nvdevices/devices.go `CreateNVIDIAControlDevices`): userspace creates them on demand
# (nvidia-modprobe, that command, the refresh unit after toolkit 1.20.0), devtmpfs never does.
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
CREATE_CONTROL_NODES = "`nvidia-ctk system create-device-nodes --control-devices --load-kernel-modules`"

# A node's driver as /proc/devices names it, and the minor its name gives (None: not fixed).
# NVIDIA: toolkit internal/info/proc/devices/devices.go (`nvidia` since driver 550.40, before it
# `nvidia-frontend`) and pkg/system/nvdevices/devices.go (`Minor`); DRM: the node's own number.
_DRIVERS: tuple[tuple[re.Pattern[str], tuple[str, ...], int | None], ...] = (
    (lazy(r"/dev/nvidia-uvm"), ("nvidia-uvm",), 0),
    (lazy(r"/dev/nvidia-uvm-tools"), ("nvidia-uvm",), 1),
    (lazy(r"/dev/nvidiactl"), ("nvidia", "nvidia-frontend"), 255),
    (lazy(r"/dev/nvidia-modeset"), ("nvidia", "nvidia-frontend"), 254),
    (lazy(r"/dev/nvidia(\d{1,3})"), ("nvidia", "nvidia-frontend"), None),
    (lazy(r"/dev/nvidia-caps/nvidia-cap(\d{1,6})"), ("nvidia-caps",), None),
    (lazy(r"/dev/dri/(?:card|renderD)(\d{1,6})"), ("drm",), None),
    (lazy(r"/dev/kfd"), ("kfd",), None),
)


class WrongNode:
    """A device node whose numbers in the container are not the host's device's."""

    __slots__ = ("host", "path", "read_from", "spec")

    def __init__(
        self, path: str, spec: tuple[str, int, int], host: tuple[str, int, int | None], read_from: str
    ) -> None:
        self.path = path  # the host path
        self.spec = spec  # (type, major, minor) the engine gives the container's node
        self.host = host  # (type, major, minor) of the host's device; minor None: /proc/devices tells none
        self.read_from = read_from  # "st_rdev of /dev/nvidia-uvm", "/proc/devices (nvidia-uvm)"

    def _numbers(self, numbers: tuple[str, int, int | None]) -> str:
        kind, major, minor = numbers
        shown = f"{major}:{minor}" if minor is not None else f"major {major}"
        return f"{kind} {shown}" if self.spec[0] != self.host[0] else shown

    def clause(self) -> str:
        """`the spec pins /dev/nvidia-uvm to 510:0, the host has 509:0 (st_rdev of /dev/nvidia-uvm)`."""
        return (
            f"the spec pins {self.path} to {self._numbers(self.spec)}, the host has {self._numbers(self.host)} "
            f"({self.read_from})"
        )

    def as_dict(self) -> dict[str, object]:
        kind, major, minor = self.spec
        host_kind, host_major, host_minor = self.host
        return {
            "path": self.path,
            "spec": {"type": kind, "major": major, "minor": minor},
            "host": {"type": host_kind, "major": host_major, "minor": host_minor},
            "read_from": self.read_from,
        }


def wrong_node(node: DeviceNode, host: HostFS) -> WrongNode | None:
    """The node's numbers in the container against the host's device, where both are known: None when they
    agree, the host decides them (major 0, a FIFO), or the host shows no device to compare (a stand-in file
    under --root, no node and no /proc/devices line for its driver)."""
    if not node.major or node.type == "p":
        return None  # the library reads type, major and minor from the host node: right by construction
    path = node.host_path or node.path
    spec_type = "c" if node.type == "u" else node.type
    actual = host.device_number(path)
    if actual is not None:
        pinned = (spec_type or actual[0], node.major, node.minor or 0)  # no type: the host's, the numbers kept
        return None if pinned == actual else WrongNode(path, pinned, actual, f"st_rdev of {host.display(path)}")
    if spec_type is None or host.exists(path):
        return None  # no type: the library stats the node and refuses a missing one; a file: no numbers
    pinned = (spec_type, node.major, node.minor or 0)
    for pattern, names, fixed_minor in _DRIVERS:
        match = pattern.fullmatch(posixpath.normpath(path))
        if match is None:
            continue
        majors = host.driver_majors().get(spec_type, {})
        name = next((n for n in names if n in majors), None)
        if name is None:
            return None
        minor = int(match.group(1)) if match.groups() else fixed_minor
        if majors[name] == pinned[1] and minor in (None, pinned[2]):
            return None
        return WrongNode(path, pinned, (spec_type, majors[name], minor), f"/proc/devices ({name})")
    return None


def wrong_nodes(nodes: dict[str, DeviceNode], host: HostFS) -> list[WrongNode]:
    """The nodes (container path -> node) whose numbers in the container reach no host device of theirs."""
    found = []
    for node in nodes.values():
        if node.major and node.permissions != "none":
            wrong = wrong_node(node, host)
            if wrong is not None:
                found.append(wrong)
    return found


def consequence(wrong: list[WrongNode]) -> str:
    """What the container sees through such nodes, in words."""
    uvm = any(posixpath.basename(w.path) == "nvidia-uvm" for w in wrong)
    return "the container's node reaches another device or none" + (
        " (CUDA: cuInit fails with error 999, toolkit#1934)" if uvm else ""
    )


def identity_fix(kind: str) -> str:
    """Regenerating writes the numbers the host has now; NVIDIA's refresh unit does it at each boot."""
    if kind.startswith("nvidia.com/"):
        return (
            "regenerate the spec (`nvidia-ctk cdi generate`, or `systemctl restart nvidia-cdi-refresh.service` "
            "where the toolkit keeps /var/run/cdi/nvidia.yaml), which reads the numbers from the host"
        )
    return "regenerate the spec with its vendor's generator, which reads the numbers from the host"


def control_node_fix(path: str) -> str | None:
    """How a missing NVIDIA control node is made, where `path` is one: regenerating cannot, as the
    generator lists only the nodes it finds."""
    if posixpath.normpath(path) not in CONTROL_NODES:
        return None
    return (
        f"{path} is an NVIDIA control node that userspace creates on demand, not the kernel: create it with "
        f"{CREATE_CONTROL_NODES} (the nvidia-cdi-refresh unit of toolkit releases after 1.20.0 runs it at boot); "
        f"regenerating the spec does not make it"
    )
