"""Device identity: the numbers a spec pins for a node against the host's device (docs/cdi.md "Device identity")."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cgpu.backends.cdi import answer_scan
from cgpu.node.host import HostFS, parse_proc_devices
from cgpu.report import ReportBuilder
from tests.cdi_backend.build import scan, spec
from tests.cdi_backend.helpers import make_host
from tests.conftest import validate_report

LIB = "/usr/lib/x86_64-linux-gnu"
HOOK = "/usr/bin/nvidia-cdi-hook"
LIBS = [f"{LIB}/libcuda.so.580.82.07", f"{LIB}/libnvidia-ptxjitcompiler.so.580.82.07"]
# What nvidia-ctk 1.19 writes for a host whose nvidia-uvm had major 510 at generation: no type.
PINNED = {
    "/dev/nvidiactl": (195, 255),
    "/dev/nvidia-uvm": (510, 0),
    "/dev/nvidia-uvm-tools": (510, 1),
    "/dev/nvidia0": (195, 0),
}
PROC_DEVICES = "Character devices:\n  1 mem\n195 nvidia\n226 drm\n509 nvidia-uvm\n\nBlock devices:\n  8 sd\n"


def _doc(nodes: dict[str, tuple[int, int]], node_type: str | None = None) -> dict[str, Any]:
    def entry(path: str, numbers: tuple[int, int]) -> dict[str, Any]:
        node: dict[str, Any] = {"path": path, "major": numbers[0], "minor": numbers[1]}
        if node_type:
            node["type"] = node_type
        return node

    return {
        "cdiVersion": "0.7.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [entry("/dev/nvidia0", nodes["/dev/nvidia0"])]}}],
        "containerEdits": {
            "deviceNodes": [entry(p, n) for p, n in nodes.items() if p != "/dev/nvidia0"],
            "mounts": [{"hostPath": lib, "containerPath": lib, "options": ["ro", "bind"]} for lib in LIBS],
            "hooks": [
                {
                    "hookName": "createContainer",
                    "path": HOOK,
                    "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", LIB],
                }
            ],
        },
    }


def _mknod(root: Path, path: str, major: int, minor: int) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("making a character device node needs CAP_MKNOD")


def _host(tmp_path: Path, nodes: dict[str, tuple[int, int]] | None, files: dict[str, str] | None = None) -> Path:
    """A host tree with the libraries and hook; device nodes made with these numbers (None: stand-in files)."""
    root = make_host(tmp_path / "root", [*LIBS, HOOK], files=files)
    if nodes is None:
        make_host(root, list(PINNED))
    else:
        for path, (major, minor) in nodes.items():
            _mknod(root, path, major, minor)
    return root


def _answer(doc: dict[str, Any], root: Path) -> dict[str, Any]:
    report = ReportBuilder("cdi")
    answer_scan(report, scan(spec(doc)), HostFS(str(root)))
    built = report.build()
    validate_report(built)
    return built


def test_uvm_pinned_to_an_old_major_gives_no_cuda(tmp_path: Path):
    """toolkit#1934/#1967: the spec says 510:0, the host's nvidia-uvm is 509:0 after a reboot."""
    root = _host(tmp_path, {**PINNED, "/dev/nvidia-uvm": (509, 0), "/dev/nvidia-uvm-tools": (509, 1)})
    report = _answer(_doc(PINNED), root)
    assert "cuda" not in report["containers"]
    evidence = report["evidence"]["cuda"]
    assert "the spec pins /dev/nvidia-uvm to 510:0, the host has 509:0" in evidence
    assert "cuInit fails with error 999" in evidence and "nvidia-ctk cdi generate" in evidence
    problems = [p for p in report["problems"] if p["kind"] == "device-identity"]
    assert len(problems) == 1 and "/dev/nvidia-uvm-tools to 510:1, the host has 509:1" in problems[0]["message"]
    wrong = report["device_nodes"]["wrong_numbers"]
    assert {w["path"] for w in wrong} == {"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    uvm = next(w for w in wrong if w["path"] == "/dev/nvidia-uvm")
    assert uvm["spec"] == {"type": "c", "major": 510, "minor": 0}
    assert uvm["host"] == {"type": "c", "major": 509, "minor": 0}
    assert uvm["read_from"].startswith("st_rdev of ")


def test_numbers_that_match_the_host_give_cuda(tmp_path: Path):
    report = _answer(_doc(PINNED), _host(tmp_path, PINNED))
    assert report["containers"] == ["cuda"]
    assert report["device_nodes"] == {"wrong_numbers": []}
    assert not [p for p in report["problems"] if p["kind"] == "device-identity"]


def test_wrong_minor_of_the_gpu_node_is_caught(tmp_path: Path):
    root = _host(tmp_path, {**PINNED, "/dev/nvidia0": (195, 1)})
    report = _answer(_doc(PINNED), root)
    assert "cuda" not in report["containers"]
    assert "the spec pins /dev/nvidia0 to 195:0, the host has 195:1" in report["evidence"]["cuda"]


def test_a_wrong_uvm_tools_alone_costs_no_api(tmp_path: Path):
    """No rule uses nvidia-uvm-tools: the problem says it, the findings do not move."""
    root = _host(tmp_path, {**PINNED, "/dev/nvidia-uvm-tools": (195, 7)})
    report = _answer(_doc(PINNED), root)
    assert report["containers"] == ["cuda"]
    assert [w["path"] for w in report["device_nodes"]["wrong_numbers"]] == ["/dev/nvidia-uvm-tools"]


def test_stand_in_files_are_not_judged(tmp_path: Path):
    """A test tree or a copied root holds regular files for nodes: their numbers are unknown, never wrong."""
    report = _answer(_doc(PINNED), _host(tmp_path, None, files={"/proc/devices": PROC_DEVICES}))
    assert report["containers"] == ["cuda"]
    assert report["device_nodes"] == {"wrong_numbers": []}


def test_absent_node_checked_against_proc_devices(tmp_path: Path):
    """A fully specified node the host lacks is made by the engine from the spec's numbers: the driver's major in
    /proc/devices says whether they reach it."""
    nodes = {p: n for p, n in PINNED.items() if p != "/dev/nvidia-uvm"}
    root = _host(tmp_path, nodes, files={"/proc/devices": PROC_DEVICES})
    report = _answer(_doc(PINNED, node_type="c"), root)
    wrong = report["device_nodes"]["wrong_numbers"]
    assert wrong == [
        {
            "path": "/dev/nvidia-uvm",
            "spec": {"type": "c", "major": 510, "minor": 0},
            "host": {"type": "c", "major": 509, "minor": 0},
            "read_from": "/proc/devices (nvidia-uvm)",
        }
    ]


def test_type_pinned_differently_is_wrong(tmp_path: Path):
    root = _host(tmp_path, PINNED)
    report = _answer(_doc(PINNED, node_type="b"), root)
    assert report["containers"] == []
    assert "the spec pins /dev/nvidia-uvm to b 510:0, the host has c 510:0" in report["evidence"]["cuda"]


def test_missing_control_node_is_created_not_regenerated(tmp_path: Path):
    root = _host(tmp_path, {p: n for p, n in PINNED.items() if p != "/dev/nvidia-uvm"})
    report = _answer(_doc(PINNED), root)
    missing = [p for p in report["problems"] if p["kind"] == "missing-host-files"]
    assert missing and "nvidia-ctk system create-device-nodes --control-devices" in missing[0]["message"]
    assert "regenerating the spec does not make it" in missing[0]["message"]


def test_proc_devices_parsed():
    majors = parse_proc_devices(PROC_DEVICES)
    assert majors["c"]["nvidia-uvm"] == 509 and majors["c"]["drm"] == 226 and majors["b"] == {"sd": 8}


@given(st.text(max_size=300))
def test_proc_devices_parser_takes_any_text(text: str):
    majors = parse_proc_devices(text)
    assert set(majors) == {"c", "b"}
    for section in majors.values():
        assert all(isinstance(v, int) and v >= 0 and name and " " not in name[:1] for name, v in section.items())
