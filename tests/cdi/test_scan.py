"""scan_spec_dirs: discovery, priority, conflicts, per-file errors, engine limits, cache."""

from __future__ import annotations

import os
import shutil

import pytest

from cgpu.cdi import scan as scan_module
from cgpu.cdi.scan import SpecReader, scan_spec_dirs
from cgpu.node import host as host_module

from .conftest import minimal, write


def errors_for(result, path) -> list[str]:
    return [message for severity, source, message in result.problems if source == str(path) and severity == "error"]


def test_reads_json_and_yaml_only_non_recursive(tmp_path):  # cdi.md §8 case 14
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal(kind="example.com/aa"))
    write(etc, "b.json", minimal(kind="example.com/bb"))
    for ignored in ("c.yml", "d.YAML", "e.json~", "f", "g.yaml.bak", "h.JSON"):
        write(etc, ignored, minimal(kind="example.com/ignored"))
    write(etc / "sub.yaml", "inner.yaml", minimal(kind="example.com/nested"))
    write(etc / "sub", "inner.yaml", minimal(kind="example.com/nested"))
    result = scan_spec_dirs([str(etc)])
    assert sorted(result.devices) == ["example.com/aa=gpu0", "example.com/bb=gpu0"]
    assert result.problems == []
    assert [spec.path for spec in result.specs] == [str(etc / "a.yaml"), str(etc / "b.json")]


def test_missing_dirs_are_fine(tmp_path):
    result = scan_spec_dirs([str(tmp_path / "nope"), str(tmp_path / "also-not")])
    assert (result.devices, result.specs, result.problems) == ({}, [], [])


def test_invalid_file_loses_only_its_own_devices(tmp_path):  # case 18, 23
    etc = tmp_path / "etc"
    write(etc, "good.yaml", minimal(kind="example.com/good"))
    bad = write(etc, "bad.yaml", minimal(kind="example.com/bad") + "kind: example.com/again\n")
    write(etc, "broken.json", '{"cdiVersion": "0.3.0" "kind": "x"}')
    result = scan_spec_dirs([str(etc)])
    assert sorted(result.devices) == ["example.com/good=gpu0"]
    assert errors_for(result, bad) == [
        'the CDI library rejects this file: line 7: key "kind" is already set on line 2 (duplicate keys are an error)'
    ]
    assert len(errors_for(result, etc / "broken.json")) == 1


def test_later_dir_wins(tmp_path):  # case 12
    etc, run = tmp_path / "etc", tmp_path / "run"
    write(
        etc,
        "nvidia.yaml",
        minimal(kind="nvidia.com/gpu", names=("0", "GPU-old", "all"), version="0.5.0", env="STALE=1"),
    )
    write(run, "nvidia.yaml", minimal(kind="nvidia.com/gpu", names=("0", "all"), version="0.5.0", env="FRESH=1"))
    result = scan_spec_dirs([str(etc), str(run)])
    assert result.devices["nvidia.com/gpu=0"].spec.path == str(run / "nvidia.yaml")
    assert result.devices["nvidia.com/gpu=all"].device.edits.env == ("FRESH=1",)
    assert result.devices["nvidia.com/gpu=GPU-old"].spec.path == str(etc / "nvidia.yaml")
    assert result.devices["nvidia.com/gpu=GPU-old"].spec.priority == 0
    assert result.devices["nvidia.com/gpu=0"].spec.priority == 1
    assert result.problems == []


def test_same_dir_conflict_removes_the_name_with_an_error_on_both_files(tmp_path):  # case 11
    etc = tmp_path / "etc"
    yaml_path = write(etc, "nvidia.yaml", minimal(kind="nvidia.com/gpu", names=("0", "all"), version="0.5.0"))
    json_path = write(etc, "nvidia.json", minimal(kind="nvidia.com/gpu", names=("all",), version="0.5.0"))
    result = scan_spec_dirs([str(etc)])
    assert sorted(result.devices) == ["nvidia.com/gpu=0"]
    expected = (
        f'conflicting device "nvidia.com/gpu=all" (specs "{yaml_path}", "{json_path}"): two files in the '
        "same spec dir define it, so engines drop it entirely"
    )
    assert errors_for(result, yaml_path) == [expected] and errors_for(result, json_path) == [expected]


def test_different_kinds_never_conflict_and_disjoint_names_merge(tmp_path):
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal(kind="example.com/gpu", names=("a",)))
    write(etc, "b.yaml", minimal(kind="example.com/gpu", names=("b",)))
    write(etc, "c.yaml", minimal(kind="example.com/other", names=("a",)))
    result = scan_spec_dirs([str(etc)])
    assert sorted(result.devices) == ["example.com/gpu=a", "example.com/gpu=b", "example.com/other=a"]


def test_conflict_quirk_removes_the_name_even_when_a_later_dir_defines_it(tmp_path):  # case 13
    etc, run = tmp_path / "etc", tmp_path / "run"
    write(etc, "a.yaml", minimal(kind="nvidia.com/gpu", names=("all",)))
    write(etc, "b.yaml", minimal(kind="nvidia.com/gpu", names=("all",)))
    later = write(run, "nvidia.yaml", minimal(kind="nvidia.com/gpu", names=("all", "gpu1")))
    result = scan_spec_dirs([str(etc), str(run)])
    assert sorted(result.devices) == ["nvidia.com/gpu=gpu1"]
    warnings = [m for s, p, m in result.problems if p == str(later) and s == "warning"]
    assert len(warnings) == 1 and "still drops it" in warnings[0] and str(etc) in warnings[0]


def test_spec_above_the_engine_maximum_is_dropped(tmp_path):
    etc = tmp_path / "etc"
    new = write(etc, "new.yaml", minimal(kind="example.com/new", version="0.6.0"))
    write(etc, "old.yaml", minimal(kind="example.com/old", version="0.5.0"))
    result = scan_spec_dirs([str(etc)], max_version="0.5.0", engine_label="podman 4.3.1")
    assert sorted(result.devices) == ["example.com/old=gpu0"]
    assert [spec.path for spec in result.engine_dropped] == [str(new)]
    assert [spec.path for spec in result.specs] == [str(etc / "old.yaml")]
    assert errors_for(result, new) == [
        "cdiVersion 0.6.0 is newer than podman 4.3.1 accepts (at most 0.5.0): podman 4.3.1 ignores this file, "
        "so its devices are unresolvable there: upgrade to podman 4.7 or later, or use a spec written for "
        "cdiVersion 0.5.0 or older"
    ]
    assert sorted(scan_spec_dirs([str(etc)]).devices) == ["example.com/new=gpu0", "example.com/old=gpu0"]


def test_dropped_spec_cannot_conflict(tmp_path):
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal(kind="example.com/gpu", version="0.3.0"))
    write(etc, "b.yaml", minimal(kind="example.com/gpu", version="v1.0.0"))
    result = scan_spec_dirs([str(etc)], max_version="0.8.0", engine_label="docker 27.5.1")
    assert list(result.devices) == ["example.com/gpu=gpu0"]


def test_warnings_of_valid_specs_are_reported(tmp_path):
    etc = tmp_path / "etc"
    path = write(etc, "g.yaml", minimal(kind="example.net/g"))
    result = scan_spec_dirs([str(etc)], library="main")
    assert list(result.devices) == ["example.net/g=gpu0"]
    assert [(s, p) for s, p, _ in result.problems] == [("warning", str(path))]


def test_symlinked_spec_dir_is_skipped_with_a_warning(tmp_path):
    real = tmp_path / "real"
    write(real, "a.yaml", minimal())
    link = tmp_path / "cdi"
    link.symlink_to(real)
    result = scan_spec_dirs([str(link)])
    assert result.devices == {}
    assert len(result.problems) == 1 and result.problems[0][:2] == ("warning", str(link))
    assert "Docker resolves the link" in result.problems[0][2]


def test_symlinked_files_are_followed_and_broken_ones_reported(tmp_path):
    etc = tmp_path / "etc"
    target = write(tmp_path / "elsewhere", "real.yaml", minimal())
    (etc).mkdir()
    (etc / "linked.yaml").symlink_to(target)
    (etc / "dangling.yaml").symlink_to(tmp_path / "missing.yaml")
    (etc / "dir.yaml").symlink_to(tmp_path / "elsewhere")
    result = scan_spec_dirs([str(etc)])
    assert result.devices["example.com/gpu=gpu0"].spec.path == str(etc / "linked.yaml")
    assert errors_for(result, etc / "dangling.yaml") and errors_for(result, etc / "dir.yaml")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_is_never_opened(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    os.mkfifo(etc / "pipe.yaml")
    write(etc, "ok.yaml", minimal())
    result = scan_spec_dirs([str(etc)])
    assert list(result.devices) == ["example.com/gpu=gpu0"]
    assert "not a regular file" in errors_for(result, etc / "pipe.yaml")[0]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a non-root user to deny reading")
def test_unreadable_file_and_dir(tmp_path):
    etc, locked = tmp_path / "etc", tmp_path / "locked"
    path = write(etc, "a.yaml", minimal())
    write(locked, "b.yaml", minimal(kind="example.com/bb"))
    path.chmod(0)
    locked.chmod(0)
    try:
        result = scan_spec_dirs([str(etc), str(locked)])
    finally:
        locked.chmod(0o755)
    assert result.devices == {}
    assert errors_for(result, path) == ["cgpu cannot read this file: Permission denied"]
    assert [s for s, p, _ in result.problems if p == str(locked)] == ["warning"]


def test_oversized_file_is_not_read(tmp_path):
    etc = tmp_path / "etc"
    path = write(etc, "huge.yaml", minimal())
    with open(path, "ab") as handle:
        handle.truncate(5 * 1024 * 1024)
    result = scan_spec_dirs([str(etc)])
    assert errors_for(result, path) == [
        "cgpu cannot read this file: the file is 5,242,880 bytes; cgpu reads spec files up to 4 MiB, "
        "but the engine reads files of any size (os.ReadFile) and may define devices here"
    ]


def test_spec_dir_that_is_a_file(tmp_path):
    path = write(tmp_path, "notadir", "x")
    assert scan_spec_dirs([str(path)]).problems == [("warning", str(path), "this spec dir is not a directory; skipped")]


def test_parse_cache_reuses_unchanged_files_and_rereads_changed_ones(tmp_path, parses):
    etc = tmp_path / "etc"
    path = write(etc, "a.yaml", minimal(env="A=1"))
    write(etc, "bad.yaml", "kind: [")
    reader = SpecReader()
    first = reader.scan([str(etc)])
    second = reader.scan([str(etc)])
    assert len(parses) == 2 and first.problems == second.problems
    assert second.devices["example.com/gpu=gpu0"].device.edits.env == ("A=1",)
    path.write_text(minimal(env="A=22"))  # size changes
    third = reader.scan([str(etc)])
    assert len(parses) == 3 and third.devices["example.com/gpu=gpu0"].device.edits.env == ("A=22",)
    # the same file under another priority keeps its parse and gets the new priority
    assert reader.scan([str(tmp_path / "none"), str(etc)]).devices["example.com/gpu=gpu0"].spec.priority == 1
    assert len(parses) == 3
    reader.clear()
    reader.scan([str(etc)])
    assert len(parses) == 5
    scan_spec_dirs([str(etc)])  # no reader: nothing kept from one scan to the next
    scan_spec_dirs([str(etc)])
    assert len(parses) == 9


def test_parse_cache_is_bounded_by_the_current_spec_dirs_not_by_history(tmp_path, monkeypatch):
    monkeypatch.setattr(scan_module, "PARSE_CACHE_SIZE", 3)
    etc = tmp_path / "etc"
    for index in range(5):
        write(etc, f"{index}.yaml", minimal(kind=f"example.com/k{index}"))
    reader = SpecReader()
    assert len(reader.scan([str(etc)]).devices) == 5
    assert reader.stats() == {"files": 5}  # no thrashing
    for churn in range(50):  # a spec per claim: each written, read, then removed
        (etc / f"claim-{churn}.yaml").write_text(minimal(kind=f"example.com/c{churn}"))
        reader.scan([str(etc)])
        (etc / f"claim-{churn}.yaml").unlink()
    for index in range(3):
        (etc / f"{index}.yaml").unlink()
    assert sorted(reader.scan([str(etc)]).devices) == ["example.com/k3=gpu0", "example.com/k4=gpu0"]
    assert reader.stats() == {"files": 2}


def test_what_is_remembered_of_a_file_lasts_while_it_is_unchanged_and_goes_with_it(tmp_path):
    etc = tmp_path / "etc"
    a = write(etc, "a.yaml", minimal(kind="example.com/aa"))
    write(etc, "b.yaml", minimal(kind="example.com/bb"))
    reader = SpecReader()
    first = reader.scan([str(etc)])
    for device in first.devices.values():
        reader.remember(device.spec, "answer", device.spec.path)
    assert reader.stats() == {"files": 2, "answer": 2}
    again = reader.scan([str(tmp_path / "none"), str(etc)])  # unchanged, placed at another priority
    assert [reader.recall(d.spec, "answer") for d in again.devices.values()] == [str(a), str(etc / "b.yaml")]
    assert sorted(reader.recalled("answer")) == [str(a), str(etc / "b.yaml")]
    a.write_text(minimal(kind="example.com/aa", env="A=1"))  # changed: what was worked out from it goes
    changed = reader.scan([str(etc)])
    assert reader.recall(changed.devices["example.com/aa=gpu0"].spec, "answer") is None
    assert reader.recall(first.devices["example.com/aa=gpu0"].spec, "answer") is None  # the old spec is not the file's
    reader.remember(first.devices["example.com/aa=gpu0"].spec, "answer", "stale")  # nor kept for the new one
    assert reader.recall(changed.devices["example.com/aa=gpu0"].spec, "answer") is None
    (etc / "b.yaml").unlink()
    reader.scan([str(etc)])
    assert reader.stats() == {"files": 1}  # a file that goes leaves nothing
    assert reader.recalled("answer") == []


# --- the reading parts of cdi.md §8 with the corpus's published shapes ----------------------------------


@pytest.fixture
def real():
    from tests.conftest import CORPUS

    return CORPUS


def one_spec_dir(real, tmp_path, name):
    etc = tmp_path / "etc"
    etc.mkdir()
    shutil.copy(real / name, etc / name)
    return scan_spec_dirs([str(etc)])


def test_case_2_uuid_alias_and_unknown_index(real, tmp_path):
    result = one_spec_dir(real, tmp_path, "nvidia-ctk-nvml-full.yaml")
    by_uuid = result.devices["nvidia.com/gpu=GPU-7c1f9e02-55ab-4d3e-9a61-0b2c8e4f13d7"]
    assert by_uuid.edits() == result.devices["nvidia.com/gpu=0"].edits()
    assert by_uuid.edits() != result.devices["nvidia.com/gpu=1"].edits()
    assert "nvidia.com/gpu=2" not in result.devices and result.problems == []


def test_case_5_wsl_spec_has_only_all(real, tmp_path):
    result = one_spec_dir(real, tmp_path, "nvidia-ctk-wsl-full.yaml")
    assert list(result.devices) == ["nvidia.com/gpu=all"]
    assert [node.path for node in result.devices["nvidia.com/gpu=all"].edits().device_nodes] == ["/dev/dxg"]


def test_case_8_jetson_xavier_kind(real, tmp_path):
    result = one_spec_dir(real, tmp_path, "jetson-csv-jp5.yaml")
    assert sorted(result.devices) == ["nvidia.com/xavier-gpu=0", "nvidia.com/xavier-gpu=all"]


def test_case_10_intel_example(real, tmp_path):
    result = one_spec_dir(real, tmp_path, "intel-gpu.yaml")
    assert list(result.devices) == ["intel.com/gpu=card1"] and "gpu.intel.com/i915=1" not in result.devices
    edits = result.devices["intel.com/gpu=card1"].edits()
    assert [node.path for node in edits.device_nodes] == ["/dev/dri/card1", "/dev/dri/renderD129"]
    assert [mount.container_path for mount in edits.mounts] == ["/dev/dri/by-path"]


def test_case_24_yaml_in_json_is_accepted(real, tmp_path):
    result = one_spec_dir(real, tmp_path, "venus-yaml-in-json.json")
    assert list(result.devices) == ["docker.com/gpu=venus"] and result.problems == []


def test_case_11_the_yaml_and_json_twins_conflict(real, tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    for name in ("nvidia-nvml-trimmed.yaml", "nvidia-nvml-trimmed.json"):
        shutil.copy(real / name, etc / name)
    result = scan_spec_dirs([str(etc)])
    assert result.devices == {}
    assert {p for s, p, _ in result.problems if s == "error"} == {
        str(etc / "nvidia-nvml-trimmed.yaml"),
        str(etc / "nvidia-nvml-trimmed.json"),
    }


def test_permission_errors_as_root_would_not_see_them(tmp_path, monkeypatch):
    """The same paths as test_unreadable_file_and_dir, for runs as root: the OS answers
    EACCES through the two calls that would get it."""
    etc, locked = tmp_path / "etc", tmp_path / "locked"
    path = write(etc, "a.yaml", minimal())
    write(locked, "b.yaml", minimal(kind="example.com/bb"))
    real_listdir = os.listdir

    def denied(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(host_module, "open_regular", denied)  # the node's file view opens spec files
    monkeypatch.setattr(scan_module.os, "listdir", lambda d: denied() if d == str(locked) else real_listdir(d))
    result = scan_spec_dirs([str(etc), str(locked)])
    assert result.devices == {}
    assert errors_for(result, path) == ["cgpu cannot read this file: Permission denied"]
    assert [s for s, p, _ in result.problems if p == str(locked)] == ["warning"]


def test_case_4_opencl_icd_mount_is_read(tmp_path):
    etc = tmp_path / "etc"
    write(
        etc,
        "nvidia.yaml",
        """\
        cdiVersion: 0.5.0
        kind: nvidia.com/gpu
        devices:
        - name: "0"
          containerEdits:
            deviceNodes: [{path: /dev/nvidia0}]
        containerEdits:
          mounts:
          - hostPath: /etc/OpenCL/vendors/nvidia.icd
            containerPath: /etc/OpenCL/vendors/nvidia.icd
            options: [ro, nosuid, nodev, rbind, rprivate]
        """,
    )
    edits = scan_spec_dirs([str(etc)]).devices["nvidia.com/gpu=0"].edits()
    assert [mount.container_path for mount in edits.mounts] == ["/etc/OpenCL/vendors/nvidia.icd"]
    assert [node.path for node in edits.device_nodes] == ["/dev/nvidia0"]


def test_a_spec_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    """A FIFO named *.yaml would block a plain open() forever (no writer ever comes)."""
    etc = tmp_path / "etc"
    etc.mkdir()
    os.mkfifo(etc / "pipe.yaml")
    good = write(etc, "good.yaml", minimal())
    result = scan_spec_dirs([str(etc)])
    assert result.devices["example.com/gpu=gpu0"].spec.path == str(good)
    assert any(p == str(etc / "pipe.yaml") for _, p, _ in result.problems)
