"""cgroups and /dev/char: the systemd cgroup driver and NVIDIA's nodes without a /dev/char link (toolkit#48)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from cgpu.engines.cgroup_driver import cgroup_driver
from cgpu.node.host import HostFS
from tests.cdi_backend.helpers import make_host, probe

LIB = "/usr/lib/x86_64-linux-gnu"
NODES = {"/dev/nvidiactl": (195, 255), "/dev/nvidia-uvm": (509, 0), "/dev/nvidia0": (195, 0)}
LIBS = [f"{LIB}/libcuda.so.580.82.07", f"{LIB}/libnvidia-ptxjitcompiler.so.580.82.07"]
HOOK = "/usr/bin/nvidia-cdi-hook"


def _spec() -> dict[str, Any]:
    """What nvidia-ctk 1.19 writes: each node with the numbers read at generation."""
    nodes = [{"path": p, "major": n[0], "minor": n[1]} for p, n in NODES.items()]
    return {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": nodes[2:]}}],
        "containerEdits": {
            "deviceNodes": nodes[:2],
            "mounts": [{"hostPath": lib, "containerPath": lib, "options": ["ro", "bind"]} for lib in LIBS],
            "hooks": [{"hookName": "createContainer", "path": HOOK, "args": [HOOK, "update-ldcache", "--folder", LIB]}],
        },
    }


def _run(tmp_path: Path, files: dict[str, str], engine: str, links: bool = False) -> dict[str, Any]:
    root = make_host(tmp_path / "root", [*NODES, *LIBS, HOOK], files=files)
    if links:
        (root / "dev/char").mkdir(parents=True)
        for path, (major, minor) in NODES.items():
            os.symlink(f"..{path.removeprefix('/dev')}", root / f"dev/char/{major}:{minor}")
    specs = root / "etc/cdi"
    specs.mkdir(parents=True)
    (specs / "nvidia.yaml").write_text(yaml.safe_dump(_spec()))
    return probe([specs], root, engine=engine)


DOCKER_SYSTEMD = {"/etc/docker/daemon.json": '{"exec-opts": ["native.cgroupdriver=systemd"]}'}


def test_systemd_driver_and_no_dev_char_links_warn(tmp_path: Path):
    report = _run(tmp_path, DOCKER_SYSTEMD, "docker@28.5.0")
    assert report["containers"] == ["cuda"]  # the container starts and works until a daemon-reload
    warning = next(p for p in report["problems"] if p["kind"] == "dev-char")
    assert warning["severity"] == "warning"
    assert "nvidia-ctk system create-dev-char-symlinks --create-all" in warning["message"]
    assert "Failed to initialize NVML: Unknown Error" in warning["message"]
    nodes = report["device_nodes"]
    assert nodes["cgroup_driver"] == {
        "engine": "docker",
        "driver": "systemd",
        "read_from": "exec-opts native.cgroupdriver=systemd in /etc/docker/daemon.json",
    }
    assert sorted(nodes["without_dev_char"]) == sorted(NODES)


def test_links_present_no_warning(tmp_path: Path):
    report = _run(tmp_path, DOCKER_SYSTEMD, "docker@28.5.0", links=True)
    assert not [p for p in report["problems"] if p["kind"] == "dev-char"]
    assert report["device_nodes"]["without_dev_char"] == []


def test_cgroupfs_driver_no_warning(tmp_path: Path):
    report = _run(tmp_path, {}, "containerd@2.1.0")
    assert not [p for p in report["problems"] if p["kind"] == "dev-char"]
    assert report["device_nodes"]["cgroup_driver"]["driver"] == "cgroupfs"


def test_podman_defaults_to_systemd(tmp_path: Path):
    report = _run(tmp_path, {}, "podman@5.4.0")
    assert report["device_nodes"]["cgroup_driver"]["read_from"] == 'podman\'s default (cgroup_manager = "systemd")'
    assert [p for p in report["problems"] if p["kind"] == "dev-char"]


def _driver(tmp_path: Path, engine: str, files: dict[str, str], paths: tuple[str, ...] = ()) -> tuple[str, str] | None:
    return cgroup_driver(engine, HostFS(str(make_host(tmp_path / "root", paths, files=files))))


def test_containerd_reads_the_default_runtimes_systemd_cgroup(tmp_path: Path):
    v2 = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "nvidia"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = false\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\nSystemdCgroup = true\n'
    )
    assert _driver(tmp_path / "a", "containerd", {"/etc/containerd/config.toml": v2}) == (
        "systemd",
        "SystemdCgroup = true in /etc/containerd/config.toml",
    )
    v3 = (
        "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\nSystemdCgroup = true\n"
    )
    assert _driver(tmp_path / "b", "containerd", {"/etc/containerd/config.toml": v3})[0] == "systemd"  # type: ignore[index]
    assert _driver(tmp_path / "c", "containerd", {"/etc/containerd/config.toml": "not [toml"})[0] == "cgroupfs"  # type: ignore[index]


def test_docker_first_exec_opt_and_cgroup_v2_default(tmp_path: Path):
    first = {
        "/etc/docker/daemon.json": '{"exec-opts": ["Native.CgroupDriver=cgroupfs", "native.cgroupdriver=systemd"]}'
    }
    assert _driver(tmp_path / "a", "docker", first)[0] == "cgroupfs"  # type: ignore[index]
    unset = make_host(tmp_path / "b", ["/sys/fs/cgroup/cgroup.controllers"])
    (unset / "run/systemd/system").mkdir(parents=True)
    assert cgroup_driver("docker", HostFS(str(unset)))[0] == "systemd"  # type: ignore[index]
    assert _driver(tmp_path / "c", "docker", {})[0] == "cgroupfs"  # type: ignore[index]


def test_podman_and_crio_last_setting_wins(tmp_path: Path):
    files = {
        "/usr/share/containers/containers.conf": '[engine]\ncgroup_manager = "systemd"\n',
        "/etc/containers/containers.conf.d/50-cgroupfs.conf": '[engine]\ncgroup_manager = "cgroupfs"\n',
    }
    found = _driver(tmp_path / "a", "podman", files)
    assert found == ("cgroupfs", 'cgroup_manager = "cgroupfs" in /etc/containers/containers.conf.d/50-cgroupfs.conf')
    crio = {"/etc/crio/crio.conf.d/10.conf": '[crio.runtime]\ncgroup_manager = "cgroupfs"\n'}
    assert _driver(tmp_path / "b", "crio", crio)[0] == "cgroupfs"  # type: ignore[index]
    assert _driver(tmp_path / "c", "crio", {})[0] == "systemd"  # type: ignore[index]
    assert _driver(tmp_path / "d", "cri-dockerd", {}) is None
