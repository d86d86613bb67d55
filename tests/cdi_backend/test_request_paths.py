"""The --gpus path and NVIDIA_VISIBLE_DEVICES beside CDI names: Docker resolves `--gpus` through CDI from
29.2 where nvidia-cdi-hook is on its PATH, and through NVIDIA's legacy hook wherever
nvidia-container-runtime-hook is (moby daemon/devices_nvidia_linux.go); the legacy hook's default
capabilities bring no Vulkan (k4yt3x/video2x#1418)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from cgpu.backends.cdi.answer import engine_answer
from cgpu.engines.installed import InstalledEngine
from cgpu.report import ReportBuilder
from tests.cdi_backend.helpers import HOSTS, SAMPLES, device, probe, spec_dir
from tests.conftest import validate_report

NVIDIA_SPEC = SAMPLES / "nvidia-current/spec"


def nvidia_host(tmp_path: Path, *, cdi_hook: bool = True, runtime_hook: bool = False) -> Path:
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "nvidia-580", root, symlinks=True)
    if not cdi_hook:
        (root / "usr/bin/nvidia-cdi-hook").unlink()
    if runtime_hook:
        (root / "usr/bin/nvidia-container-runtime-hook").touch()
    return root


def gpus_path(report: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in report["request_paths"] if p["style"] == "--gpus")


def test_docker_29_2_resolves_gpus_through_the_cdi_all_device(tmp_path: Path):
    report = probe([NVIDIA_SPEC], nvidia_host(tmp_path), engine="docker@29.2.0")
    path = gpus_path(report)
    assert path["injected_by"] == "cdi" and "nvidia.com/gpu=all" in path["why"]
    assert path["apis"] == device(report, "nvidia.com/gpu=all")["apis"] == ["cuda", "vulkan", "opencl"]
    cdi = next(p for p in report["request_paths"] if p["style"] == "cdi")
    assert cdi["apis"] == report["containers"]


def test_docker_before_29_2_without_the_legacy_hook_refuses_gpus(tmp_path: Path):
    path = gpus_path(probe([NVIDIA_SPEC], nvidia_host(tmp_path), engine="docker@29.1.0"))
    assert path["injected_by"] == "none" and path["apis"] == []
    assert "nvidia-container-runtime-hook" in path["why"] and "--device nvidia.com/gpu=all" in path["why"]


def test_the_legacy_hook_wins_and_brings_no_vulkan_by_default(tmp_path: Path):
    report = probe([NVIDIA_SPEC], nvidia_host(tmp_path, runtime_hook=True), engine="docker@29.2.0")
    path = gpus_path(report)
    assert path["injected_by"] == "nvidia-container-runtime-hook"
    assert path["apis"] == ["cuda", "opencl"] and "vulkan" in report["containers"]
    assert "NVIDIA_DRIVER_CAPABILITIES=all" in path["why"] and "graphics" in path["why"]


def test_a_spec_without_an_all_device_leaves_gpus_unresolvable(tmp_path: Path):
    doc = yaml.safe_load(next(NVIDIA_SPEC.iterdir()).read_text())
    doc["devices"] = [d for d in doc["devices"] if d["name"] != "all"]
    dirs = spec_dir(tmp_path, texts={"nvidia.yaml": yaml.safe_dump(doc)})
    path = gpus_path(probe([dirs], nvidia_host(tmp_path), engine="docker@29.2.0"))
    assert path["injected_by"] == "cdi" and path["apis"] == [] and "unresolvable" in path["why"]


def test_podman_before_5_ignores_gpus_and_later_asks_for_cdi_names(tmp_path: Path):
    old = gpus_path(probe([NVIDIA_SPEC], nvidia_host(tmp_path / "a"), engine="podman@4.3.1"))
    assert old["injected_by"] == "none" and old["apis"] == [] and "ignores it" in old["why"]
    new = gpus_path(probe([NVIDIA_SPEC], nvidia_host(tmp_path / "b"), engine="podman@5.4.0"))
    assert new["injected_by"] == "cdi" and new["apis"] == ["cuda", "vulkan", "opencl"]


def test_no_engine_names_only_cdi(tmp_path: Path):
    report = probe([NVIDIA_SPEC], nvidia_host(tmp_path))
    assert [p["style"] for p in report["request_paths"]] == ["cdi"]


def _with_runtime(tmp_path: Path, mode: str) -> dict[str, Any]:
    runtime = {"runtime": "nvidia", "configured_in": "/etc/docker/daemon.json", "mode": mode, "mode_from": None}
    entry = InstalledEngine(
        "docker", version="28.2.0", max_cdi_version="1.0.0", cdi_enabled=True, nvidia_runtime=runtime
    )
    report = ReportBuilder("cdi")
    entries, _ = engine_answer(report, entry, [str(NVIDIA_SPEC)], str(nvidia_host(tmp_path)), None)
    assert entries is not None
    entries.put(report)
    built = report.build()
    validate_report(built)
    return next(p for p in built["request_paths"] if p["style"] == "NVIDIA_VISIBLE_DEVICES")


def test_nvidia_visible_devices_by_the_runtimes_mode(tmp_path: Path):
    legacy = _with_runtime(tmp_path / "a", "legacy")
    assert legacy["injected_by"] == "nvidia-container-runtime-hook" and legacy["apis"] == ["cuda", "opencl"]
    cdi = _with_runtime(tmp_path / "b", "cdi")
    assert cdi["injected_by"] == "cdi" and cdi["apis"] == ["cuda", "vulkan", "opencl"]


def test_docker_29_3_resolves_amds_gpus_through_cdi_and_29_2_refuses_it():
    amd = SAMPLES / "amd/spec"
    new = gpus_path(probe([amd], HOSTS / "amd", engine="docker@29.3.0"))
    assert new["injected_by"] == "cdi" and "amd.com/gpu=all" in new["why"]
    assert new["apis"] == ["rocm", "vulkan", "opencl"]
    old = gpus_path(probe([amd], HOSTS / "amd", engine="docker@29.2.0"))
    assert old["injected_by"] == "none" and old["apis"] == []
