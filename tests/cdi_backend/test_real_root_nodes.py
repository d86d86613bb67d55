"""Device identity and /dev/char on a real Debian root (mmdebstrap's, tests/nodes/roots.py): its nodes are
stand-in files, never judged wrong; its podman's own containers.conf leaves the cgroup manager at systemd."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cdi_backend.helpers import probe
from tests.nodes import roots

pytestmark = pytest.mark.slow

# The numbers nvidia-ctk 1.19 and later write beside each node (read on the host at generation).
NUMBERS = {"/dev/nvidiactl": (195, 255), "/dev/nvidia-uvm": (509, 0), "/dev/nvidia-uvm-tools": (509, 1)}


def _pin(node: Path) -> None:
    """The spec as nvidia-ctk 1.19+ writes it: each node with its major and minor."""
    path = roots.inside(node, "/etc/cdi/nvidia.yaml")
    spec: dict[str, Any] = yaml.safe_load(path.read_text())
    for edits in [spec.get("containerEdits") or {}, *(d["containerEdits"] for d in spec["devices"])]:
        for entry in edits.get("deviceNodes") or ():
            name = entry["path"].removeprefix("/dev/nvidia")
            major, minor = NUMBERS.get(entry["path"], (195, int(name) if name.isdigit() else 0))
            entry.update(major=major, minor=minor)
    roots.place(node, "/etc/cdi/nvidia.yaml", yaml.safe_dump(spec))


def test_stand_in_nodes_on_a_real_root_are_not_wrong_and_lack_dev_char(tmp_path: Path):
    node = roots.nvidia_node(tmp_path)
    _pin(node)
    report = probe([roots.inside(node, "/etc/cdi")], node, engine="podman")
    assert "cuda" in report["containers"]  # nothing moves: stand-in files have no numbers to compare
    assert report["device_nodes"]["wrong_numbers"] == []
    assert report["device_nodes"]["cgroup_driver"] == {
        "engine": "podman",
        "driver": "systemd",
        "read_from": 'podman\'s default (cgroup_manager = "systemd")',
    }
    assert "/dev/nvidia-uvm" in report["device_nodes"]["without_dev_char"]
    assert [p for p in report["problems"] if p["kind"] == "dev-char"]
