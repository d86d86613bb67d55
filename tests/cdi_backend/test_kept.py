"""What a probe works out from all its device answers together (the node's facts, who may open the
nodes, the names a pod asks for, the driver's CUDA) is kept for the next probe in the same memory
while its answers are the same objects and every host read gives the same result again; a changed
host or spec makes it worked out afresh, and a caller that changes its report changes no later one."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cgpu.backends import cdi as cdi_backend
from cgpu.backends.cdi import access, node_facts, pod_names
from cgpu.node import driver_cuda
from cgpu.report import ReportBuilder
from tests.cdi_backend.helpers import HOSTS, SAMPLES

NVIDIA_SPEC = SAMPLES / "nvidia-8gpu-mig/spec/nvidia.yaml"
AMD_SPEC = SAMPLES / "amd/spec/amd.json"


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def worked(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times each piece of node data was worked out."""
    counts: Counter[str] = Counter()
    for module, name in ((access, "_access"), (node_facts, "_node_facts"), (pod_names, "pod_names")):
        monkeypatch.setattr(module, name, _counted(counts, name, getattr(module, name)))
    monkeypatch.setattr(driver_cuda, "nvidia_driver", _counted(counts, "nvidia_driver", driver_cuda.nvidia_driver))
    return counts


def _counted(counts: Counter[str], name: str, work: Any) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return work(*args, **kwargs)

    return counted


def _node(tmp_path: Path, host: str, spec: Path) -> tuple[Path, Path]:
    root, specs = tmp_path / "host", tmp_path / "cdi"
    shutil.copytree(HOSTS / host, root, symlinks=True)
    specs.mkdir()
    shutil.copy(spec, specs)
    return root, specs


def _probe(memory: cdi_backend.Memory, specs: Path, root: Path) -> dict[str, Any]:
    builder = ReportBuilder("cdi")
    cdi_backend.probe(builder, memory, spec_dirs=[str(specs)], root=str(root), engine="none")
    report = builder.build()
    report.pop("checked_at")
    return report


def test_node_data_are_worked_out_once_while_the_answers_and_the_host_hold(tmp_path: Path, worked: Counter[str]):
    root, specs = _node(tmp_path, "nvidia-580", NVIDIA_SPEC)
    memory = cdi_backend.new_memory()
    first = _probe(memory, specs, root)
    assert first["pod_names"] and first["nvidia_driver"]["cuda"] and first["cdi_refresh"] is None
    once = Counter({"_access": 1, "_node_facts": 1, "pod_names": 1, "nvidia_driver": 1})
    assert worked == once
    assert _probe(memory, specs, root) == first == _probe(memory, specs, root)
    assert worked == once
    # A host file the node facts read appears: every host read is made again, and this one differs
    unit = root / "usr/lib/systemd/system/nvidia-cdi-refresh.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\n")
    refreshed = _probe(memory, specs, root)
    assert refreshed["cdi_refresh"]["units"] == [
        {
            "name": "nvidia-cdi-refresh.service",
            "file": "/usr/lib/systemd/system/nvidia-cdi-refresh.service",
            "state": "disabled",
        }
    ]
    assert worked == once + once
    # The spec changes: its devices are judged again, and what comes of all of them worked out again
    text = NVIDIA_SPEC.read_text()
    (specs / NVIDIA_SPEC.name).write_text(text.replace("GPU-", "GPU-0"))
    changed = _probe(memory, specs, root)
    assert worked == once + once + once
    assert changed["pod_names"] != refreshed["pod_names"]
    gpus = [n for n in changed["pod_names"][0]["names"] if "=GPU-" in n]
    assert gpus and all(n.startswith("nvidia.com/gpu=GPU-0") for n in gpus)
    # A memory made anew keeps nothing: the same answer, worked out again
    assert _probe(cdi_backend.new_memory(), specs, root) == changed
    assert worked == once + once + once + once


def test_a_report_changed_by_its_caller_changes_no_later_one(tmp_path: Path):
    memory = cdi_backend.new_memory()
    root, specs = _node(tmp_path / "nvidia", "nvidia-580", NVIDIA_SPEC)
    first = _probe(memory, specs, root)
    first["pod_names"][0]["names"].clear()
    first["nvidia_driver"]["cuda"] = "1.0"
    first["device_nodes"]["wrong_numbers"].append({"path": "/dev/null"})
    assert _probe(memory, specs, root) == _probe(cdi_backend.new_memory(), specs, root)

    root, specs = _node(tmp_path / "amd", "amd", AMD_SPEC)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/group").write_text("video:x:44:\nrender:x:992:\n")
    first = _probe(memory, specs, root)
    [kfd] = [n for n in first["apis"]["rocm"]["user_needs"] if n["node"] == "/dev/kfd"]
    assert kfd["gids"] == [992]
    kfd["gids"].append(0)
    first["apis"]["rocm"]["user_needs"].clear()
    assert _probe(memory, specs, root) == _probe(cdi_backend.new_memory(), specs, root)
