"""`cgpu probe --backend local`: the probe run here, turned into a report."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO, validate_cli_output, validate_report
from tests.probe.conftest import clean_env, lavapipe_manifest, needs_vulkan_loader


def cgpu(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "cgpu", "probe", "--backend", "local", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )
    validate_cli_output(["probe", *args], proc.stdout)
    return proc.returncode, proc.stdout, proc.stderr


def test_software_only_machine_gets_nothing_with_named_evidence():
    lavapipe_manifest()
    code, out, _ = cgpu("--json", env=clean_env())
    assert code == 0
    report = validate_report(out)
    assert report.backend == "local"
    assert report.containers == []
    assert "llvmpipe" in report.evidence["vulkan"]
    assert "libcuda.so.1" in report.evidence["cuda"]
    llvmpipe = [d for d in report.devices if "llvmpipe" in d.name]
    assert llvmpipe and llvmpipe[0].apis == []


def test_fake_gpu_drivers_are_provided(fake_cuda, fake_icd):
    needs_vulkan_loader()
    env = clean_env(
        LD_LIBRARY_PATH=str(fake_cuda),
        FAKE_CUDA_COUNT="1",
        VK_DRIVER_FILES=str(fake_icd()),
        FAKE_VK_DEVICES="2,4,0x10de,0x2335,0,0,NVIDIA H200",
    )
    code, out, _ = cgpu("--json", env=env)
    assert code == 0
    report = json.loads(out)
    validate_report(report)
    assert report["containers"] == ["cuda", "vulkan"]
    assert {(d["name"], tuple(d["apis"])) for d in report["devices"]} >= {
        ("Fake GPU 0", ("cuda",)),
        ("NVIDIA H200", ("vulkan",)),
    }
    assert any("VK_DRIVER_FILES=" in p["message"] for p in report["problems"])


def test_timeout_option_limits_a_hanging_driver(fake_cuda):
    env = clean_env(LD_LIBRARY_PATH=str(fake_cuda), FAKE_CUDA_INIT="hang")
    code, out, _ = cgpu("--json", "--timeout", "1", env=env)
    assert code == 0
    report = validate_report(out)
    assert "cuda" not in report.containers
    assert any(p.severity == "warning" and "timed out after 1 s" in p.message for p in report.problems)


def test_human_output_lists_ignored_devices():
    lavapipe_manifest()
    code, out, err = cgpu(env=clean_env())
    assert code == 0
    assert "llvmpipe" in out and "ignored" in out
    assert "probing GPU APIs" in err


def test_library_call_keeps_cgpu_probe_callable():
    import cgpu

    report = cgpu.probe(backend="local", timeout=20)
    assert report.backend == "local"
    assert callable(cgpu.probe)


def test_gpus_that_enumerate_but_cannot_run_the_work_are_not_provided(fake_cuda_without_jit, fake_icd):
    needs_vulkan_loader()
    env = clean_env(
        LD_LIBRARY_PATH=str(fake_cuda_without_jit),
        FAKE_CUDA_COUNT="1",
        VK_DRIVER_FILES=str(fake_icd()),
        FAKE_VK_DEVICES="2,4,0x10de,0x2335,0,0,NVIDIA H200",
        FAKE_VK_FAIL="vkCreateComputePipelines:-3",
    )
    code, out, _ = cgpu("--json", env=env)
    assert code == 0
    report = json.loads(out)
    validate_report(report)
    assert report["containers"] == []
    devices = {d["name"]: d for d in report["devices"]}
    assert devices["Fake GPU 0"]["status"] == "ignored"
    assert (devices["Fake GPU 0"]["work"], devices["Fake GPU 0"]["work_error"]) == (
        "failed",
        "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
    )
    assert devices["NVIDIA H200"]["work_step"] == "vkCreateComputePipelines"
    warnings = [p["message"] for p in report["problems"] if p["severity"] == "warning"]
    assert any("cuda driver error CUDA_ERROR_JIT_COMPILER_NOT_FOUND" in m for m in warnings), warnings
    assert any("stopped at vkCreateComputePipelines with VK_ERROR_INITIALIZATION_FAILED" in m for m in warnings)


def test_provided_devices_carry_the_work_they_ran(fake_cuda):
    env = clean_env(LD_LIBRARY_PATH=str(fake_cuda), FAKE_CUDA_COUNT="1")
    report = json.loads(cgpu("--json", env=env)[1])
    [device] = [d for d in report["devices"] if d["name"] == "Fake GPU 0"]
    assert device["apis"] == ["cuda"] and device["work"] == "passed"
    assert isinstance(device["work_seconds"], float)
