"""The probe against the real loaders and the software drivers a CPU-only machine has: found,
named, and never counted; and a clean answer where nothing is installed or registered."""

from __future__ import annotations

from tests.probe.conftest import clean_env, lavapipe_manifest, needs_pocl, needs_vulkan_loader, run_probe


def test_lavapipe_is_found_and_rejected_by_name():
    lavapipe_manifest()
    vulkan = run_probe("vulkan")["apis"]["vulkan"]
    assert vulkan["available"] is False
    assert vulkan["error"] is None
    assert "libvulkan.so.1" in vulkan["library"]
    llvmpipe = [d for d in vulkan["devices"] if "llvmpipe" in d["name"]]
    assert llvmpipe, vulkan
    device = llvmpipe[0]
    assert device["counted"] is False
    assert (device["type"], device["type_name"]) == (4, "CPU")
    assert (device["driver_id"], device["driver_id_name"]) == (13, "MESA_LLVMPIPE")
    assert device["vendor_id"] == "0x10005"
    assert "llvmpipe" in device["reason"] and "software" in device["reason"]
    assert "llvmpipe" in vulkan["summary"]
    assert any("libvulkan_lvp" in path for path in vulkan["drivers_loaded"])


def test_pocl_cpu_device_is_found_and_rejected_by_type():
    needs_pocl()
    opencl = run_probe("opencl")["apis"]["opencl"]
    assert opencl["available"] is False
    assert "libOpenCL.so" in opencl["library"]
    assert "Portable Computing Language" in opencl["platforms"]
    [device] = [d for d in opencl["devices"] if d["platform"] == "Portable Computing Language"]
    assert device["counted"] is False
    assert (device["type"], device["type_name"]) == (2, "CPU")
    assert "PoCL" in device["reason"]
    assert any("libpocl" in path for path in opencl["drivers_loaded"])


def test_empty_driver_dirs_give_clean_absent_answers(tmp_path):
    needs_vulkan_loader()
    needs_pocl()
    env = clean_env(VK_DRIVER_FILES=str(tmp_path), OCL_ICD_VENDORS=str(tmp_path))
    apis = run_probe("vulkan", "opencl", env=env)["apis"]
    assert apis["vulkan"]["error"] == "VK_ERROR_INCOMPATIBLE_DRIVER"
    assert "no Vulkan driver manifest" in apis["vulkan"]["summary"]
    assert apis["opencl"]["error"] == "CL_PLATFORM_NOT_FOUND_KHR"
    assert "/etc/OpenCL/vendors" in apis["opencl"]["summary"]
    for api in ("vulkan", "opencl"):
        assert apis[api]["available"] is False and apis[api]["devices"] == []


def test_missing_libraries_are_absent_not_errors():
    data = run_probe("cuda", "rocm", "directml", env=clean_env(LD_LIBRARY_PATH="/nonexistent"))
    for api in ("cuda", "rocm"):
        assert data["apis"][api]["error"] == "library_not_found"
        assert data["apis"][api]["library"] is None
    assert "libcuda.so.1" in data["apis"]["cuda"]["summary"]
    assert data["apis"]["directml"]["error"] == "no_device_node"
    assert data["apis"]["metal"]["error"] == "not_probed"


def test_metal_is_never_available():
    metal = run_probe("metal")["apis"]["metal"]
    assert metal["available"] is False and "never" in metal["summary"]


def test_unregistered_nvidia_opencl_driver_is_named(build, tmp_path):
    """NVIDIA's compute-only containers get libnvidia-opencl.so.1 without its .icd registration."""
    needs_pocl()
    library = build("fake_hsa.c", "libnvidia-opencl.so.1")  # any loadable library with that name
    env = clean_env(LD_LIBRARY_PATH=str(library.parent), OCL_ICD_VENDORS=str(tmp_path))
    opencl = run_probe("opencl", env=env)["apis"]["opencl"]
    assert opencl["error"] == "CL_PLATFORM_NOT_FOUND_KHR"
    assert "libnvidia-opencl.so.1 is here but not registered" in opencl["summary"]
    assert "/etc/OpenCL/vendors/nvidia.icd" in opencl["summary"]


def test_nvidia_container_without_graphics_capability_is_told_why_vulkan_is_missing(tmp_path):
    needs_vulkan_loader()
    env = clean_env(VK_DRIVER_FILES=str(tmp_path), NVIDIA_DRIVER_CAPABILITIES="compute,utility")
    vulkan = run_probe("vulkan", env=env)["apis"]["vulkan"]
    assert vulkan["error"] == "VK_ERROR_INCOMPATIBLE_DRIVER"
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility lacks graphics" in vulkan["summary"]
    env["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility,graphics"
    assert "lacks graphics" not in run_probe("vulkan", env=env)["apis"]["vulkan"]["summary"]
