"""Which cgroup driver an engine's containers get, `systemd` or `cgroupfs`: the one setting, read from the
engine's own configuration under the root (docs/cdi.md "cgroups and /dev/char"). With systemd, runc hands
the container's device rules to systemd as DeviceAllow entries, which name a device by its
/dev/char/MAJOR:MINOR link, and systemd applies them again on every `systemctl daemon-reload`.

- containerd: `SystemdCgroup` in the default runtime's options (`default_runtime_name`, default `runc`),
  under `plugins."io.containerd.grpc.v1.cri".containerd` (config version 2) or
  `plugins."io.containerd.cri.v1.runtime".containerd` (version 3); false by default (containerd
  CRI configuration guide, `cri/config.md` of its docs, "Cgroup Driver").
- Docker: `native.cgroupdriver` among daemon.json's `exec-opts`; unset, systemd where the host has
  cgroup v2 and systemd runs (moby `daemon/daemon_unix.go`, `UsingSystemd`), else cgroupfs.
- podman: `[engine] cgroup_manager` of containers.conf and its .d dirs, a later file winning; default
  `systemd` (containers/common `pkg/config/containers.conf`).
- CRI-O: `[crio.runtime] cgroup_manager` of crio.conf and crio.conf.d; default `systemd` (crio.conf(5)).
"""

from __future__ import annotations

import json
import posixpath

from cgpu.errors import CgpuValueError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

    from cgpu.node.host import HostFS

SYSTEMD, CGROUPFS = "systemd", "cgroupfs"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
DOCKER_CONFIG = "/etc/docker/daemon.json"
PODMAN_FILES = ("/usr/share/containers/containers.conf", "/etc/containers/containers.conf")
PODMAN_DROP_INS = ("/usr/share/containers/containers.conf.d", "/etc/containers/containers.conf.d")
CRIO_FILES = ("/etc/crio/crio.conf",)
CRIO_DROP_INS = ("/etc/crio/crio.conf.d",)
_CRI_PLUGINS = ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")


def cgroup_driver(engine: str, host: HostFS) -> tuple[str, str] | None:
    """(driver, where it comes from) for the engine named as the report names it; None for an engine
    cgpu does not read this of (cri-dockerd runs Docker's)."""
    reader = {"containerd": _containerd, "docker": _docker, "podman": _podman, "crio": _crio}.get(engine)
    return reader(host) if reader is not None else None


def _toml(host: HostFS, path: str) -> dict[str, Any] | None:
    from cgpu.engines.config import parse_toml

    text, _ = host.read_small(path)
    if text is None:
        return None
    try:
        return parse_toml(text)
    except CgpuValueError:
        return None  # the engine's own reader reports a broken file


def _get(document: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(document, dict):
            return None
        document = document.get(key)
    return document


def _containerd(host: HostFS) -> tuple[str, str]:
    document = _toml(host, CONTAINERD_CONFIG) or {}
    for plugin in _CRI_PLUGINS:
        section = _get(document, "plugins", plugin, "containerd")
        if not isinstance(section, dict):
            continue
        runtime = section.get("default_runtime_name") or "runc"
        value = _get(section, "runtimes", str(runtime), "options", "SystemdCgroup")
        if isinstance(value, bool):
            return (SYSTEMD if value else CGROUPFS), f"SystemdCgroup = {str(value).lower()} in {CONTAINERD_CONFIG}"
    return CGROUPFS, "containerd's default (SystemdCgroup = false)"


def _docker(host: HostFS) -> tuple[str, str]:
    text, _ = host.read_small(DOCKER_CONFIG)
    try:
        document = json.loads(text) if text is not None else {}
    except ValueError:
        document = {}
    options = document.get("exec-opts") if isinstance(document, dict) else None
    for option in options if isinstance(options, list) else []:  # the first one counts (moby `getCD`)
        key, _, value = str(option).partition("=")
        if key.strip().lower() == "native.cgroupdriver":
            if value.strip() in (SYSTEMD, CGROUPFS):
                return value.strip(), f"exec-opts native.cgroupdriver={value.strip()} in {DOCKER_CONFIG}"
            break
    unified = host.exists("/sys/fs/cgroup/cgroup.controllers")
    booted = host.is_dir("/run/systemd/system")
    if unified and booted:
        return SYSTEMD, "Docker's default on a cgroup v2 host run by systemd (no native.cgroupdriver in exec-opts)"
    return CGROUPFS, "Docker's default without cgroup v2 and systemd (no native.cgroupdriver in exec-opts)"


def _last_setting(
    host: HostFS, files: tuple[str, ...], drop_ins: tuple[str, ...], *keys: str
) -> tuple[str, str] | None:
    """The value of `keys` in the last of these TOML files (then each drop-in dir's *.conf, by name) to set it."""
    found = None
    paths = [*files, *(posixpath.join(d, n) for d in drop_ins for n in host.listdir(d) if n.endswith(".conf"))]
    for path in paths:
        value = _get(_toml(host, path), *keys)
        if value in (SYSTEMD, CGROUPFS):
            found = (str(value), f'{keys[-1]} = "{value}" in {path}')
    return found


def _podman(host: HostFS) -> tuple[str, str]:
    found = _last_setting(host, PODMAN_FILES, PODMAN_DROP_INS, "engine", "cgroup_manager")
    return found or (SYSTEMD, 'podman\'s default (cgroup_manager = "systemd")')


def _crio(host: HostFS) -> tuple[str, str]:
    found = _last_setting(host, CRIO_FILES, CRIO_DROP_INS, "crio", "runtime", "cgroup_manager")
    return found or (SYSTEMD, 'CRI-O\'s default (cgroup_manager = "systemd")')
