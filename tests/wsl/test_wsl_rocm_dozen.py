"""WSL beyond CUDA and DirectML: ROCm through AMD's librocdxg over /dev/dxg, Vulkan through Mesa's Dozen
over D3D12, each with what the image must bring; Dozen never counted on an NVIDIA adapter (microsoft/wslg#1492).
The real probe.sh runs in busybox distros behind the wsl.exe stand-in."""

from __future__ import annotations

import pytest

from cgpu.backends.wsl import backend
from tests.wsl.test_wsl_backend import LOCAL_PROBE, answer, dxcore_adapter, probe


@pytest.fixture
def with_local_probe(monkeypatch):
    monkeypatch.setattr(backend, "_local_probe_source", lambda report: LOCAL_PROBE)


def _listing(*adapters):
    hardware = [a for a in adapters if a["hardware"]]
    return answer(True, f"D3D12 (DirectML) has {len(hardware)} hardware adapter(s)", adapters)


NO_CUDA = answer(False, "no libcuda.so.1")


def test_a_supported_amd_gpu_gets_rocm_through_librocdxg(fake_wsl, with_local_probe):
    distro = fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().amd()
    distro.file("opt/rocm-7.2.0/lib/librocdxg.so", b"\x7fELF")
    distro.python(directml=_listing(dxcore_adapter("AMD Radeon RX 7900 XTX", "0x1002", "0x744c")), cuda=NO_CUDA)
    failed, report = probe(distro="Ubuntu")
    assert not failed, report["problems"]
    assert report["containers"] == ["rocm", "vulkan", "directml"]
    rocm = report["apis"]["rocm"]
    assert rocm["image_needs"] == ["glibc", "rocm-runtime", "rocm-dxg"]
    evidence = report["evidence"]["rocm"]
    assert "HSA_ENABLE_DXG_DETECTION=1" in evidence and "librocdxg" in evidence
    assert "/opt/rocm-7.2.0/lib/librocdxg.so" in evidence  # the distro's copy, to mount
    (device,) = report["devices"]
    assert device["apis"] == ["rocm", "vulkan", "directml"]


def test_an_apus_integrated_gpu_is_matched_by_its_dxcore_name(fake_wsl, with_local_probe):
    distro = fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().amd()
    distro.python(directml=_listing(dxcore_adapter("AMD Radeon(TM) 8060S Graphics", "0x1002", "0x1586")), cuda=NO_CUDA)
    failed, report = probe(distro="Ubuntu")
    assert report["apis"]["rocm"]["state"] == "provided"
    assert "mount it" not in report["evidence"]["rocm"]  # no librocdxg in this distro: the image brings it


def test_an_amd_gpu_off_librocdxgs_matrix_is_unknown_not_a_yes(fake_wsl, with_local_probe):
    distro = fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().amd()
    distro.python(directml=_listing(dxcore_adapter("AMD Radeon RX 6800 XT", "0x1002", "0x73bf")), cuda=NO_CUDA)
    failed, report = probe(distro="Ubuntu")
    assert report["apis"]["rocm"]["state"] == "unknown"
    assert "does not list" in report["evidence"]["rocm"] and "rocminfo" in report["evidence"]["rocm"]
    assert "rocm" not in report["devices"][0]["apis"]


def test_an_amd_driver_store_without_enumeration_leaves_rocm_and_dozen_unknown(fake_wsl):
    fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().amd()
    failed, report = probe(distro="Ubuntu")
    assert report["containers"] == ["directml"]
    assert report["apis"]["rocm"]["state"] == "unknown" and "install python3" in report["evidence"]["rocm"]
    assert report["apis"]["vulkan"]["state"] == "unknown" and "WARP" in report["evidence"]["vulkan"]


def test_rocm_needs_libdxcore(fake_wsl, with_local_probe):
    distro = fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs("libd3d12.so", "libd3d12core.so").amd()
    distro.python(directml=_listing(dxcore_adapter("AMD Radeon RX 7900 XTX", "0x1002", "0x744c")), cuda=NO_CUDA)
    failed, report = probe(distro="Ubuntu")
    assert report["apis"]["rocm"]["state"] == "absent" and "libdxcore.so" in report["evidence"]["rocm"]


def test_dozen_is_experimental_on_intel(fake_wsl, with_local_probe):
    distro = fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().intel()
    distro.file("usr/share/vulkan/icd.d/dzn_icd.x86_64.json", "{}")
    distro.python(
        directml=_listing(
            dxcore_adapter("Intel(R) Arc(TM) A770 Graphics", "0x8086", "0x56a0"),
            dxcore_adapter("Microsoft Basic Render Driver", "0x1414", "0x008c", hardware=False),
        ),
        cuda=NO_CUDA,
    )
    failed, report = probe(distro="Ubuntu")
    assert report["containers"] == ["vulkan", "directml"]
    assert report["apis"]["vulkan"]["image_needs"] == ["glibc", "vulkan-loader", "mesa-dozen"]
    evidence = report["evidence"]["vulkan"]
    assert evidence.startswith("experimental:") and "not a conformant" in evidence
    assert "Intel(R) Arc(TM) A770 Graphics" in evidence and "Basic Render" not in evidence
    assert "has a Dozen ICD too" in evidence
    assert report["apis"]["rocm"]["state"] == "absent"  # no AMD GPU: librocdxg has nothing to reach
    apis = {d["name"]: d["apis"] for d in report["devices"]}
    assert apis == {"Intel(R) Arc(TM) A770 Graphics": ["vulkan", "directml"], "Microsoft Basic Render Driver": []}


def test_dozen_on_an_nvidia_adapter_is_unknown_with_the_crash_named(fake_wsl, with_local_probe):
    distro = fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().nvidia().intel()
    distro.python(
        directml=_listing(
            dxcore_adapter("NVIDIA GeForce RTX 3090", "0x10de", "0x2204"),
            dxcore_adapter("Intel(R) UHD Graphics 770", "0x8086", "0x4680"),
        ),
        cuda=answer(True, "CUDA 12.9 works with 1 device(s)", [{"name": "NVIDIA GeForce RTX 3090", "counted": True}]),
    )
    failed, report = probe(distro="Ubuntu")
    assert report["containers"] == ["cuda", "directml"]
    assert report["apis"]["vulkan"]["state"] == "unknown"
    assert "wslg#1492" in report["evidence"]["vulkan"] and "crash" in report["evidence"]["vulkan"]


def test_dozen_on_nvidia_without_enumeration_is_unknown_too(fake_wsl):
    fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().nvidia()
    failed, report = probe(distro="Ubuntu")
    assert report["containers"] == ["cuda", "directml"]
    assert report["apis"]["vulkan"]["state"] == "unknown" and "wslg#1492" in report["evidence"]["vulkan"]


def test_no_gpu_no_dozen(fake_wsl):
    fake_wsl.distro("Ubuntu").glibc().wsl_libs()  # no /dev/dxg
    failed, report = probe(distro="Ubuntu")
    assert report["apis"]["vulkan"]["state"] == "absent" and report["apis"]["rocm"]["state"] == "absent"
