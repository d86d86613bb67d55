"""Who may open the device nodes a container gets (docs/cdi.md "Who may open the nodes"): each API's
`user_needs`, what a rootless podman's user must hold on the host, and SELinux's device booleans.

A node is made in the container by runc/crun from the spec's entry after the CDI library's fill-in:
`fileMode` defaults to the host node's mode (container-edits_unix.go `fillMissingInfo`); `uid`/`gid`
are never taken from the host, and where the spec leaves them unset the library gives the node the
container process's own uid and gid when they are not 0 (container-edits.go `Apply`). So the spec's
`gid` decides who may open a node that is not world-read-writable, and the spec's `additionalGids`
give every process of the container that group. A rootless engine cannot make nodes: it bind-mounts
the host's, whose owner and mode hold, and its processes act as the host user, who keeps its groups
only with podman's `--group-add keep-groups`.
"""

from __future__ import annotations

import os
import posixpath

from cgpu.backends.cdi.device import APIS, DeviceAnswer
from cgpu.backends.cdi.memory import Kept, fresh
from cgpu.backends.cdi.rules import CTL, DXG, KFD, NVIDIA_GPU_NODE, NVMAP, PROVIDED, RENDER_NODE, TEGRA_GPU_NODES, UVM
from cgpu.cdi.model import DeviceNode
from cgpu.node.host import HostFS
from cgpu.report import ReportBuilder

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

    from cgpu.engines.installed import InstalledEngine

MAX_NEEDS = 64  # node entries per API
_NO_GIDS: set[int] = set()  # shared by every device whose edits add no gid; never mutated
MAX_DEVICES = 8  # distinct devices per API whose nodes are read: a node's GPUs share their groups
WORLD_RW, GROUP_RW, OWNER_RW = 0o006, 0o060, 0o600
NVIDIA_CONTROL = frozenset({CTL, UVM, NVMAP, *TEGRA_GPU_NODES})  # NVIDIA's nodes other than /dev/nvidiaN
KEEP_GROUPS = "keep-groups"
SELINUX = "/sys/fs/selinux"
SELINUX_CONFIG = "/etc/selinux/config"
# container-selinux's booleans that let container_t open a node, by the node's usual label: DRM nodes
# (dri_device_t: container_use_dri_devices, on by default since container-selinux PR #289), NVIDIA's
# (xserver_misc_device_t: container_use_xserver_devices, PR #306), any device (container_use_devices).
ANY_DEVICE = "container_use_devices"
DRI_DEVICES = "container_use_dri_devices"
XSERVER_DEVICES = "container_use_xserver_devices"


_Classes = tuple[list[str], list[str], list[str], list[str]]  # NVIDIA's, /dev/dxg, render nodes, /dev/kfd


def node_classes(paths: list[str]) -> _Classes:
    """(NVIDIA's nodes, /dev/dxg, render nodes, /dev/kfd) among a container's node paths."""
    nvidia: list[str] = []
    dxg: list[str] = []
    renders: list[str] = []
    kfd: list[str] = []
    for path in paths:
        if path in NVIDIA_CONTROL or NVIDIA_GPU_NODE.fullmatch(path):
            nvidia.append(path)
        elif path == DXG:
            dxg.append(path)
        elif path == KFD:
            kfd.append(path)
        elif RENDER_NODE.fullmatch(path):
            renders.append(path)
    return nvidia, dxg, renders, kfd


def api_nodes(classes: _Classes, api: str) -> list[str]:
    """The nodes of one device's container that `api` opens: NVIDIA's (or /dev/dxg) where it has them,
    else the render nodes, with /dev/kfd for ROCm and AMD's OpenCL; cardN nodes are never needed."""
    nvidia, dxg, renders, kfd = classes
    if api == "directml":
        return dxg
    if api == "cuda":
        return nvidia + dxg
    if api == "rocm":
        return kfd + renders
    if nvidia or dxg:
        return nvidia + dxg
    return renders + kfd if api == "opencl" else renders


class HostUser:
    """The host user a rootless podman on this host runs as: its uid and groups, and whether
    containers.conf keeps its groups (`[containers] group_add = ["keep-groups"]`)."""

    __slots__ = ("gids", "keep_groups", "keep_groups_in", "uid")

    def __init__(self, uid: int, gids: set[int], keep_groups_in: str | None) -> None:
        self.uid = uid
        self.gids = gids
        self.keep_groups_in = keep_groups_in  # the containers.conf that sets it, or None
        self.keep_groups = keep_groups_in is not None


def rootless_podman(entry: InstalledEngine | None, host: HostFS) -> HostUser | None:
    """This host's user where the judging engine is podman run by a user other than root here (podman
    runs rootless exactly then); None under --root, where the user who will run it is not known."""
    if entry is None or entry.name != "podman" or not host.real_root or os.geteuid() == 0:
        return None
    from cgpu.engines.podman import user_config_dir
    from cgpu.engines.podman_files import config_sources

    keep = None
    for _, path in config_sources(host.listdir, user_dir=user_config_dir(), rootless=True):
        value = _group_add(host, path)
        if value is not None:  # a later file's setting replaces an earlier one's
            keep = path if KEEP_GROUPS in value else None
    return HostUser(os.geteuid(), set(os.getgroups()) | {os.getegid()}, keep)


def _group_add(host: HostFS, path: str) -> list[str] | None:
    """`[containers] group_add` of one containers.conf, or None where the file does not set it."""
    from cgpu.engines.config import parse_toml

    text, _ = host.read_small(path)
    if text is None:
        return None
    try:
        document = parse_toml(text)
    except ValueError:  # podman's own reader reports it: this answer only needs the setting
        return None
    containers = document.get("containers")
    value = containers.get("group_add") if isinstance(containers, dict) else None
    return [str(v) for v in value] if isinstance(value, list) else None


def group_names(host: HostFS) -> dict[int, str]:
    """The host's /etc/group: gid -> name (the first name of a gid)."""
    text, _ = host.read_small("/etc/group")
    names: dict[int, str] = {}
    for line in (text or "").splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2].isascii() and fields[2].isdigit():
            names.setdefault(int(fields[2]), fields[0])
    return names


def _mode_text(mode: int) -> str:
    return f"0{mode:o}"


def node_need(
    node: DeviceNode, additional: set[int], host: HostFS, groups: Groups, user: HostUser | None
) -> dict[str, Any] | None:
    """What the container's user must hold to open `node` read-write (a `user_needs` entry), or None
    where nothing is needed or cgpu cannot tell (no mode in the spec, no device node on the host)."""
    if user is not None:  # rootless: the host's node, bind-mounted, opened as the host user
        return _rootless_need(node.path, host.device_owner(node.host_path or node.path), groups.names, user)
    if node.uid is None and node.gid is None:  # Apply makes it the process's own (root's, for root)
        return None
    if node.file_mode is not None:
        mode: int | None = node.file_mode & 0o777
    else:
        owner = host.device_owner(node.host_path or node.path)
        mode = owner[0] if owner else None
    if mode is None or mode & WORLD_RW == WORLD_RW:
        return None
    where = "the spec's fileMode" if node.file_mode is not None else "the host node's mode, as the CDI library fills it"
    if node.gid is None:
        if mode & OWNER_RW == OWNER_RW or mode & GROUP_RW == GROUP_RW:  # Apply: the process's own uid and gid
            return None
        return _need(node.path, [], {}, f"its mode {_mode_text(mode)} ({where}) lets only root open it")
    if node.gid in additional:
        return None
    if mode & GROUP_RW != GROUP_RW:
        return _need(node.path, [], {}, f"its mode {_mode_text(mode)} ({where}) lets only root open it")
    names = groups.names
    group = names.get(node.gid)
    named = f"{group} ({node.gid})" if group else str(node.gid)
    return _need(
        node.path,
        [node.gid],
        names,
        f"the spec makes it group {node.gid} with mode {_mode_text(mode)} ({where}) and gives no additionalGids "
        f"for it: a non-root user needs group {named}, e.g. `--group-add {node.gid}` (docker, podman) or the "
        f"pod's securityContext.supplementalGroups: [{node.gid}]",
    )


def _rootless_need(
    path: str, owner: tuple[int, int, int] | None, names: dict[int, str], user: HostUser
) -> dict[str, Any] | None:
    if owner is None:
        return None
    mode, uid, gid = owner
    if mode & WORLD_RW == WORLD_RW or (uid == user.uid and mode & OWNER_RW == OWNER_RW):
        return None
    group = names.get(gid, str(gid))
    if mode & GROUP_RW != GROUP_RW or gid not in user.gids:
        why = (
            f"rootless podman bind-mounts the host's node (mode {_mode_text(mode)}, group {group}) and opens it as "
            f"the host user {user.uid}, who is not in group {group}: add that user to it (`usermod -aG {group}`) and "
            f"run with `--group-add keep-groups`"
        )
    elif not user.keep_groups:
        why = (
            f"rootless podman bind-mounts the host's node (mode {_mode_text(mode)}, group {group}) and opens it as "
            f"the host user, whose group {group} the container keeps only with `--group-add keep-groups` (crun; "
            f'or group_add = ["keep-groups"] in containers.conf)'
        )
    else:
        return None  # the user holds the group and containers.conf keeps it
    return _need(path, [gid], names, why)


def _need(path: str, gids: list[int], names: dict[int, str], why: str) -> dict[str, Any]:
    return {"node": path, "gids": gids, "groups": [names[g] for g in gids if g in names], "why": why}


class _Devices:
    """The first few distinct devices that give each API, and each one's nodes by path and the gids its
    spec adds (read once per device however many APIs ask)."""

    __slots__ = ("_answers", "_nodes", "_owned", "_specs")

    def __init__(self, answers: list[DeviceAnswer]) -> None:
        self._answers = answers
        self._nodes: dict[int, tuple[dict[str, DeviceNode], dict[str, DeviceNode], set[int], _Classes]] = {}
        self._specs: dict[int, tuple[dict[str, DeviceNode], _Classes]] = {}
        self._owned: dict[int, bool] = {}  # per edits object: whether a node of it has a uid or gid

    def giving(self, api: str) -> list[DeviceAnswer]:
        """Up to MAX_DEVICES distinct devices a container can start with that give `api`: a node's GPUs
        share their nodes' groups, and a spec of 20,000 claim devices is not read again per probe."""
        found: list[DeviceAnswer] = []
        seen: set[int] = set()
        for answer in self._answers:
            if answer.missing or answer.findings[api].state != PROVIDED or id(answer.same) in seen:
                continue
            seen.add(id(answer.same))
            found.append(answer)
            if len(found) == MAX_DEVICES:
                break
        return found

    def owned(self, answer: DeviceAnswer) -> bool:
        """Whether a node of the device's container (its own or its spec's) has a uid or gid: without
        one, a root engine's nodes belong to the container's own user (nvidia-ctk before 1.19, amd-ctk)."""
        spec, own = answer.device.spec.edits, answer.device.device.edits
        for edits in (spec, own):
            found = self._owned.get(id(edits))
            if found is None:
                found = self._owned[id(edits)] = any(n.uid is not None or n.gid is not None for n in edits.device_nodes)
            if found:
                return True
        return False

    def nodes(self, answer: DeviceAnswer) -> tuple[dict[str, DeviceNode], dict[str, DeviceNode], set[int], _Classes]:
        """The device's own nodes and its spec's by container path (its own win), the gids its edits add,
        and its node paths by kind; the spec's part read once for all its devices."""
        known = self._nodes.get(id(answer.same))
        if known is None:
            spec, own = answer.device.spec, answer.device.device.edits
            shared = self._specs.get(id(spec))
            if shared is None:
                spec_nodes = {_clean(n.path): n for n in spec.edits.device_nodes}
                shared = self._specs[id(spec)] = (spec_nodes, node_classes(list(spec_nodes)))
            spec_nodes, classes = shared
            mine = {_clean(n.path): n for n in own.device_nodes}
            if mine:
                added = node_classes([path for path in mine if path not in spec_nodes])
                classes = (classes[0] + added[0], classes[1] + added[1], classes[2] + added[2], classes[3] + added[3])
            additional = (
                {*spec.edits.additional_gids, *own.additional_gids}
                if spec.edits.additional_gids or own.additional_gids
                else _NO_GIDS
            )
            known = self._nodes[id(answer.same)] = (mine, spec_nodes, additional, classes)
        return known


def _clean(path: str) -> str:
    """A node's container path as the view keys it (normpath only where it changes something)."""
    return path if "//" not in path and "/." not in path and not path.endswith("/") else posixpath.normpath(path)


class Groups:
    """The host's /etc/group, read the first time a node needs a group named."""

    __slots__ = ("_host", "_names")

    def __init__(self, host: HostFS) -> None:
        self._host = host
        self._names: dict[int, str] | None = None

    @property
    def names(self) -> dict[int, str]:
        if self._names is None:
            self._names = group_names(self._host)
        return self._names


def user_needs(
    devices: _Devices,
    giving: list[DeviceAnswer],
    api: str,
    host: HostFS,
    groups: Groups,
    user: HostUser | None,
    known: dict[tuple[int, int], dict[str, Any] | None],
) -> list[dict[str, Any]]:
    """What the container's user must hold for each node `api` opens in the devices `giving` it.
    `known`: each (node, added gids) pair's need, worked out once for every device and API that share it."""
    needs: dict[str, dict[str, Any]] = {}
    for answer in giving:
        if user is None and not devices.owned(answer):  # `node_need` is None for each of its nodes
            continue
        mine, spec_nodes, additional, classes = devices.nodes(answer)
        for path in api_nodes(classes, api):
            if path in needs:
                continue
            node = mine.get(path) or spec_nodes[path]
            key = (id(node), id(additional))
            if key in known:
                need = known[key]
            else:
                need = known[key] = node_need(node, additional, host, groups, user)
            if need is not None:
                needs[path] = need
    return list(needs.values())[:MAX_NEEDS]


# --- SELinux -------------------------------------------------------------------------------------


def _boolean(host: HostFS, name: str) -> bool | None:
    """A SELinux boolean's current value (`/sys/fs/selinux/booleans/NAME` holds "current pending")."""
    text, _ = host.read_small(f"{SELINUX}/booleans/{name}")
    value = (text or "").split()[:1]
    return None if value not in (["0"], ["1"]) else value == ["1"]


def selinux_enforcing(host: HostFS) -> str | None:
    """Where SELinux is enforcing on the node, the file that says so; None otherwise. Without selinuxfs
    on this host SELinux is off; under --root a node copy may lack /sys, and its config decides."""
    text, _ = host.read_small(f"{SELINUX}/enforce")
    if text is not None:
        return f"{SELINUX}/enforce" if text.strip() == "1" else None
    if host.real_root:
        return None
    config, _ = host.read_small(SELINUX_CONFIG)
    for line in (config or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SELINUX" and value.strip().strip("\"'").lower() == "enforcing":
            return SELINUX_CONFIG
    return None


def _booleans_for(path: str) -> tuple[str, ...]:
    if path.startswith("/dev/dri/"):
        return (DRI_DEVICES, ANY_DEVICE)
    if path.startswith("/dev/nvidia"):
        return (XSERVER_DEVICES, ANY_DEVICE)
    return (ANY_DEVICE,)


def selinux_blocked(host: HostFS, nodes: list[str]) -> list[str]:
    """The nodes no boolean lets container_t open (where SELinux enforces)."""
    return [p for p in nodes if not any(_boolean(host, b) for b in _booleans_for(p))]


def report_access(
    report: ReportBuilder,
    answers: list[DeviceAnswer],
    host: HostFS,
    entry: InstalledEngine | None,
    *,
    quiet: bool,
    kept: Kept,
) -> None:
    """Each provided API's `user_needs`; one whose nodes a rootless user cannot open is absent, and one
    whose nodes SELinux keeps from the container domain is unknown, with the fix. `kept`: as the last
    probe found them, where its answers, provided APIs and user were these."""
    user = rootless_podman(entry, host)
    provided = tuple(api for api in APIS if report.state(api) == PROVIDED)
    who = None if user is None else (user.uid, frozenset(user.gids), user.keep_groups_in)
    needs, verdicts, denied, enforcing = kept.get(
        "access", (provided, who), lambda: _access(answers, provided, host, user)
    )
    for api, items in needs.items():
        report.user_needs[api] = fresh(items)
    for api, state, text in verdicts:
        (report.absent if state == "absent" else report.unknown)(api, text)
    if denied and not quiet:
        report.problem(
            "warning",
            str(enforcing),
            f"SELinux is enforcing and {ANY_DEVICE} is off or unreadable, so a container may be denied "
            f'{", ".join(denied)} (NVML\'s "Insufficient Permissions", "Permission denied"): run it with '
            f"`--security-opt label=disable` or set `setsebool -P {ANY_DEVICE} 1`",
        )


if TYPE_CHECKING:
    # What `report_access` puts in a report: each API's user_needs, the APIs it makes absent or unknown
    # (api, state, evidence), the nodes SELinux may deny and the file that says it is enforcing.
    _Access = tuple[dict[str, list[dict[str, Any]]], list[tuple[str, str, str]], list[str], str | None]


def _access(answers: list[DeviceAnswer], provided: tuple[str, ...], host: HostFS, user: HostUser | None) -> _Access:
    enforcing = selinux_enforcing(host)
    devices = _Devices(answers)
    groups = Groups(host)
    all_needs: dict[str, list[dict[str, Any]]] = {}
    verdicts: list[tuple[str, str, str]] = []
    denied: dict[str, None] = {}
    known: dict[tuple[int, int], dict[str, Any] | None] = {}
    for api in provided:
        giving = devices.giving(api)
        if not giving:
            continue
        needs = all_needs[api] = user_needs(devices, giving, api, host, groups, user, known)
        barred = [n for n in needs if "is not in group" in n["why"]] if user is not None else []
        if barred:
            verdicts.append((api, "absent", f"not provided: {barred[0]['node']} is not open to it: {barred[0]['why']}"))
            continue
        if enforcing is None:
            continue
        first = giving[0]
        paths = selinux_blocked(host, api_nodes(devices.nodes(first)[3], api))
        if paths:
            denied.update(dict.fromkeys(paths))
            verdicts.append(
                (
                    api,
                    "unknown",
                    f"unknown: {first.name} gives {api} through {', '.join(paths)}, but SELinux is enforcing "
                    f"({enforcing}) and no boolean lets the container domain open "
                    f"{'them' if len(paths) > 1 else 'it'} ({ANY_DEVICE} is off or unreadable): run with "
                    f"`--security-opt label=disable` or `setsebool -P {ANY_DEVICE} 1`",
                )
            )
    return all_needs, verdicts, list(denied), enforcing
