"""The names a pod asks for: NVIDIA's device plugin and NVIDIA's runtime ask for one GPU by its UUID, and a
spec with only `all` resolves none of them (nvidia-container-toolkit#1239, #1895)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from cgpu.backends.cdi import pod_names
from cgpu.backends.cdi.pod_names import id_strategy
from tests.cdi_backend.helpers import HOSTS, SAMPLES, probe, spec_dir


def entry(report: dict, asks_for: str) -> dict:
    return next(p for p in report["pod_names"] if p["asks_for"] == asks_for)


def test_a_wsl_spec_with_only_all_covers_no_pod_asking_by_uuid():
    report = probe([SAMPLES / "nvidia-wsl/spec"], HOSTS / "wsl")
    found = entry(report, "nvidia.com/gpu=GPU-<uuid>")
    assert found["covered"] is False and found["names"] == []
    assert "#1239" in found["why"] and "unresolvable" in found["why"] and "nvidia-ctk cdi generate" in found["why"]
    assert "cuda" in report["containers"]  # `all` itself still gives it: the names are data beside the answer


def test_per_gpu_uuid_names_cover_it():
    found = entry(probe([SAMPLES / "nvidia-current/spec"], HOSTS / "nvidia-580"), "nvidia.com/gpu=GPU-<uuid>")
    assert found["covered"] is True and all(n.startswith("nvidia.com/gpu=GPU-") for n in found["names"])


def _one_node_spec(tmp_path: Path, kind: str, names: list[str]) -> Path:
    devices = [{"name": n, "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}} for n in names]
    doc = {"cdiVersion": "0.5.0", "kind": kind, "devices": devices}
    return spec_dir(tmp_path, texts={"spec.json": json.dumps(doc)})


def test_a_management_spec_with_only_all_is_named(tmp_path: Path):
    dirs = _one_node_spec(tmp_path, "management.nvidia.com/gpu", ["all"])
    found = entry(probe([dirs], HOSTS / "nvidia-580"), "management.nvidia.com/gpu=GPU-<uuid>")
    assert found["covered"] is False and "#1895" in found["why"]


def test_the_plugins_own_spec_tells_its_id_strategy(tmp_path: Path):
    dirs = _one_node_spec(tmp_path, "k8s.device-plugin.nvidia.com/gpu", ["GPU-0b8e2f3a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"])
    found = entry(probe([dirs], HOSTS / "nvidia-580"), "k8s.device-plugin.nvidia.com/gpu=<GPU-uuid or index>")
    assert found["covered"] is True and "by uuid" in found["why"]
    assert found["names"] == ["k8s.device-plugin.nvidia.com/gpu=GPU-0b8e2f3a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"]


def test_id_strategies_are_read_from_names():
    assert id_strategy(["0", "1"]) == "index"
    assert id_strategy(["GPU-ab12", "MIG-cd34"]) == "uuid"
    assert id_strategy(["0", "GPU-ab12", "all"]) == "uuid and index"
    assert id_strategy(["all"]) == "neither"


def test_no_nvidia_kind_no_entry():
    assert probe([SAMPLES / "amd/spec"], HOSTS / "amd")["pod_names"] == []


_NAME_TEXT = st.text(alphabet="GPUMI-0123456789abcdefABCDEF:٣x", max_size=12)


@given(st.one_of(_NAME_TEXT, st.builds("{}-{}".format, st.sampled_from(["GPU", "MIG", "gpu"]), _NAME_TEXT)))
def test_name_shapes_are_the_regexes_they_stand_for(name: str):
    assert pod_names.is_uuid_name(name) == bool(re.fullmatch(r"(GPU|MIG)-[0-9a-fA-F-]+", name))
    assert pod_names.is_index_name(name) == bool(re.fullmatch(r"\d+(:\d+)?", name))
