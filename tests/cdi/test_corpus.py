"""The project's spec corpus (tests/cdi/corpus: files in the shapes real generators publish), read
as the engines' CDI library reads it; the expectations are the corpus's expected.json."""

from __future__ import annotations

import pytest

from cgpu.cdi.parse import SpecError, parse_spec
from tests.conftest import CORPUS, corpus_expected

EXPECTED = corpus_expected()
ACCEPTED = sorted(name for name, want in EXPECTED.items() if "error" not in want and not want.get("templated"))
REJECTED = sorted(name for name, want in EXPECTED.items() if "error" in want)
TEMPLATED = sorted(name for name, want in EXPECTED.items() if want.get("templated"))


def read(name: str) -> bytes:
    return (CORPUS / name).read_bytes()


def shape(spec) -> dict:
    return {"kind": spec.kind, "cdiVersion": spec.version, "devices": [device.name for device in spec.devices]}


def test_every_file_is_covered():
    on_disk = {path.name for path in CORPUS.iterdir() if path.suffix in (".json", ".yaml")} - {"expected.json"}
    assert on_disk == set(EXPECTED)
    assert len(ACCEPTED) >= 12 and len(REJECTED) >= 3 and len(TEMPLATED) >= 3


@pytest.mark.parametrize("name", ACCEPTED)
def test_accepted(name):
    spec = parse_spec(read(name), path=name, priority=0)
    assert shape(spec) == {key: EXPECTED[name][key] for key in ("kind", "cdiVersion", "devices")}
    assert spec.warnings == ()


@pytest.mark.parametrize("name", REJECTED)
def test_rejected(name):
    with pytest.raises(SpecError) as caught:
        parse_spec(read(name), path=name, priority=0)
    assert caught.value.message.startswith(EXPECTED[name]["error"]) and caught.value.by_library


@pytest.mark.parametrize("name", TEMPLATED)
def test_templated(name):
    with pytest.raises(SpecError, match="not valid YAML"):
        parse_spec(read(name), path=name, priority=0)
    spec = parse_spec(read(name).replace(b"{{ .driverRoot }}", b"/driver-root"), path=name, priority=0)
    assert shape(spec) == {key: EXPECTED[name][key] for key in ("kind", "cdiVersion", "devices")}
    assert all(node.host_path.startswith("/driver-root/") for node in spec.edits.device_nodes)


def test_full_nvidia_spec_content():
    spec = parse_spec(read("nvidia-ctk-nvml-full.yaml"), path="x", priority=0)
    assert [node.path for node in spec.edits.device_nodes] == [
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidiactl",
    ]
    assert any(m.container_path.endswith("libcuda.so.570.172.08") for m in spec.edits.mounts)
    assert {hook.hook_name for hook in spec.edits.hooks} == {"createContainer"}
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec.edits.env


def test_the_json_forms_equal_the_yaml_forms():
    for stem in ("nvidia-nvml-trimmed", "nvidia-wsl-trimmed"):
        as_json = parse_spec(read(f"{stem}.json"), path="a.json", priority=0)
        as_yaml = parse_spec(read(f"{stem}.yaml"), path="a.yaml", priority=0)
        assert shape(as_json) == shape(as_yaml)
        assert [d.edits for d in as_json.devices] == [d.edits for d in as_yaml.devices]
