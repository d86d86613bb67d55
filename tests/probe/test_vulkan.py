"""Vulkan through the real Khronos loader and a fake ICD reporting chosen devices and failures,
including the Venus (krunkit) cases."""

from __future__ import annotations

import pytest

from tests.probe.conftest import clean_env, lavapipe_manifest, needs_vulkan_loader, run_probe

VENUS_M2 = "1,22,0x106b,0x1,{alloc},{map},Virtio-GPU Venus (Apple M2)"


def vulkan(*manifests, devices: str = "", instance: str = "ok") -> dict:
    needs_vulkan_loader()
    env = clean_env(
        VK_DRIVER_FILES=":".join(str(m) for m in manifests), FAKE_VK_DEVICES=devices, FAKE_VK_INSTANCE=instance
    )
    return run_probe("vulkan", env=env)["apis"]["vulkan"]


def test_discrete_nvidia_gpu_counts(fake_icd):
    result = vulkan(fake_icd(), devices="2,4,0x10de,0x2335,0,0,NVIDIA H200")
    assert result["available"] is True
    [device] = result["devices"]
    assert device["counted"] is True
    assert (device["type"], device["type_name"]) == (2, "DISCRETE_GPU")
    assert (device["vendor_id"], device["device_id"]) == ("0x10de", "0x2335")
    assert (device["driver_id"], device["driver_id_name"]) == (4, "NVIDIA_PROPRIETARY")
    assert device["api_version"] == "1.3.250"
    assert "allocated" not in device  # only Venus gets the allocation test


def test_venus_on_integrated_gpu_that_allocates_counts(fake_icd):
    result = vulkan(fake_icd("virtio_icd.aarch64.json"), devices=VENUS_M2.format(alloc=0, map=0))
    assert result["available"] is True
    [device] = result["devices"]
    assert device["driver_id_name"] == "MESA_VENUS" and device["driver_name"] == "venus"
    assert device["allocated"] is True and device["counted"] is True
    assert "Venus" in device["reason"]


def test_venus_that_cannot_allocate_is_not_counted_and_names_the_fix(fake_icd):
    result = vulkan(fake_icd("virtio_icd.aarch64.json"), devices=VENUS_M2.format(alloc=-1, map=0))
    assert result["available"] is False
    [device] = result["devices"]
    assert device["allocated"] is False and device["counted"] is False
    assert device["allocation_error"] == "vkAllocateMemory: VK_ERROR_OUT_OF_HOST_MEMORY"
    assert "slp/mesa-libkrun-vulkan" in device["reason"]
    assert "Venus" in result["summary"]


def test_venus_that_cannot_map_is_not_counted(fake_icd):
    result = vulkan(fake_icd(), devices=VENUS_M2.format(alloc=0, map=-5))
    [device] = result["devices"]
    assert device["allocated"] is False and device["counted"] is False
    assert device["allocation_error"] == "vkMapMemory: VK_ERROR_MEMORY_MAP_FAILED"


def test_venus_on_a_cpu_device_is_not_counted(fake_icd):
    result = vulkan(fake_icd(), devices="4,22,0x10005,0x0,0,0,Virtio-GPU Venus (llvmpipe (LLVM 17.0.6, 128 bits))")
    [device] = result["devices"]
    assert device["counted"] is False and result["available"] is False
    assert "CPU" in device["reason"] and "Venus" in device["reason"]


def test_venus_next_to_llvmpipe_counts_only_venus(fake_icd):
    result = vulkan(fake_icd("virtio_icd.x86_64.json"), lavapipe_manifest(), devices=VENUS_M2.format(alloc=0, map=0))
    assert result["available"] is True
    counted = {d["name"]: d["counted"] for d in result["devices"]}
    assert counted["Virtio-GPU Venus (Apple M2)"] is True
    assert [v for k, v in counted.items() if "llvmpipe" in k] == [False]
    assert result["summary"].startswith("Vulkan works with 1 GPU(s): Virtio-GPU Venus")


def test_stock_mesa_out_of_host_memory_aborts_every_driver(fake_icd):
    """krunkit with stock Mesa: Venus fails vkCreateInstance with OOM and the loader gives up on all
    drivers, so even llvmpipe vanishes."""
    result = vulkan(fake_icd("virtio_icd.aarch64.json"), lavapipe_manifest(), instance="-1")
    assert result["available"] is False and result["devices"] == []
    assert result["error"] == "VK_ERROR_OUT_OF_HOST_MEMORY"
    assert "virtio_icd.aarch64.json" in result["summary"]
    assert "slp/mesa-libkrun-vulkan" in result["summary"]


def test_stock_mesa_initialization_failed_alone_is_incompatible_driver(fake_icd):
    result = vulkan(fake_icd("virtio_icd.aarch64.json"), instance="-3")
    assert result["error"] == "VK_ERROR_INCOMPATIBLE_DRIVER"
    assert "Venus" in result["summary"] and "slp/mesa-libkrun-vulkan" in result["summary"]
    assert "Skipping ICD" in result["stderr"]  # the loader's own words, captured


def test_stock_mesa_initialization_failed_next_to_llvmpipe_says_venus_gave_nothing(fake_icd):
    result = vulkan(fake_icd("virtio_icd.aarch64.json"), lavapipe_manifest(), instance="-3")
    assert result["available"] is False and result["error"] is None
    assert [d["counted"] for d in result["devices"]] == [False]
    assert "the Venus driver" in result["summary"] and "gave no device" in result["summary"]


def test_other_device_type_and_unknown_driver_id_are_not_counted_as_software(fake_icd):
    result = vulkan(fake_icd(), devices="0,99,0x1234,0x1,0,0,Mystery Accelerator;3,99,0x1af4,0x1,0,0,Virtual GPU")
    by_name = {d["name"]: d for d in result["devices"]}
    assert by_name["Mystery Accelerator"]["counted"] is False
    assert "OTHER" in by_name["Mystery Accelerator"]["reason"]
    assert by_name["Virtual GPU"]["counted"] is True
    assert by_name["Virtual GPU"]["driver_id_name"] == "UNKNOWN"


@pytest.mark.parametrize(
    ("device", "counted", "reason"),
    [
        ("4,10,0x1ae0,0xc0de,0,0,SwiftShader Device (Subzero)", False, "SwiftShader"),
        ("4,23,0x1414,0x8c,0,0,Microsoft Direct3D12 (Microsoft Basic Render Driver)", False, "WARP"),
        ("1,23,0x10de,0x2335,0,0,Microsoft Direct3D12 (NVIDIA H200)", True, "integrated gpu"),
        ("4,99,0x8086,0x1,0,0,Some CPU Driver", False, "deviceType CPU"),
    ],
)
def test_software_and_dozen_devices(fake_icd, device, counted, reason):
    [result] = vulkan(fake_icd(), devices=device)["devices"]
    assert result["counted"] is counted
    assert reason in result["reason"]
