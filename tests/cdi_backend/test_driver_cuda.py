"""The driver's CUDA: the highest CUDA version the host's NVIDIA driver supports, from its version
and NVIDIA's table, as report data (`nvidia_driver`), NFD labels and metrics (issue: a scheduler
matching an image that needs cuda>=12.8 must not land on a 560 driver)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from cgpu.fleet.metrics import metrics_text
from cgpu.fleet.nfd import labels
from cgpu.node.driver_cuda import CUDA_DRIVER_TABLE, cuda_for_driver, version_key
from tests.cdi_backend.helpers import HOSTS, SAMPLES, make_host, probe, spec_dir
from tests.fleet.test_nfd import kubernetes_label_ok

NS = "cgpu.feature.node.kubernetes.io"


def test_the_table_rows_are_as_nvidia_lists_them():
    # rows from the release notes' table (GA row of each CUDA x.y), newest first, strictly descending
    table = dict(CUDA_DRIVER_TABLE)
    assert table["12.8"] == "570.26"
    assert table["13.0"] == "580.65.06"
    assert table["12.0"] == "525.60.13"
    keys = [version_key(minimum) for _, minimum in CUDA_DRIVER_TABLE]
    assert keys == sorted(keys, reverse=True) and len(set(keys)) == len(keys)


def test_a_driver_of_a_rows_branch_supports_that_cuda():
    assert cuda_for_driver("570.86.15")[:2] == ("12.8", "known")
    assert cuda_for_driver("570.26")[:2] == ("12.8", "known")
    assert cuda_for_driver("580.82.07")[:2] == ("13.0", "known")
    assert cuda_for_driver("535.183.01")[:2] == ("12.2", "known")


def test_a_driver_below_its_branchs_row_or_between_branches_is_a_floor():
    # 570.20 is an R570 beta older than 12.8's minimum: at least 12.6; R565 says 12.7, never released
    assert cuda_for_driver("570.20")[:2] == ("12.6", "at-least")
    assert cuda_for_driver("565.57.01")[:2] == ("12.6", "at-least")
    cuda, state, reason = cuda_for_driver("610.10")  # newer than the table: never more than it knows
    assert (cuda, state) == ("13.2", "at-least") and "may support more" in reason


def test_what_the_table_cannot_tell_is_unknown_never_a_guess():
    assert cuda_for_driver("340.108")[:2] == (None, "unknown")
    assert cuda_for_driver("580.x")[:2] == (None, "unknown")
    assert cuda_for_driver("")[:2] == (None, "unknown")


@given(st.text(max_size=20))
def test_any_version_text_gets_an_answer(text):
    cuda, state, reason = cuda_for_driver(text)
    assert reason
    assert (cuda is None) == (state == "unknown")


@given(st.lists(st.integers(min_value=0, max_value=999), min_size=2, max_size=3))
def test_a_newer_driver_never_supports_less(parts):
    older = ".".join(map(str, parts))
    newer = ".".join(map(str, [parts[0] + 1, *parts[1:]]))
    found = [cuda_for_driver(v)[0] for v in (older, newer)]
    as_key = [tuple(int(p) for p in c.split(".")) if c else (0,) for c in found]
    assert as_key[0] <= as_key[1]
    if found[0] is not None:
        minimum = dict(CUDA_DRIVER_TABLE)[found[0]]
        assert version_key(older) >= version_key(minimum)  # type: ignore[operator]


def test_the_report_says_the_cuda_the_hosts_driver_supports():
    report = probe([SAMPLES / "nvidia-1.17/spec"], HOSTS / "nvidia-580")
    driver = report["nvidia_driver"]
    assert driver["version"] == "580.82.07" and driver["read_from"] == "/proc/driver/nvidia/version"
    assert (driver["cuda"], driver["cuda_state"]) == ("13.0", "known")
    assert "580.65.06" in driver["reason"] and "Release Notes" in driver["reason"]


def test_an_older_driver_does_not_satisfy_a_newer_images_cuda(tmp_path: Path):
    spec = spec_dir(tmp_path, SAMPLES / "nvidia-1.17/spec/nvidia.yaml")
    host = make_host(tmp_path / "host", nvidia_version="560.35.03")
    driver = probe([spec], host)["nvidia_driver"]
    assert (driver["version"], driver["cuda"], driver["cuda_state"]) == ("560.35.03", "12.6", "known")


def test_nvidia_devices_without_a_readable_driver_version_are_unknown(tmp_path: Path):
    spec = spec_dir(tmp_path, SAMPLES / "nvidia-1.17/spec/nvidia.yaml")
    host = make_host(tmp_path / "host")
    driver = probe([spec], host)["nvidia_driver"]
    assert driver["version"] is None and driver["cuda"] is None and driver["cuda_state"] == "unknown"
    assert "proc/driver/nvidia/version" in driver["reason"] and "kernel module" in driver["reason"]


def test_a_node_without_nvidia_has_no_driver_entry():
    report = probe([SAMPLES / "amd/spec"], HOSTS / "amd")
    assert report["nvidia_driver"] is None


def test_labels_follow_gpu_feature_discoverys_version_labels():
    report = probe([SAMPLES / "nvidia-1.17/spec"], HOSTS / "nvidia-580")
    found = labels(report)
    assert found[f"{NS}/cuda.driver-version.major"] == "580"
    assert found[f"{NS}/cuda.driver-version.minor"] == "82"
    assert found[f"{NS}/cuda.driver-version.revision"] == "07"
    assert found[f"{NS}/cuda.driver-version.full"] == "580.82.07"
    assert found[f"{NS}/cuda.runtime-version.major"] == "13"
    assert found[f"{NS}/cuda.runtime-version.minor"] == "0"
    assert found[f"{NS}/cuda.runtime-version.full"] == "13.0"
    assert all(kubernetes_label_ok(key, value) for key, value in found.items())


def test_an_unknown_cuda_is_labelled_unknown_without_numbers(tmp_path: Path):
    spec = spec_dir(tmp_path, SAMPLES / "nvidia-1.17/spec/nvidia.yaml")
    found = labels(probe([spec], make_host(tmp_path / "host")))
    assert found[f"{NS}/cuda.runtime-version.full"] == "unknown"
    assert not any(key.startswith(f"{NS}/cuda.runtime-version.m") for key in found)  # a Gt never matches
    assert not any(key.startswith(f"{NS}/cuda.driver-version") for key in found)


def test_no_driver_no_cuda_labels():
    found = labels(probe([SAMPLES / "amd/spec"], HOSTS / "amd"))
    assert not any(".driver-version" in key or ".runtime-version" in key for key in found)


def test_metrics_carry_the_cuda_as_cudas_own_number():
    report = probe([SAMPLES / "nvidia-1.17/spec"], HOSTS / "nvidia-580")
    text = metrics_text(report, finished_at=0.0, duration=0.0, writes={})
    assert "cgpu_nvidia_driver_cuda_version 13000\n" in text
    assert 'cgpu_nvidia_driver_info{version="580.82.07",cuda="13.0",cuda_state="known"} 1\n' in text


def test_metrics_of_an_unknown_cuda_give_no_number(tmp_path: Path):
    spec = spec_dir(tmp_path, SAMPLES / "nvidia-1.17/spec/nvidia.yaml")
    text = metrics_text(probe([spec], make_host(tmp_path / "host")), finished_at=0.0, duration=0.0, writes={})
    assert 'cgpu_nvidia_driver_info{version="",cuda="",cuda_state="unknown"} 1\n' in text
    assert "cgpu_nvidia_driver_cuda_version" not in text


def test_wsl_and_jetson_say_where_their_drivers_cuda_is():
    wsl = probe([SAMPLES / "nvidia-wsl/spec"], HOSTS / "wsl")["nvidia_driver"]
    assert wsl["cuda_state"] == "unknown" and "nvidia-smi" in wsl["reason"] and "Windows" in wsl["reason"]
    jetson = probe([SAMPLES / "jetson-xavier/spec"], HOSTS / "jetson-xavier")["nvidia_driver"]
    assert jetson["cuda_state"] == "unknown" and "JetPack" in jetson["reason"]


def test_the_drivers_cuda_is_reported_where_the_engine_has_cdi_off(tmp_path: Path, monkeypatch):
    from tests.cdi_backend import engine_files as ef
    from tests.cdi_backend.test_installed import judge, nvidia_node

    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))
    root = nvidia_node(
        tmp_path,
        {
            "/usr/bin/containerd": ef.debian_binary("github.com/containerd/containerd/cmd/containerd"),
            "/var/lib/dpkg/status": ef.DEBIAN_13_CONTAINERD,
        },
    )
    report = judge(root)
    assert report["containers"] == []  # CDI off: no answer read the host's devices
    assert (report["nvidia_driver"]["version"], report["nvidia_driver"]["cuda"]) == ("580.82.07", "13.0")


@given(
    st.fixed_dictionaries(
        {
            "version": st.one_of(st.none(), st.text(max_size=30), st.from_regex(r"\A[0-9]{1,70}\.[0-9]{1,9}\Z")),
            "cuda": st.one_of(st.none(), st.text(max_size=10)),
            "cuda_state": st.sampled_from(["known", "at-least", "unknown", "odd"]),
        }
    )
)
def test_any_driver_entry_gives_valid_labels_and_metrics(driver):
    from cgpu.fleet.nfd import driver_cuda_labels

    found = driver_cuda_labels(driver)
    assert all(kubernetes_label_ok(f"{NS}/{key}", value) for key, value in found.items())
    text = metrics_text(
        {
            "apis": {api: {"state": "absent"} for api in ("cuda", "rocm", "vulkan", "opencl", "directml", "metal")},
            "nvidia_driver": driver,
        },
        finished_at=0.0,
        duration=0.0,
        writes={},
    )
    assert text.count("cgpu_nvidia_driver_info{") == 1
