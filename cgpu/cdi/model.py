"""Parsed CDI specs (read-only value objects). Field names follow the spec's JSON keys in
snake_case; absent optional values are None or empty tuples."""

from __future__ import annotations

from operator import attrgetter

from cgpu.errors import CgpuError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from cgpu.problem import Problem

# Plain classes with __slots__, not dataclasses: the CLI imports this module on every run, and
# creating seven dataclasses (and importing their machinery) cost more than the rest of the
# module. Each frozen class behaves as `@dataclass(frozen=True)` did: keyword or positional
# arguments in field order, equal when of the same class with equal fields, the same hash
# (that of the fields' tuple; remembered, as the fields never change), the same repr, and
# assigning to a field raises.


class FrozenInstanceError(CgpuError, AttributeError):
    """Assigning to a field of a frozen model object (dataclasses.FrozenInstanceError's role)."""


class _Frozen:
    __slots__ = ("_hash",)
    _hash: int
    _fields: tuple[str, ...] = ()
    _values: Callable[[Any], tuple[Any, ...]]

    def __init_subclass__(cls) -> None:
        cls._fields = tuple(name for name in cls.__slots__ if not name.startswith("_"))  # _hash: no field
        getter = attrgetter(*cls._fields)
        cls._values = getter if len(cls._fields) > 1 else lambda self: (getter(self),)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self is other or self._values(self) == self._values(other)

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            value = hash(self._values(self))  # a field holding a dict: TypeError, as before
            object.__setattr__(self, "_hash", value)
            return value

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self._values(self), strict=True))
        return f"{self.__class__.__qualname__}({fields})"

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:  # copy and pickle through __init__
        return self.__class__, self._values(self)

    def replace(self, **changes: Any) -> Any:
        """A copy with some fields changed (dataclasses.replace)."""
        values = dict(zip(self._fields, self._values(self), strict=True))
        values.update(changes)
        return self.__class__(**values)


_set = object.__setattr__


class DeviceNode(_Frozen):
    __slots__ = ("path", "host_path", "type", "major", "minor", "file_mode", "permissions", "uid", "gid")  # noqa: RUF023 (field order)
    path: str
    host_path: str | None
    type: str | None  # "b", "c", "u", "p" or None
    major: int | None
    minor: int | None
    file_mode: int | None
    permissions: str | None
    uid: int | None
    gid: int | None

    def __init__(
        self,
        path: str,
        host_path: str | None = None,
        type: str | None = None,
        major: int | None = None,
        minor: int | None = None,
        file_mode: int | None = None,
        permissions: str | None = None,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        _set(self, "path", path)
        _set(self, "host_path", host_path)
        _set(self, "type", type)
        _set(self, "major", major)
        _set(self, "minor", minor)
        _set(self, "file_mode", file_mode)
        _set(self, "permissions", permissions)
        _set(self, "uid", uid)
        _set(self, "gid", gid)


class Mount(_Frozen):
    __slots__ = ("host_path", "container_path", "type", "options")  # noqa: RUF023 (field order)
    host_path: str
    container_path: str
    type: str | None
    options: tuple[str, ...]

    def __init__(
        self,
        host_path: str,
        container_path: str,
        type: str | None = None,
        options: tuple[str, ...] = (),
    ) -> None:
        _set(self, "host_path", host_path)
        _set(self, "container_path", container_path)
        _set(self, "type", type)
        _set(self, "options", options)


class Hook(_Frozen):
    __slots__ = ("hook_name", "path", "args", "env", "timeout")  # noqa: RUF023 (field order)
    hook_name: str
    path: str
    args: tuple[str, ...]
    env: tuple[str, ...]
    timeout: int | None

    def __init__(
        self,
        hook_name: str,
        path: str,
        args: tuple[str, ...] = (),
        env: tuple[str, ...] = (),
        timeout: int | None = None,
    ) -> None:
        _set(self, "hook_name", hook_name)
        _set(self, "path", path)
        _set(self, "args", args)
        _set(self, "env", env)
        _set(self, "timeout", timeout)


class ContainerEdits(_Frozen):
    __slots__ = ("env", "device_nodes", "mounts", "hooks", "additional_gids", "intel_rdt", "net_devices")  # noqa: RUF023 (field order)
    env: tuple[str, ...]
    device_nodes: tuple[DeviceNode, ...]
    mounts: tuple[Mount, ...]
    hooks: tuple[Hook, ...]
    additional_gids: tuple[int, ...]
    intel_rdt: dict[str, Any] | None
    net_devices: tuple[dict[str, str], ...]

    def __init__(
        self,
        env: tuple[str, ...] = (),
        device_nodes: tuple[DeviceNode, ...] = (),
        mounts: tuple[Mount, ...] = (),
        hooks: tuple[Hook, ...] = (),
        additional_gids: tuple[int, ...] = (),
        intel_rdt: dict[str, Any] | None = None,
        net_devices: tuple[dict[str, str], ...] = (),
    ) -> None:
        _set(self, "env", env)
        _set(self, "device_nodes", device_nodes)
        _set(self, "mounts", mounts)
        _set(self, "hooks", hooks)
        _set(self, "additional_gids", additional_gids)
        _set(self, "intel_rdt", intel_rdt)
        _set(self, "net_devices", net_devices)

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


class SpecDevice(_Frozen):
    __slots__ = ("name", "edits", "annotations")  # noqa: RUF023 (field order)
    name: str
    edits: ContainerEdits
    annotations: dict[str, str]

    def __init__(self, name: str, edits: ContainerEdits, annotations: dict[str, str] | None = None) -> None:
        _set(self, "name", name)
        _set(self, "edits", edits)
        _set(self, "annotations", {} if annotations is None else annotations)


_NO_EDITS = ContainerEdits()


class Spec(_Frozen):
    __slots__ = ("path", "version", "kind", "devices", "edits", "annotations", "priority", "warnings")  # noqa: RUF023 (field order)
    path: str  # the file it came from
    version: str  # as declared, without a leading "v"
    kind: str  # vendor/class
    devices: tuple[SpecDevice, ...]
    edits: ContainerEdits  # spec-level, applied once with any device
    annotations: dict[str, str]
    priority: int  # index of its spec dir; higher wins
    # Findings that do not reject the spec (keys in another case, a one-character vendor or
    # class that crashes older engines); the scan reports them as warnings.
    warnings: tuple[str, ...]

    def __init__(
        self,
        path: str,
        version: str,
        kind: str,
        devices: tuple[SpecDevice, ...],
        edits: ContainerEdits = _NO_EDITS,
        annotations: dict[str, str] | None = None,
        priority: int = 0,
        warnings: tuple[str, ...] = (),
    ) -> None:
        _set(self, "path", path)
        _set(self, "version", version)
        _set(self, "kind", kind)
        _set(self, "devices", devices)
        _set(self, "edits", edits)
        _set(self, "annotations", {} if annotations is None else annotations)
        _set(self, "priority", priority)
        _set(self, "warnings", warnings)

    @property
    def vendor(self) -> str:
        return self.kind.split("/", 1)[0]

    @property
    def device_class(self) -> str:
        return self.kind.split("/", 1)[1]


class ResolvedDevice(_Frozen):
    """A device an engine can inject: its qualified name, its spec, and its own entry."""

    __slots__ = ("qualified_name", "spec", "device")  # noqa: RUF023 (field order)
    qualified_name: str  # vendor/class=name
    spec: Spec
    device: SpecDevice

    def __init__(self, qualified_name: str, spec: Spec, device: SpecDevice) -> None:
        _set(self, "qualified_name", qualified_name)
        _set(self, "spec", spec)
        _set(self, "device", device)

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


class ScanResult:
    """What the spec dirs hold, as an engine would see them."""

    __slots__ = ("devices", "specs", "problems", "engine_dropped", "crashed", "unreadable", "stopped_at", "unreached")  # noqa: RUF023 (field order)

    def __init__(
        self,
        devices: dict[str, ResolvedDevice],
        specs: list[Spec],
        problems: list[Problem],
        engine_dropped: list[Spec] | None = None,
        crashed: list[str] | None = None,
        unreadable: list[str] | None = None,
        stopped_at: str | None = None,
        unreached: dict[str, Spec] | None = None,
    ) -> None:
        self.devices = devices  # qualified name -> device, after priority and conflicts
        self.specs = specs  # every valid spec, lowest priority first
        self.problems = problems  # in scan order; the source is the spec path or dir
        # Valid specs the engine ignores: their cdiVersion is above its maximum. Their devices are
        # not in `devices`; a resolver can report them as blocked.
        self.engine_dropped = [] if engine_dropped is None else engine_dropped
        # Files the library panics on: the engine's whole load dies, so `devices` is empty.
        self.crashed = [] if crashed is None else crashed
        # Spec files and dirs cgpu could not read but an engine may (permission denied, over cgpu's
        # size cap): what they define is not known.
        self.unreadable = [] if unreadable is None else unreadable
        # Where the library's scan of the spec dirs ended early (a dir or entry whose lstat failed
        # with anything but "not found"), or None. The engine reads no later dir.
        self.stopped_at = stopped_at
        # Devices only the dirs after `stopped_at` define, with the spec that defines each: read
        # by cgpu as data, never injected by the engine (not in `devices`).
        self.unreached = {} if unreached is None else unreached

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"ScanResult({fields})"
