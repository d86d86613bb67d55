"""Parsed CDI specs (read-only value objects). Field names follow the spec's JSON keys in
snake_case; absent optional values are None or empty tuples."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cgpu.problem import Problem


@dataclass(frozen=True)
class DeviceNode:
    path: str
    host_path: str | None = None
    type: str | None = None  # "b", "c", "u", "p" or None
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str | None = None
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    type: str | None = None
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hook:
    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


@dataclass(frozen=True)
class ContainerEdits:
    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    additional_gids: tuple[int, ...] = ()
    intel_rdt: dict[str, Any] | None = None
    net_devices: tuple[dict[str, str], ...] = ()

    def is_empty(self) -> bool:
        return not (
            self.env
            or self.device_nodes
            or self.mounts
            or self.hooks
            or self.additional_gids
            or self.intel_rdt is not None
            or self.net_devices
        )


@dataclass(frozen=True)
class SpecDevice:
    name: str
    edits: ContainerEdits
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Spec:
    path: str  # the file it came from
    version: str  # as declared, without a leading "v"
    kind: str  # vendor/class
    devices: tuple[SpecDevice, ...]
    edits: ContainerEdits = ContainerEdits()  # spec-level, applied once with any device
    annotations: dict[str, str] = field(default_factory=dict)
    priority: int = 0  # index of its spec dir; higher wins
    # Findings that do not reject the spec (keys in another case, a one-character vendor or
    # class that crashes older engines); the scan reports them as warnings.
    warnings: tuple[str, ...] = ()

    @property
    def vendor(self) -> str:
        return self.kind.split("/", 1)[0]

    @property
    def device_class(self) -> str:
        return self.kind.split("/", 1)[1]


@dataclass(frozen=True)
class ResolvedDevice:
    """A device an engine can inject: its qualified name, its spec, and its own entry."""

    qualified_name: str  # vendor/class=name
    spec: Spec
    device: SpecDevice

    def edits(self) -> ContainerEdits:
        """Spec-level plus device edits, as an engine applies them for this device alone."""
        return merge_edits([self.spec.edits, self.device.edits])


def merge_edits(edits: list[ContainerEdits]) -> ContainerEdits:
    """Apply edits in order as the CDI library does: env by name (later wins), device nodes
    by path and mounts by container path (later replaces), hooks appended."""
    env: dict[str, str] = {}
    nodes: dict[str, DeviceNode] = {}
    mounts: dict[str, Mount] = {}
    hooks: list[Hook] = []
    gids: list[int] = []
    intel_rdt = None
    net: list[dict[str, str]] = []
    for e in edits:
        for entry in e.env:
            env[entry.split("=", 1)[0]] = entry
        for node in e.device_nodes:
            nodes.pop(node.path, None)
            nodes[node.path] = node
        for mount in e.mounts:
            mounts.pop(mount.container_path, None)
            mounts[mount.container_path] = mount
        hooks.extend(e.hooks)
        gids.extend(g for g in e.additional_gids if g != 0 and g not in gids)
        intel_rdt = e.intel_rdt if e.intel_rdt is not None else intel_rdt
        net.extend(e.net_devices)
    return ContainerEdits(
        env=tuple(env.values()),
        device_nodes=tuple(nodes.values()),
        mounts=tuple(mounts.values()),
        hooks=tuple(hooks),
        additional_gids=tuple(gids),
        intel_rdt=intel_rdt,
        net_devices=tuple(net),
    )


@dataclass
class ScanResult:
    """What the spec dirs hold, as an engine would see them."""

    devices: dict[str, ResolvedDevice]  # qualified name -> device, after priority and conflicts
    specs: list[Spec]  # every valid spec, lowest priority first
    problems: list[Problem]  # in scan order; the source is the spec path or dir
    # Valid specs the engine ignores: their cdiVersion is above its maximum. Their devices are
    # not in `devices`; a resolver can report them as blocked.
    engine_dropped: list[Spec] = field(default_factory=list)
    # Files the library panics on: the engine's whole load dies, so `devices` is empty.
    crashed: list[str] = field(default_factory=list)
    # Spec files and dirs cgpu could not read but an engine may (permission denied, over cgpu's
    # size cap): what they define is not known.
    unreadable: list[str] = field(default_factory=list)
    # Where the library's scan of the spec dirs ended early (a dir or entry whose lstat failed with
    # anything but "not found"), or None. The engine reads no later dir.
    stopped_at: str | None = None
    # Devices only the dirs after `stopped_at` define, with the spec that defines each: read by
    # cgpu as data, never injected by the engine (not in `devices`).
    unreached: dict[str, Spec] = field(default_factory=dict)
