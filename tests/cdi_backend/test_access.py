"""Who may open the nodes: each API's `user_needs` from the spec's fileMode, gid and additionalGids and
the host's nodes (ROCm/ROCm-docker#116, ollama/ollama#6685: "Unable to open /dev/kfd read-write:
Permission denied"), a rootless podman's host user and keep-groups, and SELinux's device booleans
(redhat-et/triton-dev-containers#61)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from cgpu.backends.cdi import access
from cgpu.cdi.model import DeviceNode
from cgpu.node.host import HostFS
from tests.cdi_backend.helpers import HOSTS, SAMPLES, probe, spec_dir

AMD_SPEC = SAMPLES / "amd/spec"


def amd_host(tmp_path: Path, files: dict[str, str] | None = None) -> Path:
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "amd", root, symlinks=True)
    for path, text in (files or {}).items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


def intel_spec(tmp_path: Path, node: dict[str, Any], additional: list[int] | None = None) -> Path:
    """One Intel GPU whose render node entry carries `node`'s fields (fileMode, gid ...)."""
    edits: dict[str, Any] = {
        "deviceNodes": [{"path": "/dev/dri/renderD128", "type": "c", **node}],
    }
    if additional is not None:
        edits["additionalGids"] = additional
    doc = {"cdiVersion": "0.7.0", "kind": "intel.com/gpu", "devices": [{"name": "gpu0", "containerEdits": edits}]}
    return spec_dir(tmp_path, texts={"intel.json": json.dumps(doc)})


def test_amd_ctks_nodes_name_the_render_group_a_non_root_user_needs(tmp_path: Path):
    report = probe([AMD_SPEC], amd_host(tmp_path, {"/etc/group": "video:x:44:\nrender:x:992:\n"}))
    rocm = report["apis"]["rocm"]
    assert rocm["state"] == "provided"  # root in the container opens it: the API stands, the need is data
    kfd = next(n for n in rocm["user_needs"] if n["node"] == "/dev/kfd")
    assert kfd["gids"] == [992] and kfd["groups"] == ["render"]
    assert "--group-add 992" in kfd["why"] and "supplementalGroups" in kfd["why"]
    # Vulkan opens the render node only; the cardN node (group video) is never asked for
    assert {n["node"] for n in report["apis"]["vulkan"]["user_needs"]} == {"/dev/dri/renderD128", "/dev/dri/renderD129"}
    assert all(n["gids"] == [992] for n in report["apis"]["vulkan"]["user_needs"])
    assert report["apis"]["cuda"]["user_needs"] == []


def test_additional_gids_give_the_group_so_nothing_is_needed(tmp_path: Path):
    node = {"fileMode": 0o660, "gid": 993, "uid": 0}
    needed = probe([intel_spec(tmp_path / "a", node)], HOSTS / "intel")["apis"]["vulkan"]
    given = probe([intel_spec(tmp_path / "b", node, [993])], HOSTS / "intel")["apis"]["vulkan"]
    assert [n["gids"] for n in needed["user_needs"]] == [[993]]
    assert given["state"] == "provided" and given["user_needs"] == []


def test_a_world_read_writable_node_needs_nothing(tmp_path: Path):
    report = probe([intel_spec(tmp_path, {"fileMode": 0o666, "gid": 993})], HOSTS / "intel")
    assert report["apis"]["vulkan"]["user_needs"] == []


def test_a_node_only_root_may_open_has_no_group(tmp_path: Path):
    need = probe([intel_spec(tmp_path, {"fileMode": 0o600, "gid": 993})], HOSTS / "intel")["apis"]["vulkan"]
    assert [(n["gids"], "only root" in n["why"]) for n in need["user_needs"]] == [([], True)]


def test_a_spec_without_mode_or_group_on_a_placeholder_host_says_nothing():
    report = probe([SAMPLES / "intel/spec"], HOSTS / "intel")  # no fileMode, the host's node a plain file
    assert report["apis"]["vulkan"]["state"] == "provided" and report["apis"]["vulkan"]["user_needs"] == []


def _char_device(path: Path, mode: int, gid: int) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | mode, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")
    os.chown(path, 0, gid)
    os.chmod(path, mode)


def test_the_host_nodes_mode_fills_a_spec_without_file_mode(tmp_path: Path):
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "intel", root, symlinks=True)
    render = root / "dev/dri/renderD128"
    render.unlink()
    _char_device(render, 0o660, 993)
    with_gid = probe([intel_spec(tmp_path / "a", {"gid": 993})], root)["apis"]["vulkan"]["user_needs"]
    assert [n["gids"] for n in with_gid] == [[993]] and "host node's mode" in with_gid[0]["why"]
    # no gid in the spec: the CDI library gives the node the process's own uid and gid
    assert probe([intel_spec(tmp_path / "b", {})], root)["apis"]["vulkan"]["user_needs"] == []


class _Host(HostFS):
    """A host whose device nodes are the given (mode, uid, gid), read on this machine."""

    def __init__(self, owners: dict[str, tuple[int, int, int]], files: dict[str, str] | None = None) -> None:
        super().__init__("/")
        self.owners = owners
        self.files = files or {}

    def device_owner(self, path: str) -> tuple[int, int, int] | None:
        return self.owners.get(path)

    def read_small(self, path: str) -> tuple[str | None, str | None]:
        return (self.files[path], None) if path in self.files else (None, "does not exist")


KFD = DeviceNode("/dev/kfd", type="c", file_mode=0o660, gid=992)


def test_rootless_podman_needs_the_host_users_group_and_keep_groups():
    host = _Host({"/dev/kfd": (0o660, 0, 992)}, {"/etc/group": "render:x:992:\n"})
    names = access.Groups(host)
    outside = access.HostUser(1000, {1000}, None)
    need = access.node_need(KFD, set(), host, names, outside)
    assert need is not None and need["gids"] == [992] and "usermod -aG render" in need["why"]
    member = access.HostUser(1000, {1000, 992}, None)
    need = access.node_need(KFD, set(), host, names, member)
    assert need is not None and "--group-add keep-groups" in need["why"] and "is not in group" not in need["why"]
    assert access.node_need(KFD, set(), host, names, access.HostUser(1000, {992}, "containers.conf")) is None


def test_keep_groups_is_read_from_containers_conf(monkeypatch: pytest.MonkeyPatch):
    from cgpu.engines.installed import InstalledEngine

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    conf = {"/etc/containers/containers.conf": '[containers]\ngroup_add = ["keep-groups"]\n'}
    user = access.rootless_podman(InstalledEngine("podman", version="5.4.0"), _Host({}, conf))
    assert user is not None and user.keep_groups and user.keep_groups_in == "/etc/containers/containers.conf"
    assert access.rootless_podman(InstalledEngine("docker", version="28.2.0"), _Host({}, conf)) is None


def selinux_host(tmp_path: Path, booleans: dict[str, str]) -> Path:
    files = {"/sys/fs/selinux/enforce": "1"}
    files.update({f"/sys/fs/selinux/booleans/{name}": value for name, value in booleans.items()})
    return amd_host(tmp_path, files)


def test_selinux_enforcing_without_container_use_devices_makes_rocm_unknown(tmp_path: Path):
    booleans = {"container_use_devices": "0 0", "container_use_dri_devices": "1 1"}
    report = probe([AMD_SPEC], selinux_host(tmp_path, booleans))
    rocm = report["apis"]["rocm"]
    assert rocm["state"] == "unknown" and "rocm" not in report["containers"]
    evidence = report["evidence"]["rocm"]
    assert "/dev/kfd" in evidence and "--security-opt label=disable" in evidence
    assert "setsebool -P container_use_devices 1" in evidence
    assert report["apis"]["vulkan"]["state"] == "provided"  # the render node: container_use_dri_devices is on
    assert any("SELinux is enforcing" in p["message"] for p in report["problems"])


def test_selinux_with_the_boolean_on_changes_nothing(tmp_path: Path):
    report = probe([AMD_SPEC], selinux_host(tmp_path, {"container_use_devices": "1 1"}))
    assert report["containers"] == ["rocm", "vulkan", "opencl"]


def test_selinux_permissive_changes_nothing(tmp_path: Path):
    root = amd_host(tmp_path, {"/sys/fs/selinux/enforce": "0", "/sys/fs/selinux/booleans/container_use_devices": "0 0"})
    assert probe([AMD_SPEC], root)["containers"] == ["rocm", "vulkan", "opencl"]


def test_a_node_copy_without_selinuxfs_is_judged_by_its_config(tmp_path: Path):
    root = amd_host(tmp_path, {"/etc/selinux/config": "SELINUX=enforcing\nSELINUXTYPE=targeted\n"})
    report = probe([AMD_SPEC], root)
    assert report["apis"]["rocm"]["state"] == "unknown" and "/etc/selinux/config" in report["evidence"]["rocm"]
