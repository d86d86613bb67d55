"""Host paths are looked up inside --root: symlinks resolve there, nothing escapes it."""

from __future__ import annotations

import os
from pathlib import Path

from cgpu.node.host import HostFS
from tests.cdi_backend.helpers import make_host


def test_absolute_symlink_resolves_inside_the_root(tmp_path: Path):
    root = make_host(tmp_path / "root", ["/usr/lib/libcuda.so.1"])
    os.symlink("/usr/lib", root / "lib64")  # absolute: means <root>/usr/lib, never the real /usr/lib
    host = HostFS(str(root))
    assert host.exists("/lib64/libcuda.so.1")
    assert not host.exists("/lib64/libc.so.6")


def test_nothing_escapes_the_root(tmp_path: Path):
    outside = tmp_path / "secret"
    outside.write_text("x")
    root = make_host(tmp_path / "root", ["/etc/hostname"])
    os.symlink("../../secret", root / "etc" / "escape")
    os.symlink(str(outside), root / "abs-escape")
    host = HostFS(str(root))
    assert not host.exists("/../secret")
    assert not host.exists("/etc/escape")  # `..` stops at the root: <root>/secret does not exist
    assert not host.exists("/abs-escape")  # an absolute target is re-rooted
    assert host.read_small("/etc/escape")[0] is None


def test_symlink_loops_end(tmp_path: Path):
    root = make_host(tmp_path / "root")
    os.symlink("b", root / "a")
    os.symlink("a", root / "b")
    os.symlink("loop/x", root / "loop")
    host = HostFS(str(root))
    assert not host.exists("/a") and not host.exists("/loop/x/y")


def test_driver_version_and_render_vendor(tmp_path: Path):
    root = make_host(
        tmp_path / "root",
        files={
            "/proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.82.07  "
            "Release Build  (dvs-builder@U22)  Wed Sep  3 20:05:39 UTC 2025\n"
        },
        render={"renderD128": "0x10DE", "renderD129": "garbage"},
    )
    host = HostFS(str(root))
    assert host.nvidia_driver_version() == ("580.82.07", "/proc/driver/nvidia/version")
    assert host.render_node_vendor("renderD128") == "0x10de"
    assert host.render_node_vendor("renderD129") is None
    only_module = make_host(tmp_path / "module", files={"/sys/module/nvidia/version": "575.64.03\n"})
    assert HostFS(str(only_module)).nvidia_driver_version() == ("575.64.03", "/sys/module/nvidia/version")


def test_oversized_and_undecodable_files(tmp_path: Path):
    root = make_host(tmp_path / "root")
    (root / "big").write_bytes(b"x" * (1 << 20))
    (root / "bytes").write_bytes(b"\xff\xfe{")
    host = HostFS(str(root))
    assert host.read_small("/big") == (None, "is larger than 65536 bytes")
    assert host.read_json("/bytes")[0] is None
