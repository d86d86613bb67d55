"""ROCm's targets: the gfx target of each AMD GPU from amdkfd's topology under the root decides rocm.
Below gfx9 no ROCm runs it (gfx803: containers/ramalama#1482); a target off ROCm's compatibility matrix
is unknown with HSA_OVERRIDE_GFX_VERSION named (ramalama#1129); Vulkan and OpenCL are judged apart."""

from __future__ import annotations

import shutil
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from cgpu.backends.cdi.rules import ROCM_TARGETS, gfx_name
from cgpu.node.host import HostFS
from tests.cdi_backend.helpers import HOSTS, SAMPLES, probe

AMD_SPEC = SAMPLES / "amd/spec"


def amd_host(tmp_path: Path, *nodes: tuple[int, int]) -> Path:
    """The AMD sample host with amdkfd's topology: a CPU node, then (gfx_target_version, render minor) per GPU."""
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "amd", root, symlinks=True)
    folder = root / "sys/class/kfd/kfd/topology/nodes"
    (folder / "0").mkdir(parents=True)
    (folder / "0/properties").write_text("cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\ndrm_render_minor 0\n")
    for index, (version, minor) in enumerate(nodes, start=1):
        (folder / str(index)).mkdir()
        (folder / str(index) / "properties").write_text(
            f"cpu_cores_count 0\nsimd_count 240\ngfx_target_version {version}\nvendor_id 4098\n"
            f"drm_render_minor {minor}\nnum_sdma_engines 2\n"
        )
    return root


def rocm_of(report: dict, device: str = "amd.com/gpu=0") -> tuple[str, str, str]:
    entry = next(d for d in report["devices"] if d["name"] == device)
    return report["apis"]["rocm"]["state"], report["evidence"]["rocm"], entry["checks"]["rocm"]


def test_the_kernels_encoding_names_rocms_targets():
    assert [gfx_name(v) for v in (80003, 90010, 90402, 100300, 110000, 110502, 120001)] == [
        "gfx803",
        "gfx90a",
        "gfx942",
        "gfx1030",
        "gfx1100",
        "gfx1152",
        "gfx1201",
    ]


def test_a_gfx803_gets_no_rocm_but_vulkan_and_opencl_stand(tmp_path: Path):
    report = probe([AMD_SPEC], amd_host(tmp_path, (80003, 128), (80003, 129)))
    state, evidence, check = rocm_of(report)
    assert state == "absent" and "gfx803" in evidence and "below ROCm's floor" in evidence
    assert "Vulkan (Mesa RADV)" in evidence  # the fix: what a container can use instead
    assert check.startswith("absent: ")
    assert report["apis"]["vulkan"]["state"] == "provided"  # RADV runs on gfx8: judged apart
    assert "rocm" not in report["containers"]


def test_a_target_off_the_matrix_is_unknown_with_the_override_named(tmp_path: Path):
    report = probe([AMD_SPEC], amd_host(tmp_path, (110003, 128), (110003, 129)))  # gfx1103, a Radeon 780M
    state, evidence, check = rocm_of(report)
    assert state == "unknown" and "gfx1103" in evidence
    assert "HSA_OVERRIDE_GFX_VERSION=11.0.0" in evidence
    assert check.startswith("unknown: ")
    device = next(d for d in report["devices"] if d["name"] == "amd.com/gpu=0")
    assert "rocm" not in device["apis"] and device["status"] == "ok"


def test_an_rdna2_sibling_is_pointed_at_gfx1030(tmp_path: Path):
    evidence = rocm_of(probe([AMD_SPEC], amd_host(tmp_path, (100302, 128), (100302, 129))))[1]
    assert "gfx1032" in evidence and "HSA_OVERRIDE_GFX_VERSION=10.3.0" in evidence


def test_a_gfx9_off_the_matrix_names_no_value(tmp_path: Path):
    state, evidence, _ = rocm_of(probe([AMD_SPEC], amd_host(tmp_path, (90006, 128), (90006, 129))))  # MI50
    assert state == "unknown" and "gfx906" in evidence and "HSA_OVERRIDE_GFX_VERSION set to" in evidence


def test_a_supported_target_is_named(tmp_path: Path):
    report = probe([AMD_SPEC], amd_host(tmp_path, (110000, 128), (110000, 129)))
    state, evidence, _ = rocm_of(report)
    assert state == "provided" and "target gfx1100" in evidence
    assert report["apis"]["rocm"]["image_needs"] == ["rocm-runtime"]


def test_without_the_topology_the_answer_is_as_before():
    state, evidence, _ = rocm_of(probe([AMD_SPEC], HOSTS / "amd"))
    assert state == "provided" and "target" not in evidence


def test_the_topology_maps_render_minors_to_targets(tmp_path: Path):
    host = HostFS(str(amd_host(tmp_path, (90010, 128), (110000, 129))))
    assert host.kfd_gfx_targets() == {128: 90010, 129: 110000}


@given(st.text(max_size=200))
def test_any_properties_text_is_read_without_error(text):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "sys/class/kfd/kfd/topology/nodes/1"
        folder.mkdir(parents=True)
        (folder / "properties").write_text(text, errors="surrogateescape")
        found = HostFS(tmp).kfd_gfx_targets()
        assert all(version > 0 for version in found.values())


def test_every_matrix_target_is_a_name_the_kernel_can_write():
    for target in ROCM_TARGETS:
        assert target.startswith("gfx") and int(target[3:-2] or "0") >= 9
