"""When no device resolves, the evidence names the cause the scan's problems have (their kind, never
their wording), and only a node with no spec at all is told to generate one; a spec dir cgpu cannot
list leaves the APIs it may decide unknown, naming the dir."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from cgpu.node.host import NodeFiles
from tests.cdi_backend.helpers import HOSTS, SAMPLES, probe

NVIDIA_SPEC = SAMPLES / "nvidia-current/spec/nvidia.yaml"
HOST = HOSTS / "nvidia-580"


def _kinds(report: dict) -> set[str]:
    return {p["kind"] for p in report["problems"] if p["severity"] in ("error", "warning")}


@pytest.mark.parametrize("code", [errno.EACCES, errno.EIO, errno.ENOTDIR])
def test_a_spec_dir_cgpu_cannot_list_makes_the_apis_unknown(tmp_path: Path, monkeypatch, code: int):
    locked = tmp_path / "locked"
    locked.mkdir()
    real_entries = NodeFiles.entries

    def entries(self: NodeFiles, path: str) -> list[str]:
        if path.endswith("/locked"):
            raise OSError(code, "refused")
        return real_entries(self, path)

    monkeypatch.setattr(NodeFiles, "entries", entries)
    report = probe([locked], HOST)
    for api in ("cuda", "vulkan", "opencl", "rocm"):
        assert report["apis"][api]["state"] == "unknown", api
        assert str(locked) in report["evidence"][api]
    assert [p["kind"] for p in report["problems"] if p["source"] == str(locked) and p["severity"] != "info"] == [
        "spec-dir"
    ]
    assert "no-spec" not in _kinds(report)  # a spec may be there: nobody is told to generate one


def test_an_unlistable_dir_beside_a_spec_leaves_what_the_spec_gives(tmp_path: Path, monkeypatch):
    good, locked = tmp_path / "good", tmp_path / "locked"
    good.mkdir()
    locked.mkdir()
    shutil.copy(NVIDIA_SPEC, good / "nvidia.yaml")
    real_entries = NodeFiles.entries
    monkeypatch.setattr(
        NodeFiles,
        "entries",
        lambda self, path: (
            (_ for _ in ()).throw(PermissionError(13, "denied"))
            if path.endswith("/locked")
            else real_entries(self, path)
        ),
    )
    report = probe([good, locked], HOST)
    assert report["apis"]["cuda"]["state"] == "provided"
    assert report["apis"]["rocm"]["state"] == "unknown"  # the locked dir may hold an AMD spec


def test_two_files_defining_one_device_are_the_cause_not_a_missing_spec(tmp_path: Path):
    folder = tmp_path / "cdi"
    folder.mkdir()
    shutil.copy(NVIDIA_SPEC, folder / "a.yaml")
    shutil.copy(NVIDIA_SPEC, folder / "b.yaml")
    report = probe([folder], HOST)
    assert report["containers"] == []
    assert report["evidence"]["cuda"].startswith("not provided: two spec files define the same device")
    assert "nvidia-ctk" not in report["evidence"]["cuda"]
    assert "no-spec" not in _kinds(report)


def test_a_spec_the_library_rejects_is_the_cause(tmp_path: Path):
    folder = tmp_path / "cdi"
    folder.mkdir()
    (folder / "nvidia.yaml").write_text("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices: []\n")
    report = probe([folder], HOST)
    assert "rejects" in report["evidence"]["cuda"] and str(folder / "nvidia.yaml") in report["evidence"]["cuda"]
    assert "no-spec" not in _kinds(report)


def test_a_spec_dir_that_is_a_file_is_the_cause(tmp_path: Path):
    (tmp_path / "cdi").write_text("not a dir")
    report = probe([tmp_path / "cdi"], HOST)
    assert report["apis"]["cuda"]["state"] == "absent"  # the engine reads nothing there either
    assert str(tmp_path / "cdi") in report["evidence"]["cuda"] and "nvidia-ctk" not in report["evidence"]["cuda"]
    assert "no-spec" not in _kinds(report)


def test_an_engine_that_reads_no_cdi_spec_is_the_cause(tmp_path: Path):
    folder = tmp_path / "cdi"
    folder.mkdir()
    shutil.copy(NVIDIA_SPEC, folder / "nvidia.yaml")
    report = probe([folder], HOST, engine="containerd@1.6.20")
    assert report["containers"] == []
    assert "reads no CDI specs at all" in report["evidence"]["cuda"]
    assert "nvidia-ctk" not in report["evidence"]["cuda"]
    assert "cdi-off" in _kinds(report) and "no-spec" not in _kinds(report)


def test_only_no_spec_at_all_is_told_to_generate_one(tmp_path: Path):
    folder = tmp_path / "cdi"
    folder.mkdir()
    report = probe([folder], HOST)
    assert "generate a spec with `nvidia-ctk cdi generate" in report["evidence"]["cuda"]
    assert "no-spec" in _kinds(report)


def test_the_labels_of_an_unlistable_spec_dir_say_unknown_and_why(tmp_path: Path, monkeypatch):
    from cgpu.fleet.nfd import NAMESPACE, labels

    locked = tmp_path / "locked"
    locked.mkdir()
    real_entries = NodeFiles.entries

    def entries(self: NodeFiles, path: str) -> list[str]:
        if path.endswith("/locked"):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_entries(self, path)

    monkeypatch.setattr(NodeFiles, "entries", entries)
    found = labels(probe([locked], HOST))
    assert found[f"{NAMESPACE}/cuda"] == "unknown" and found[f"{NAMESPACE}/devices"] == "0"
    assert found[f"{NAMESPACE}/problem"] == "spec-dir"


def test_the_labels_of_a_duplicate_device_name_it_not_a_missing_spec(tmp_path: Path):
    from cgpu.fleet.nfd import NAMESPACE, labels

    folder = tmp_path / "cdi"
    folder.mkdir()
    shutil.copy(NVIDIA_SPEC, folder / "a.yaml")
    shutil.copy(NVIDIA_SPEC, folder / "b.yaml")
    assert labels(probe([folder], HOST))[f"{NAMESPACE}/problem"] == "duplicate-device"
