"""The published specs in the reference folder, read as the reference library reads them
(expectations from that folder's README)."""

from __future__ import annotations

import pytest

from cgpu.cdi.parse import SpecError, parse_spec
from tests.conftest import SHARED

REAL = SHARED / "reference" / "cdi-real"

# file -> (kind, cdiVersion, device names) for the accepted ones, or the start of the message
ACCEPTED = {
    "DERIVED_amd-ctk_shape-from-source_NOT-PUBLISHED.json": ("amd.com/gpu", "0.6.0", ["0", "all"]),
    "cncf-cdi_README_full-blown-vendor.json": ("vendor.com/device", "0.6.0", ["myDevice"]),
    "cncf-cdi_TUTORIAL_sensor_v1.1.0.yaml": ("tutorial.cdi.cncf.io/sensor", "1.1.0", ["read-write", "read-only"]),
    "cncf-cdi_schema-testdata_good_minimal.json": ("vendor.com/device", "0.3.0", ["myDevice"]),
    "cncf-cdi_schema-testdata_good_spec-example.json": ("vendor.com/device", "0.6.0", ["myDevice"]),
    "docker-desktop-venus_yaml-in-json-file.json": ("docker.com/gpu", "0.6.0", ["venus"]),
    "intel-device-plugins_gpu_cdi-md_example.yaml": ("intel.com/gpu", "0.5.0", ["gpu0"]),
    "lf-edge-eve_jetson-thor_jp7_csv-mode.yaml": ("nvidia.com/gpu", "0.5.0", ["0", "all"]),
    "lf-edge-eve_jetson-xavier-nx_jp5_csv-mode.yaml": ("nvidia.com/xavier-gpu", "0.5.0", ["0", "all"]),
    "nvidia-ctk-1.17.8_nvml_x86_64_driver-575.64.03.yaml": (
        "nvidia.com/gpu",
        "0.5.0",
        ["0", "GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e", "all"],
    ),
    "nvidia-ctk_wsl_nvmdi_embedded-in-buildx-driver-code.yaml": ("nvidia.com/gpu", "0.3.0", ["all"]),
    "ramalama-testdata_nvml_trimmed.json": (
        "nvidia.com/gpu",
        "0.5.0",
        ["0", "GPU-08b3c2e8-cb7b-ea3f-7711-a042c580b3e8", "all"],
    ),
    "ramalama-testdata_nvml_trimmed.yaml": (
        "nvidia.com/gpu",
        "0.5.0",
        ["0", "GPU-08b3c2e8-cb7b-ea3f-7711-a042c580b3e8", "all"],
    ),
    "ramalama-testdata_wsl_trimmed.json": ("nvidia.com/gpu", "0.3.0", ["all"]),
    "ramalama-testdata_wsl_trimmed.yaml": ("nvidia.com/gpu", "0.3.0", ["all"]),
}
REJECTED = {
    "cncf-cdi_README_annotations_MALFORMED.json": "not valid YAML",
    "cncf-cdi_schema-testdata_bad_empty.json": "no Spec data",
    "cncf-cdi_schema-testdata_bad_explicit-empty.json": 'invalid version ""',
}
# Test expectations with a literal Go template: not YAML until substituted.
TEMPLATED = {
    "nvidia-ctk-HEAD_testdata_management_enable-chmod.yaml": ("example.com/device", "0.5.0", ["all"]),
    "nvidia-ctk-HEAD_testdata_nvml_default.yaml": ("example.com/device", "0.5.0", ["0", "all"]),
    "nvidia-ctk-HEAD_testdata_nvml_disable-hook-all.yaml": ("example.com/device", "0.5.0", ["0", "all"]),
}

pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"{REAL} is not present")


def read(name: str) -> bytes:
    return (REAL / name).read_bytes()


def test_every_file_is_covered():
    on_disk = {path.name for path in REAL.iterdir() if path.suffix in (".json", ".yaml")}
    assert on_disk == set(ACCEPTED) | set(REJECTED) | set(TEMPLATED)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted(name):
    spec = parse_spec(read(name), path=name, priority=0)
    assert (spec.kind, spec.version, [device.name for device in spec.devices]) == ACCEPTED[name]
    assert spec.warnings == ()


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_rejected(name):
    with pytest.raises(SpecError) as caught:
        parse_spec(read(name), path=name, priority=0)
    assert caught.value.message.startswith(REJECTED[name]) and caught.value.by_library


@pytest.mark.parametrize("name", sorted(TEMPLATED))
def test_templated(name):
    with pytest.raises(SpecError, match="not valid YAML"):
        parse_spec(read(name), path=name, priority=0)
    spec = parse_spec(read(name).replace(b"{{ .driverRoot }}", b"/driver-root"), path=name, priority=0)
    assert (spec.kind, spec.version, [device.name for device in spec.devices]) == TEMPLATED[name]
    assert all(node.host_path.startswith("/driver-root/") for node in spec.edits.device_nodes)


def test_real_nvidia_spec_content():
    spec = parse_spec(read("nvidia-ctk-1.17.8_nvml_x86_64_driver-575.64.03.yaml"), path="x", priority=0)
    assert [node.path for node in spec.edits.device_nodes] == [
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidiactl",
    ]
    assert any(m.container_path.endswith("libcuda.so.575.64.03") for m in spec.edits.mounts)
    assert {hook.hook_name for hook in spec.edits.hooks} == {"createContainer"}
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec.edits.env
