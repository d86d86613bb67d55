"""The API-inference cases of the CDI reference (§8), each with its own spec and fake host tree."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.cdi_backend.helpers import HOSTS, SAMPLES, corpus, device, host_paths, make_host, probe, spec_dir

NVIDIA_1_17 = SAMPLES / "nvidia-1.17/spec"
UUID = "nvidia.com/gpu=GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e"


def _corpus(name: str) -> dict:
    text = corpus(name).read_text()
    return yaml.safe_load(text.replace("{{ .driverRoot }}", ""))


def _no_metal(report: dict) -> None:
    assert "never reaches a Linux container" in report["evidence"]["metal"]


def test_case1_real_nvml_spec_gives_cuda_and_vulkan_but_opencl_lacks_its_icd():
    report = probe([NVIDIA_1_17], HOSTS / "nvidia-575")
    assert report["containers"] == ["cuda", "vulkan"]
    evidence = report["evidence"]
    assert "libcuda.so.575.64.03" in evidence["cuda"] and "update-ldcache" in evidence["cuda"]
    assert "/dev/nvidia-uvm" in evidence["cuda"]
    assert "/etc/vulkan/icd.d/nvidia_icd.json naming libGLX_nvidia.so.0" in evidence["vulkan"]
    assert evidence["opencl"].startswith("partial: ")
    assert "libnvidia-opencl.so.575.64.03" in evidence["opencl"]
    assert "/etc/OpenCL/vendors/nvidia.icd" in evidence["opencl"] and "ship it in the image" in evidence["opencl"]
    assert "no /dev/kfd" in evidence["rocm"]
    assert "no /dev/dxg" in evidence["directml"]
    _no_metal(report)
    names = [d["name"] for d in report["devices"]]
    assert names == ["nvidia.com/gpu=0", UUID, "nvidia.com/gpu=all"]
    assert all(d["status"] == "partial" and d["apis"] == ["cuda", "vulkan"] for d in report["devices"])
    assert "partial" in device(report, "nvidia.com/gpu=0")["checks"]["opencl"]
    assert report["problems"] == []


def test_case2_uuid_alias_is_identical_and_a_missing_index_is_unresolvable():
    by_uuid = probe([NVIDIA_1_17], HOSTS / "nvidia-575", devices=[UUID])
    by_index = probe([NVIDIA_1_17], HOSTS / "nvidia-575", devices=["nvidia.com/gpu=0"])
    assert by_uuid["containers"] == by_index["containers"] == ["cuda", "vulkan"]
    assert by_uuid["evidence"]["cuda"].replace(UUID, "X") == by_index["evidence"]["cuda"].replace(
        "nvidia.com/gpu=0", "X"
    )
    missing = probe([NVIDIA_1_17], HOSTS / "nvidia-575", devices=["nvidia.com/gpu=1"])
    assert missing["containers"] == [] and missing["devices"] == []
    assert [p["severity"] for p in missing["problems"]] == ["error"]
    assert "unresolvable CDI devices nvidia.com/gpu=1" in missing["problems"][0]["message"]
    assert "none of the requested CDI devices resolves" in missing["evidence"]["cuda"]


def test_case3_driver_upgrade_makes_the_spec_stale():
    report = probe([NVIDIA_1_17], HOSTS / "nvidia-580")
    assert report["containers"] == []
    assert all(d["status"] == "blocked" and d["apis"] == [] for d in report["devices"])
    [stale] = report["problems"]
    assert stale["severity"] == "error" and stale["source"].endswith("nvidia-1.17/spec/nvidia.yaml")
    message = stale["message"]
    assert message.startswith("stale spec")
    assert "575.64.03" in message and "580.82.07" in message
    assert "nvidia-ctk cdi generate --output=" in message and "nvidia-cdi-refresh" in message
    for api in ("cuda", "vulkan", "opencl"):
        assert "stale" in report["evidence"][api] and "575.64.03" in report["evidence"][api]
    assert "libcuda.so.575.64.03" in " ".join(device(report, "nvidia.com/gpu=0")["missing"])


def test_case4_current_toolkit_mounts_the_opencl_icd():
    report = probe([SAMPLES / "nvidia-current/spec"], HOSTS / "nvidia-580")
    assert report["containers"] == ["cuda", "vulkan", "opencl"]
    assert "/etc/OpenCL/vendors/nvidia.icd naming libnvidia-opencl.so.1" in report["evidence"]["opencl"]
    assert "linked as /usr/lib/x86_64-linux-gnu/libcuda.so.1 by the create-symlinks hook" in report["evidence"]["cuda"]
    assert all(d["status"] == "ok" for d in report["devices"])
    assert report["problems"] == []


def test_case5_wsl_spec_gives_cuda_only():
    report = probe([SAMPLES / "nvidia-wsl/spec"], HOSTS / "wsl")
    assert report["containers"] == ["cuda"]
    assert "/dev/dxg" in report["evidence"]["cuda"] and "libcuda.so.1.1" in report["evidence"]["cuda"]
    assert report["evidence"]["directml"].startswith("partial: ") and "libd3d12.so" in report["evidence"]["directml"]
    assert "mounts no libGLX_nvidia" in report["evidence"]["vulkan"]
    assert "mounts no libnvidia-opencl" in report["evidence"]["opencl"]
    assert "no /dev/kfd" in report["evidence"]["rocm"]
    only_all = probe([SAMPLES / "nvidia-wsl/spec"], HOSTS / "wsl", devices=["nvidia.com/gpu=0"])
    assert only_all["containers"] == [] and "unresolvable" in only_all["problems"][0]["message"]


def test_case6_trimmed_spec_has_nodes_but_no_driver(tmp_path: Path):
    spec = _corpus("nvidia-nvml-trimmed.yaml")
    root = make_host(tmp_path / "root", host_paths(spec), render={"renderD128": "0x10de"})
    report = probe([spec_dir(tmp_path, corpus("nvidia-nvml-trimmed.yaml"))], root)
    assert report["containers"] == []
    assert report["evidence"]["cuda"].startswith("partial: ")
    assert "no libcuda.so.<driver version> is mounted (device nodes only" in report["evidence"]["cuda"]
    assert "mounts no libGLX_nvidia" in report["evidence"]["vulkan"]
    assert "mounts no libnvidia-opencl" in report["evidence"]["opencl"]
    assert "no /dev/kfd" in report["evidence"]["rocm"] and "no /dev/dxg" in report["evidence"]["directml"]


def test_case7_disable_hook_all_leaves_libcuda_unloadable(tmp_path: Path):
    spec = _corpus("nvidia-ctk-nvml-disable-hook-all.tmpl.yaml")
    root = make_host(tmp_path / "root", host_paths(spec))
    specs = spec_dir(tmp_path, texts={"nvidia.yaml": yaml.safe_dump(spec)})
    report = probe([specs], root)
    assert report["containers"] == []
    cuda = report["evidence"]["cuda"]
    assert cuda.startswith("partial: ") and "example.com/device=0" in cuda
    assert "nothing makes libcuda.so.123.45.67 loadable as libcuda.so.1" in cuda
    assert "no /dev/nvidia-uvm" in cuda and "--disable-hook all" in cuda
    for api in ("rocm", "vulkan", "opencl", "directml"):
        assert report["evidence"][api].startswith("not provided: ")


def test_case8_jetson_icd_comes_from_a_hook_link(tmp_path: Path):
    spec = _corpus("jetson-csv-jp7.yaml")
    icd = '{"file_format_version": "1.0.0", "ICD": {"library_path": "libGLX_nvidia.so.0", "api_version": "1.4.312"}}'
    root = make_host(
        tmp_path / "root", host_paths(spec), files={"/usr/lib/aarch64-linux-gnu/nvidia/nvidia_icd.json": icd}
    )
    report = probe([spec_dir(tmp_path, corpus("jetson-csv-jp7.yaml"))], root)
    assert report["containers"] == ["cuda", "vulkan"]
    assert "libcuda.so.1.1" in report["evidence"]["cuda"]
    vulkan = report["evidence"]["vulkan"]
    assert "/etc/vulkan/icd.d/nvidia_icd.json naming libGLX_nvidia.so.0" in vulkan
    assert "libGLX_nvidia.so.0 (mounted as libGLX_nvidia.so.0" in vulkan
    assert "mounts no libnvidia-opencl" in report["evidence"]["opencl"]
    xavier = _corpus("jetson-csv-jp5.yaml")
    assert xavier["kind"] == "nvidia.com/xavier-gpu"
    other = probe(
        [spec_dir(tmp_path, corpus("jetson-csv-jp5.yaml"), name="jp5")],
        make_host(tmp_path / "jp5-root"),
        devices=["nvidia.com/gpu=all"],
    )
    assert other["containers"] == [] and "unresolvable CDI devices nvidia.com/gpu=all" in json.dumps(other["problems"])


def test_case9_amd_gives_rocm_vulkan_opencl_from_the_image(tmp_path: Path):
    report = probe(
        [spec_dir(tmp_path, corpus("amd-ctk.json"))],
        HOSTS / "amd",
        devices=["amd.com/gpu=0"],
    )
    assert report["containers"] == ["rocm", "vulkan", "opencl"]
    assert "the image brings the ROCm runtime" in report["evidence"]["rocm"]
    assert "vendor 0x1002" in report["evidence"]["rocm"]
    assert "Mesa RADV" in report["evidence"]["vulkan"] and "ROCm's OpenCL" in report["evidence"]["opencl"]
    assert "no NVIDIA device node" in report["evidence"]["cuda"] and "no /dev/dxg" in report["evidence"]["directml"]
    without_kfd = {
        "cdiVersion": "0.5.0",
        "kind": "amd.com/gpu",
        "devices": [
            {
                "name": "0",
                "containerEdits": {"deviceNodes": [{"path": "/dev/dri/card0"}, {"path": "/dev/dri/renderD128"}]},
            }
        ],
    }
    root = make_host(tmp_path / "root", ["/dev/dri/card0", "/dev/dri/renderD128"], render={"renderD128": "0x1002"})
    graphics = probe([spec_dir(tmp_path, name="nokfd", texts={"amd.yaml": yaml.safe_dump(without_kfd)})], root)
    assert graphics["containers"] == ["vulkan"]
    assert graphics["evidence"]["rocm"].startswith("partial: ") and "no /dev/kfd" in graphics["evidence"]["rocm"]
    assert graphics["evidence"]["opencl"].startswith("partial: ") and "/dev/kfd" in graphics["evidence"]["opencl"]


def test_case10_intel_gives_vulkan_and_opencl_from_the_image():
    report = probe([SAMPLES / "intel/spec"], HOSTS / "intel", devices=["intel.com/gpu=gpu0"])
    assert report["containers"] == ["vulkan", "opencl"]
    assert "Intel GPU" in report["evidence"]["vulkan"] and "Mesa ANV" in report["evidence"]["vulkan"]
    assert "compute-runtime" in report["evidence"]["opencl"]
    assert "no /dev/kfd and no AMD render node" in report["evidence"]["rocm"]
    wrong = probe([SAMPLES / "intel/spec"], HOSTS / "intel", devices=["gpu.intel.com/i915=0"])
    assert wrong["containers"] == []
    assert "unresolvable CDI devices gpu.intel.com/i915=0" in json.dumps(wrong["problems"])


def test_case12_fresh_dynamic_spec_wins_but_an_old_uuid_drags_the_stale_spec_in(tmp_path: Path):
    old = (
        (NVIDIA_1_17 / "nvidia.yaml")
        .read_text()
        .replace("GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e", "GPU-0ld00000-0000-0000-0000-000000000000")
    )
    etc = spec_dir(tmp_path, name="etc-cdi", texts={"nvidia.yaml": old})
    run = spec_dir(tmp_path, SAMPLES / "nvidia-current/spec/nvidia.yaml", name="run-cdi")
    report = probe([etc, run], HOSTS / "nvidia-580")
    assert report["containers"] == ["cuda", "vulkan", "opencl"]
    assert device(report, "nvidia.com/gpu=0")["spec"].endswith("run-cdi/nvidia.yaml")
    stale_device = device(report, "nvidia.com/gpu=GPU-0ld00000-0000-0000-0000-000000000000")
    assert stale_device["status"] == "blocked" and stale_device["spec"].endswith("etc-cdi/nvidia.yaml")
    [stale] = [p for p in report["problems"] if p["kind"] == "stale-spec"]
    assert stale["source"].endswith("etc-cdi/nvidia.yaml") and "GPU-0ld00000" in stale["message"]


def test_case25_hostile_edits_are_flagged_and_hooks_never_run(tmp_path: Path):
    canary = tmp_path / "hook-ran"
    hostile = {
        "cdiVersion": "0.5.0",
        "kind": "evil.example.com/gpu",
        "devices": [
            {
                "name": "x",
                "containerEdits": {
                    "mounts": [
                        {"hostPath": "/", "containerPath": "/host", "options": ["rw", "rbind"]},
                        {"hostPath": "/tmp/x.so", "containerPath": "/etc/ld.so.preload"},
                        {"hostPath": "/etc", "containerPath": "../../etc"},
                    ],
                    "env": ["LD_PRELOAD=/tmp/x.so", "A B=1"],
                    "deviceNodes": [{"path": "dev/nvidia0"}],  # `permissions: none`: v1.1.0 rejects the file
                    "hooks": [
                        {"hookName": "createContainer", "path": "/bin/sh", "args": ["sh", "-c", f"touch {canary}"]}
                    ],
                },
            }
        ],
    }
    root = make_host(tmp_path / "root", ["/tmp/x.so", "/etc/hosts", "/bin/sh", "/dev/nvidia0"])
    report = probe([spec_dir(tmp_path, texts={"evil.yaml": json.dumps(hostile)})], root)
    assert not canary.exists()
    messages = " | ".join(p["message"] for p in report["problems"] if p["severity"] == "warning")
    assert "whole filesystem (/) at /host" in messages
    assert "/etc/ld.so.preload" in messages and "LD_PRELOAD=/tmp/x.so" in messages
    assert "'../../etc' is not a clean absolute path" in messages and "'A B=1'" in messages
    assert "'dev/nvidia0' is not a clean absolute path" in messages
    assert "runs a shell or interpreter on the host (/bin/sh" in messages
    assert report["containers"] == []


def test_case26_missing_hook_binary_blocks_the_device(tmp_path: Path):
    spec = yaml.safe_load((NVIDIA_1_17 / "nvidia.yaml").read_text())
    text = (NVIDIA_1_17 / "nvidia.yaml").read_text().replace("/usr/bin/nvidia-cdi-hook", "/usr/bin/nvidia-ctk")
    root = make_host(
        tmp_path / "root",
        [p for p in host_paths(spec) if not p.endswith("nvidia-cdi-hook")],
        files={
            "/usr/share/vulkan/icd.d/nvidia_icd.json": (
                HOSTS / "nvidia-575/usr/share/vulkan/icd.d/nvidia_icd.json"
            ).read_text()
        },
        nvidia_version="575.64.03",
    )
    report = probe([spec_dir(tmp_path, texts={"nvidia.yaml": text})], root)
    assert report["containers"] == []
    assert all(d["status"] == "blocked" for d in report["devices"])
    [problem] = report["problems"]
    assert "createContainer hook binary" in problem["message"] and "/usr/bin/nvidia-ctk" in problem["message"]
    assert "would give cuda but no container with it can start" in report["evidence"]["cuda"]


@pytest.mark.parametrize("fully_specified", [False, True])
def test_case27_missing_render_node_blocks_unless_fully_specified(tmp_path: Path, fully_specified: bool):
    node = {"path": "/dev/dri/renderD129"}
    if fully_specified:
        node.update(type="c", major=226, minor=129)
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "intel.com/gpu",
        "devices": [{"name": "gpu1", "containerEdits": {"deviceNodes": [{"path": "/dev/dri/card1"}, node]}}],
    }
    root = make_host(tmp_path / "root", ["/dev/dri/card1", "/dev/dri/renderD128"], render={"renderD129": "0x8086"})
    report = probe([spec_dir(tmp_path, texts={"intel.yaml": yaml.safe_dump(spec)})], root)
    if fully_specified:  # the engine creates the node, but no GPU is behind it on this host
        assert report["devices"][0]["status"] == "ok" and report["problems"] == []
        assert report["containers"] == []
        assert "lists /dev/dri/renderD129, which the host does not have" in report["evidence"]["vulkan"]
    else:
        assert report["containers"] == [] and report["devices"][0]["status"] == "blocked"
        assert re.search(r"the device node \S*/dev/dri/renderD129 does not exist", report["problems"][0]["message"])


def test_case28_old_engine_drops_a_newer_spec(tmp_path: Path):
    report = probe([SAMPLES / "nvidia-current/spec"], HOSTS / "nvidia-580", engine="podman@4.9.3")
    assert report["containers"] == []
    assert [d["status"] for d in report["devices"]] == ["blocked"] * 3
    assert "cdiVersion 0.7.0" in report["devices"][0]["reason"]
    [judge, message] = [p["message"] for p in report["problems"]]
    assert judge == "podman 4.9.3 judged the specs (--engine podman@4.9.3): it reads cdiVersion up to 0.6.0"
    assert "0.7.0" in message and "podman 4.9.3" in message
    assert "podman 4.9.3 ignores the spec that defines nvidia.com/gpu=0" in report["evidence"]["cuda"]
    one = probe(
        [SAMPLES / "nvidia-current/spec"], HOSTS / "nvidia-580", engine="podman@4.9.3", devices=["nvidia.com/gpu=all"]
    )
    assert [d["name"] for d in one["devices"]] == ["nvidia.com/gpu=all"]
    assert not any(p["message"].startswith("unresolvable CDI devices") for p in one["problems"])
    assert probe([SAMPLES / "nvidia-current/spec"], HOSTS / "nvidia-580", engine="docker@28.2.0")["containers"]


def test_case31_mixed_request_across_specs_is_the_union(tmp_path: Path):
    root = tmp_path / "root"
    for host in ("nvidia-580", "amd"):
        shutil.copytree(HOSTS / host, root, dirs_exist_ok=True)
    report = probe(
        [SAMPLES / "nvidia-current/spec", SAMPLES / "amd/spec"], root, devices=["nvidia.com/gpu=0", "amd.com/gpu=0"]
    )
    assert report["containers"] == ["cuda", "rocm", "vulkan", "opencl"]
    assert [d["name"] for d in report["devices"]] == ["nvidia.com/gpu=0", "amd.com/gpu=0"]
    assert report["evidence"]["rocm"].startswith("amd.com/gpu=0 gets /dev/kfd")
