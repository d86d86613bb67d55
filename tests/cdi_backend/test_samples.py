"""`cgpu probe --backend cdi` on every folder of cdi-samples/, as a user runs it (a real process)."""

from __future__ import annotations

import json
import os

import pytest

from tests.cdi_backend.helpers import SAMPLES
from tests.conftest import REPO, validate_report

# sample spec dir, host tree, the answer, a phrase the output must explain it with
CASES = [
    ("nvidia-current", "nvidia-580", ["cuda", "vulkan", "opencl"], "/etc/OpenCL/vendors/nvidia.icd"),
    ("nvidia-1.17", "nvidia-575", ["cuda", "vulkan"], "partial: "),
    ("nvidia-1.17", "nvidia-580", [], "stale spec"),
    ("nvidia-compute-only", "nvidia-580", ["cuda"], "mounts no libGLX_nvidia"),
    ("nvidia-8gpu-mig", "nvidia-580", ["cuda", "vulkan", "opencl"], "is a MIG instance without graphics"),
    ("nvidia-no-hooks", "nvidia-580", [], "--disable-hook all"),
    ("nvidia-wsl", "wsl", ["cuda"], "libcuda.so.1.1"),
    ("jetson-xavier", "jetson-xavier", ["cuda", "vulkan"], "/dev/nvmap"),
    ("docker-desktop-venus", "docker-desktop", ["vulkan"], "mesa-venus"),
    ("amd", "amd", ["rocm", "vulkan", "opencl"], "ROCm runtime"),
    ("intel", "intel", ["vulkan", "opencl"], "Intel GPU"),
    ("lavapipe", "software", [], "a software driver that never counts"),
]


@pytest.mark.parametrize(("sample", "host", "expected", "phrase"), CASES, ids=[f"{c[0]}@{c[1]}" for c in CASES])
def test_sample_json(run_cli, sample, host, expected, phrase):
    code, out, err = run_cli(
        "probe",
        "--backend",
        "cdi",
        "--spec-dir",
        f"cdi-samples/{sample}/spec",
        "--root",
        f"cdi-samples/hosts/{host}",
        "--engine",
        "none",
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    validate_report(report)
    assert report["containers"] == expected
    assert phrase in json.dumps(report)
    assert report["devices"], "every sample defines devices"


def test_human_output_names_devices_apis_and_problems(run_cli):
    code, out, err = run_cli(
        "probe",
        "--backend",
        "cdi",
        "--spec-dir",
        "cdi-samples/nvidia-1.17/spec",
        "--root",
        "cdi-samples/hosts/nvidia-580",
        "--engine",
        "none",
    )
    assert code == 0, err
    assert "nvidia.com/gpu=0" in out and "blocked" in out
    assert "containers get: none" in out
    assert "problems:" in out and "stale spec" in out


def test_every_sample_folder_is_tested_and_listed_in_the_readme():
    folders = {p.name for p in SAMPLES.iterdir() if p.is_dir()} - {"hosts", "broken"}
    assert folders == {c[0] for c in CASES}
    readme = (SAMPLES / "README.md").read_text()
    for sample, host, expected, _ in CASES:
        assert f"--spec-dir cdi-samples/{sample}/spec --root cdi-samples/hosts/{host}" in readme
        assert (", ".join(expected) or "nothing") in readme


def test_bad_device_name_and_bad_engine_are_refused(run_cli):
    """Bad usage prints the reason and no report: an empty `containers` would pass for an answer."""
    code, out, err = run_cli(
        "probe",
        "--backend",
        "cdi",
        "--spec-dir",
        "cdi-samples/amd/spec",
        "--root",
        "cdi-samples/hosts/amd",
        "--engine",
        "none",
        "--device",
        "gpu=0",
        "--json",
    )
    assert code == 2 and out == ""
    assert "not a CDI device name" in err
    code, out, err = run_cli(
        "probe", "--backend", "cdi", "--spec-dir", "cdi-samples/amd/spec", "--engine", "lxd@1.0", "--json"
    )
    assert code == 2 and out == "" and "lxd" in err


def test_missing_root_is_refused(run_cli, tmp_path):
    code, out, err = run_cli(
        "probe", "--backend", "cdi", "--spec-dir", "cdi-samples/amd/spec", "--root", str(tmp_path / "nope"), "--json"
    )
    assert code == 2 and out == "" and "is not a directory" in err


def test_a_spec_dir_given_that_does_not_exist_is_a_warning(run_cli, tmp_path):
    code, out, _ = run_cli(
        "probe",
        "--backend",
        "cdi",
        "--spec-dir",
        str(tmp_path / "nope"),
        "--spec-dir",
        "cdi-samples/amd/spec",
        "--root",
        "cdi-samples/hosts/amd",
        "--engine",
        "none",
        "--json",
    )
    report = json.loads(out)
    assert code == 0 and report["containers"] == ["rocm", "vulkan", "opencl"]
    assert [(p["severity"], p["source"]) for p in report["problems"]] == [("warning", str(tmp_path / "nope"))]


def test_a_fifo_where_the_spec_mounts_a_manifest_is_not_waited_on(run_cli, tmp_path):
    """A hostile or broken host: the Vulkan ICD a spec mounts is a FIFO. Reading it would block
    forever; cgpu refuses to read it and answers."""
    import shutil

    root = tmp_path / "root"
    shutil.copytree(REPO / "cdi-samples/hosts/intel", root, symlinks=True)
    (root / "etc").mkdir()
    os.mkfifo(root / "etc/icd.json")
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "intel.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: intel.com/gpu\ndevices:\n- name: gpu0\n  containerEdits:\n"
        "    deviceNodes: [{path: /dev/dri/renderD128, hostPath: /dev/dri/renderD128, type: c}]\n"
        "    mounts: [{hostPath: /etc/icd.json, containerPath: /etc/vulkan/icd.d/x.json, options: [ro, bind]}]\n"
    )
    code, out, err = run_cli(
        "probe", "--backend", "cdi", "--spec-dir", str(specs), "--root", str(root), "--json", timeout=30
    )
    assert code == 0, err
    assert json.loads(out)["containers"] == ["vulkan", "opencl"]
