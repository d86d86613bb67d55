"""The check work: a device counts only when a vector add ran on it and came back right. CUDA
through a stand-in libcuda.so.1 that makes every call and error; Vulkan on lavapipe and OpenCL
on PoCL for real (with --work-on-software, they still never count), and through the fake ICD;
failures injected as a kernel that computes wrongly, a build that fails and a dispatch that hangs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cgpu.gpu_probe import standalone
from tests.probe.conftest import clean_env, lavapipe_manifest, mutated_probe, needs_pocl, needs_vulkan_loader, run_probe

# ---- CUDA through the stand-in driver -------------------------------------------------------

CUDA_CALLS = [
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuModuleLoadDataEx",
    "cuModuleGetFunction",
    "cuMemAlloc_v2",
    "cuMemAlloc_v2",
    "cuMemAlloc_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyHtoD_v2",
    "cuLaunchKernel",
    "cuCtxSynchronize",
    "cuMemcpyDtoH_v2",
]
CUDA_CLEANUP = ["cuMemFree_v2", "cuMemFree_v2", "cuMemFree_v2", "cuModuleUnload", "cuDevicePrimaryCtxRelease_v2"]


def cuda(folder: Path, tmp_path: Path, timeout: float = 20, **fake: str) -> tuple[dict, list[str]]:
    trace = tmp_path / "trace"
    trace.unlink(missing_ok=True)
    steering = {"FAKE_CUDA_INIT": "0", "FAKE_CUDA_COUNT": "1", "FAKE_CUDA_TRACE": str(trace)}
    steering.update({f"FAKE_CUDA_{k.upper()}": v for k, v in fake.items()})
    env = clean_env(LD_LIBRARY_PATH=str(folder), **steering)
    result = run_probe("cuda", env=env, timeout=timeout)["apis"]["cuda"]
    return result, trace.read_text().split() if trace.exists() else []


def test_cuda_device_counts_after_its_kernel_ran_with_every_call_made_and_undone(fake_cuda, tmp_path):
    result, calls = cuda(fake_cuda, tmp_path)
    assert result["available"] is True and result["error"] is None
    [device] = result["devices"]
    assert device["counted"] is True and device["work"] == "passed"
    assert "PTX vector add" in device["reason"] and isinstance(device["work_seconds"], float)
    assert calls == CUDA_CALLS + CUDA_CLEANUP
    assert result["jit_library"] == str(fake_cuda / "libnvidia-ptxjitcompiler.so.1")
    assert result["driver_version"] == "12.4"
    assert result["summary"].startswith("CUDA 12.4 works with 1 device(s): Fake GPU 0;")


@pytest.mark.parametrize(
    ("call", "code", "name"),
    [
        ("cuDevicePrimaryCtxRetain", 999, "CUDA_ERROR_UNKNOWN"),
        ("cuCtxSetCurrent", 201, "CUDA_ERROR_INVALID_CONTEXT"),
        ("cuModuleLoadDataEx", 222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
        ("cuModuleLoadDataEx", 223, "CUDA_ERROR_JIT_COMPILATION_DISABLED"),
        ("cuModuleGetFunction", 500, "CUDA_ERROR_NOT_FOUND"),
        ("cuMemAlloc_v2", 2, "CUDA_ERROR_OUT_OF_MEMORY"),
        ("cuMemcpyHtoD_v2", 1, "CUDA_ERROR_INVALID_VALUE"),
        ("cuLaunchKernel", 701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
        ("cuCtxSynchronize", 719, "CUDA_ERROR_LAUNCH_FAILED"),
        ("cuMemcpyDtoH_v2", 700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
    ],
)
def test_cuda_work_failure_is_named_at_its_call_and_what_was_made_is_undone(fake_cuda, tmp_path, call, code, name):
    result, calls = cuda(fake_cuda, tmp_path, fail=f"{call}:{code}")
    assert result["available"] is False and result["error"] == name
    [device] = result["devices"]
    assert device["counted"] is False
    assert (device["work"], device["work_step"], device["work_error"]) == ("failed", call, name)
    assert f"stopped at {call} with {name}" in result["summary"]
    assert f"stopped at {call} with {name}" in device["reason"]
    made = calls[: calls.index(call) + 1]
    assert calls[len(made) :] == _owed(made[:-1])


def _owed(done: list[str]) -> list[str]:
    """The cleanup owed after the calls that succeeded, in the order it must happen."""
    return (
        ["cuMemFree_v2"] * done.count("cuMemAlloc_v2")
        + ["cuModuleUnload"] * ("cuModuleLoadDataEx" in done)
        + ["cuDevicePrimaryCtxRelease_v2"] * ("cuDevicePrimaryCtxRetain" in done)
    )


def test_invalid_ptx_is_named_with_the_jit_log(fake_cuda, tmp_path):
    result, _ = cuda(fake_cuda, tmp_path, fail="cuModuleLoadDataEx:218")
    [device] = result["devices"]
    assert device["work_error"] == "CUDA_ERROR_INVALID_PTX"
    assert "JIT log: ptxas application ptx input, line 2; fatal" in device["work_detail"]


def test_missing_ptx_jit_compiler_is_jit_compiler_not_found(fake_cuda_without_jit, tmp_path):
    """The driver loads libnvidia-ptxjitcompiler.so.1 to JIT PTX; a spec that does not mount it fails here."""
    result, _ = cuda(fake_cuda_without_jit, tmp_path)
    assert result["available"] is False and result["error"] == "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"
    [device] = result["devices"]
    assert device["work_step"] == "cuModuleLoadDataEx"
    assert "libnvidia-ptxjitcompiler.so.1 is not in the container" in device["work_detail"]
    assert result["jit_library"] is None


def test_cuda_kernel_that_computes_wrongly_does_not_count(fake_cuda, tmp_path):
    result, calls = cuda(fake_cuda, tmp_path, wrong="1")
    [device] = result["devices"]
    assert (device["counted"], device["work_step"], device["work_error"]) == (False, "result check", "wrong_result")
    assert "element 5 is 100064, expected 100063" in device["work_detail"]
    assert calls[-len(CUDA_CLEANUP) :] == CUDA_CLEANUP


def test_hung_cuda_kernel_is_killed_at_the_deadline_naming_the_call(fake_cuda, tmp_path):
    result, _ = cuda(fake_cuda, tmp_path, timeout=3, hang="cuCtxSynchronize")
    assert result["error"] == "timeout" and result["available"] is False
    assert result["stopped_at"] == "cuCtxSynchronize on Fake GPU 0 (CUDA device 0)"
    assert "timed out after 3 s in cuCtxSynchronize" in result["summary"]


def test_init_failure_still_reports_the_driver_version(fake_cuda, tmp_path):
    result, calls = cuda(fake_cuda, tmp_path, init="999")
    assert result["driver_version"] == "12.4" and result["devices"] == [] and calls == []


# ---- Vulkan ---------------------------------------------------------------------------------


def test_lavapipe_runs_the_compute_dispatch_and_still_does_not_count():
    lavapipe_manifest()
    vulkan = run_probe("vulkan", options=("--work-on-software",))["apis"]["vulkan"]
    [device] = [d for d in vulkan["devices"] if "llvmpipe" in d["name"]]
    assert device["work"] == "passed", device
    assert device["counted"] is False and "compute dispatch ran" in device["reason"]
    assert vulkan["available"] is False and vulkan["error"] is None


def test_software_devices_run_no_work_unless_asked():
    lavapipe_manifest()
    needs_pocl()
    apis = run_probe("vulkan", "opencl")["apis"]
    for api in ("vulkan", "opencl"):
        assert apis[api]["devices"], api
        assert all("work" not in device for device in apis[api]["devices"]), api


def test_lavapipe_computing_wrongly_is_caught(tmp_path):
    """OpIAdd (0x00050080: 5 words, opcode 128) turned into OpISub (130)."""
    lavapipe_manifest()
    probe = mutated_probe(tmp_path, "0x00050080", "0x00050082")
    vulkan = run_probe("vulkan", script=probe, options=("--work-on-software",))["apis"]["vulkan"]
    [device] = [d for d in vulkan["devices"] if "llvmpipe" in d["name"]]
    assert (device["work"], device["work_step"], device["work_error"]) == ("failed", "result check", "wrong_result")
    assert "element 0 is 4294867299, expected 100003" in device["work_detail"]
    assert device["counted"] is False and "the compute check stopped at result check" in device["reason"]


VK_OBJECTS = [
    "Device",
    "Buffer",
    "Memory",
    "Mapping",
    "ShaderModule",
    "DescriptorSetLayout",
    "PipelineLayout",
    "Pipeline",
    "DescriptorPool",
    "CommandPool",
    "Fence",
]


def fake_vulkan(fake_icd, timeout: float = 20, **fake: str) -> dict:
    needs_vulkan_loader()
    env = clean_env(
        VK_DRIVER_FILES=str(fake_icd()),
        FAKE_VK_DEVICES="2,4,0x10de,0x2335,0,0,NVIDIA H200",
        **{f"FAKE_VK_{k.upper()}": v for k, v in fake.items()},
    )
    return run_probe("vulkan", env=env, timeout=timeout)["apis"]["vulkan"]


def made_and_undone(trace: Path) -> tuple[list[str], list[str]]:
    """The objects the fake driver saw created and destroyed, in order."""
    lines = trace.read_text().split()
    return [line[1:] for line in lines if line[0] == "+"], [line[1:] for line in lines if line[0] == "-"]


def test_gpu_that_dispatches_counts_and_every_object_is_destroyed_in_reverse(fake_icd, tmp_path):
    vulkan = fake_vulkan(fake_icd, trace=str(tmp_path / "trace"))
    assert vulkan["available"] is True
    [device] = vulkan["devices"]
    assert device["counted"] is True and device["work"] == "passed"
    made, undone = made_and_undone(tmp_path / "trace")
    assert made == VK_OBJECTS and undone == made[::-1]


@pytest.mark.parametrize(
    ("call", "code", "name"),
    [
        ("vkCreateComputePipelines", -3, "VK_ERROR_INITIALIZATION_FAILED"),  # e.g. the SPIR-V compiler is missing
        ("vkCreateShaderModule", -1, "VK_ERROR_OUT_OF_HOST_MEMORY"),
        ("vkCreateBuffer", -2, "VK_ERROR_OUT_OF_DEVICE_MEMORY"),
        ("vkQueueSubmit", -4, "VK_ERROR_DEVICE_LOST"),
        ("vkWaitForFences", -4, "VK_ERROR_DEVICE_LOST"),
    ],
)
def test_gpu_that_enumerates_but_cannot_dispatch_does_not_count(fake_icd, tmp_path, call, code, name):
    vulkan = fake_vulkan(fake_icd, fail=f"{call}:{code}", trace=str(tmp_path / "trace"))
    assert vulkan["available"] is False and vulkan["error"] == name
    [device] = vulkan["devices"]
    assert device["counted"] is False
    assert (device["work"], device["work_step"], device["work_error"]) == ("failed", call, name)
    assert device["reason"].startswith("a discrete gpu from driver fake, but the compute check stopped at " + call)
    assert vulkan["summary"].startswith("Vulkan lists 1 GPU(s), but none ran the check work: NVIDIA H200 stopped at")
    made, undone = made_and_undone(tmp_path / "trace")
    assert undone == made[::-1]  # what was made before the failure is destroyed


def test_gpu_that_computes_wrongly_does_not_count(fake_icd):
    vulkan = fake_vulkan(fake_icd, wrong="1")
    [device] = vulkan["devices"]
    assert (device["counted"], device["work_error"]) == (False, "wrong_result")
    assert "element 7" in device["work_detail"]


def test_hung_dispatch_is_killed_at_the_deadline_naming_the_call(fake_icd):
    vulkan = fake_vulkan(fake_icd, hang="vkWaitForFences", timeout=3)
    assert vulkan["error"] == "timeout"
    assert vulkan["stopped_at"] == "vkWaitForFences on NVIDIA H200 (Vulkan device 0)"


def test_embedded_spirv_matches_its_assembly_and_validates(tmp_path):
    assembler, validator = shutil.which("spirv-as"), shutil.which("spirv-val")
    if assembler is None or validator is None:
        pytest.skip("spirv-tools (spirv-as, spirv-val) is not installed")
    source = Path(standalone.__file__).read_text()
    comment = source.split("# The words below are this assembly", 1)[1].split("VK_SHADER = (", 1)[0]
    lines = [line[4:] if line.startswith("#   ") else "" for line in comment.splitlines()[2:]]
    (tmp_path / "check.spvasm").write_text("\n".join(lines) + "\n")
    subprocess.run(
        [assembler, "--target-env", "vulkan1.0", str(tmp_path / "check.spvasm"), "-o", str(tmp_path / "check.spv")],
        check=True,
        timeout=60,
    )
    subprocess.run([validator, "--target-env", "vulkan1.0", str(tmp_path / "check.spv")], check=True, timeout=60)
    words = (tmp_path / "check.spv").read_bytes()
    assembled = [int.from_bytes(words[i : i + 4], "little") for i in range(0, len(words), 4)]
    assert assembled == list(standalone.VK_SHADER)


# ---- OpenCL on PoCL -------------------------------------------------------------------------


def pocl(probe: Path | None = None, timeout: float = 30) -> dict:
    needs_pocl()
    data = run_probe("opencl", options=("--work-on-software",), timeout=timeout, **({"script": probe} if probe else {}))
    return data["apis"]["opencl"]


def pocl_device(opencl: dict) -> dict:
    [device] = [d for d in opencl["devices"] if d["platform"] == "Portable Computing Language"]
    return device


def test_pocl_builds_and_runs_the_kernel_and_still_does_not_count():
    device = pocl_device(pocl())
    assert device["work"] == "passed", device
    assert device["counted"] is False and "kernel was built from source, ran and checked" in device["reason"]


def test_pocl_kernel_that_computes_wrongly_is_caught(tmp_path):
    device = pocl_device(pocl(mutated_probe(tmp_path, "c[i] = a[i] + b[i];", "c[i] = a[i] - b[i];")))
    assert (device["work"], device["work_step"], device["work_error"]) == ("failed", "result check", "wrong_result")
    assert device["counted"] is False and "the check kernel stopped at result check" in device["reason"]


def test_pocl_build_failure_gives_the_build_log(tmp_path):
    device = pocl_device(pocl(mutated_probe(tmp_path, "c[i] = a[i] + b[i];", "c[i] = a[i] + not_declared[i];")))
    assert (device["work_step"], device["work_error"]) == ("clBuildProgram", "CL_BUILD_PROGRAM_FAILURE")
    assert device["work_detail"].startswith("build log: ")
    assert "not_declared" in device["work_detail"]


def test_pocl_hung_kernel_is_killed_at_the_deadline_naming_the_call(tmp_path):
    opencl = pocl(mutated_probe(tmp_path, "if (i < n) c[i]", "for (;;) {} c[i]"), timeout=20)
    assert opencl["error"] == "timeout"
    call = opencl["stopped_at"].split(" on ", 1)[0]
    assert call in ("clEnqueueNDRangeKernel", "clFinish"), opencl["stopped_at"]
    assert "Portable Computing Language" in opencl["stopped_at"]
