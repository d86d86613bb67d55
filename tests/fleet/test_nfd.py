"""The NFD feature file, read back the way nfd-worker and nfd-master read it.

`read_features_dir` follows node-feature-discovery `source/local/local.go` (getFeaturesFromFiles,
getFileContent, parseFeatureFile, parseDirectives) and `pkg/apis/nfd/validate/validate.go`
(Label): it is written from that source, not from cgpu's code, so the tests check the file
against what NFD will do with it."""

from __future__ import annotations

import datetime
import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cgpu.fleet import nfd
from cgpu.fleet.nfd import feature_file, label_value, labels
from cgpu.node.files import write_atomic
from cgpu.report import ReportBuilder
from tests.conftest import validate_report

NS = "cgpu.feature.node.kubernetes.io"
NOW = datetime.datetime.now(datetime.timezone.utc)

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def kubernetes_label_ok(key: str, value: str) -> bool:
    """apimachinery IsQualifiedName(key) and IsValidLabelValue(value), and NFD's namespace rule."""
    prefix, slash, name = key.rpartition("/")
    if not slash or not prefix or len(prefix) > 253 or not all(_DNS_LABEL.match(p) for p in prefix.split(".")):
        return False
    if not (0 < len(name) <= 63 and _NAME.match(name)):
        return False
    if prefix != "feature.node.kubernetes.io" and not prefix.endswith(".feature.node.kubernetes.io"):
        return False  # denied by default (kubernetes.io and its sub-namespaces)
    return value == "" or (len(value) <= 63 and bool(_NAME.match(value)))


def read_features_dir(directory: Path, now: datetime.datetime = NOW) -> dict[str, str]:
    """The labels nfd-worker would publish from `directory`."""
    found: dict[str, str] = {}
    for entry in sorted(os.listdir(directory)):
        if entry.startswith("."):
            continue  # hidden files are ignored
        path = directory / entry
        if not path.is_file() or path.stat().st_size > 65536:
            continue
        expiry = now
        for raw in path.read_bytes().split(b"\n"):
            line = raw.decode().strip()
            if not line:
                continue
            if line.startswith("#"):
                if line.startswith("# +expiry-time="):
                    expiry = datetime.datetime.fromisoformat(line.split("=", 1)[1].strip().replace("Z", "+00:00"))
                continue
            if expiry < now:
                continue
            key, eq, value = line.partition("=")
            found[key] = value if eq else "true"
    return {key: value for key, value in found.items() if kubernetes_label_ok(key, value)}


def _report(provided=(), unknown=(), failed=False) -> dict:
    builder = ReportBuilder("cdi")
    for api in provided:
        builder.provide(api, f"{api} is here")
    for api in unknown:
        builder.unknown(api, f"unknown: {api} could not be told")
    if failed:
        builder.failed("cdi", "could not run")
    report = builder.build()
    validate_report(report)
    return report


def _write(directory: Path, report: dict, *, expires: datetime.datetime) -> None:
    directory.mkdir(exist_ok=True)
    write_atomic(str(directory / "cgpu"), feature_file(report, expires=expires).encode())


def test_provided_apis_are_true_unknown_are_unknown_absent_have_no_label(tmp_path):
    report = _report(provided=["cuda", "opencl"], unknown=["vulkan"])
    _write(tmp_path, report, expires=NOW + datetime.timedelta(minutes=15))
    assert read_features_dir(tmp_path) == {
        f"{NS}/cuda": "true",
        f"{NS}/opencl": "true",
        f"{NS}/vulkan": "unknown",
        f"{NS}/backend": "cdi",
        f"{NS}/version": report["cgpu_version"],
        f"{NS}/format": "2",
        f"{NS}/devices": "0",
    }


def test_a_backend_that_could_not_run_labels_every_api_unknown(tmp_path):
    _write(tmp_path, _report(failed=True), expires=NOW + datetime.timedelta(minutes=15))
    got = read_features_dir(tmp_path)
    assert {k.split("/")[1]: v for k, v in got.items() if v in ("true", "unknown")} == {
        api: "unknown" for api in ("cuda", "rocm", "vulkan", "opencl", "directml")
    }


def test_an_expired_file_publishes_nothing(tmp_path):
    _write(tmp_path, _report(provided=["cuda"]), expires=NOW - datetime.timedelta(seconds=1))
    assert read_features_dir(tmp_path) == {}


def test_every_label_passes_kubernetes_syntax_and_nfd_namespaces():
    report = _report(provided=["cuda", "rocm", "vulkan", "opencl", "directml"])
    for key, value in labels(report).items():
        assert kubernetes_label_ok(key, value), (key, value)


def test_the_temporary_file_is_hidden_so_nfd_never_reads_a_partial_file(tmp_path, monkeypatch):
    """A write that fails half way leaves the old file and no temporary file."""
    _write(tmp_path, _report(provided=["cuda"]), expires=NOW + datetime.timedelta(minutes=5))
    before = (tmp_path / "cgpu").read_bytes()

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError):
        _write(tmp_path, _report(provided=["vulkan"]), expires=NOW + datetime.timedelta(minutes=5))
    assert (tmp_path / "cgpu").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [".cgpu-tmp", "cgpu"]  # the private dir the temporary files go to
    assert os.listdir(tmp_path / ".cgpu-tmp") == []


@given(st.text(max_size=200))
def test_any_version_text_becomes_a_valid_label_value(text):
    value = label_value(text)
    assert value == "" or (len(value) <= 63 and _NAME.match(value))


# --- the labels an operator needs: devices, a blocking problem, the judging engine ---------------

SAMPLES = Path(__file__).resolve().parents[2] / "cdi-samples"


def _probed(spec: str, host: str) -> dict:
    from cgpu.backends import cdi as cdi_backend

    builder = ReportBuilder("cdi")
    dirs = [str(SAMPLES / spec / "spec")]
    cdi_backend.probe(builder, spec_dirs=dirs, root=str(SAMPLES / "hosts" / host), engine="none")
    report = builder.build()
    validate_report(report)
    return report


def test_the_device_count_is_distinct_devices_not_alias_names():
    one = labels(_probed("nvidia-current", "nvidia-580"))  # gpu=0, its UUID and `all`: one GPU
    assert one[f"{NS}/devices"] == "1" and one[f"{NS}/cuda"] == "true"
    eight = labels(_probed("nvidia-8gpu-mig", "nvidia-580"))  # GPUs 4-7 and 8 MIG instances, each by 2 names
    assert eight[f"{NS}/devices"] == "12"
    assert f"{NS}/problem" not in eight


def test_a_stale_spec_is_a_problem_label_naming_it_unlike_a_node_without_gpu(tmp_path):
    stale = labels(_probed("nvidia-current", "nvidia-575"))  # spec for 580, host driver 575
    assert stale[f"{NS}/problem"] == "stale-spec" and stale[f"{NS}/devices"] == "0"
    assert stale[f"{NS}/devices-blocked"] == "1"
    empty = tmp_path / "spec"
    empty.mkdir()
    from cgpu.backends import cdi as cdi_backend

    def probed(root: Path) -> dict[str, str]:
        builder = ReportBuilder("cdi")
        cdi_backend.probe(builder, spec_dirs=[str(empty)], root=str(root), engine="none")
        return labels(builder.build())

    # the NVIDIA driver loaded and no spec: no device gives any API, and the label says why
    no_spec = probed(SAMPLES / "hosts" / "nvidia-580")
    assert no_spec[f"{NS}/problem"] == "no-spec" and no_spec[f"{NS}/devices"] == "0"
    (tmp_path / "cpu-node").mkdir()  # no GPU at all: nothing is wrong, no problem label
    none = probed(tmp_path / "cpu-node")
    assert f"{NS}/problem" not in none and none[f"{NS}/devices"] == "0" and f"{NS}/devices-blocked" not in none
    for key, value in stale.items():
        assert kubernetes_label_ok(key, value)


def test_devices_counts_those_with_at_least_one_api_not_only_complete_ones():
    """A device giving cuda and opencl but not vulkan (partial) is a device a container can use."""
    report = {
        "devices": [
            {"name": "nvidia.com/gpu=0", "status": "partial", "apis": ["cuda", "opencl"]},
            {"name": "nvidia.com/gpu=1", "status": "ok", "apis": []},  # starts, gives nothing
            {"name": "nvidia.com/gpu=2", "status": "blocked", "apis": []},
        ]
    }
    assert nfd.device_count(report) == 1 and nfd.device_count(report, blocked=True) == 1


def test_the_problem_label_reads_the_problems_kind_not_its_wording():
    report = _probed("nvidia-current", "nvidia-575")
    [stale] = [p for p in report["problems"] if p["kind"] == "stale-spec"]
    assert labels(report)[f"{NS}/problem"] == "stale-spec"
    stale["message"] = "reworded: the spec was made for another driver"
    assert labels(report)[f"{NS}/problem"] == "stale-spec"  # the wording may change, the kind does not
    stale["message"], stale["kind"] = "stale spec: said so, but of another kind", "other"
    assert labels(report)[f"{NS}/problem"] == "blocked"  # a message's prefix means nothing to the label
    for device in report["devices"]:
        device["reason"] = "cdiVersion 9.9.9 is above what it accepts"  # no longer read: the kind is
    assert labels(report)[f"{NS}/problem"] == "blocked"
    stale["kind"] = "missing-host-files"
    assert labels(report)[f"{NS}/problem"] == "missing-host-files"
    report["problems"].append({**stale, "kind": "spec-too-new"})
    assert labels(report)[f"{NS}/problem"] == "spec-too-new"  # the first in BLOCKING_KINDS' order
    report["problems"][-1]["severity"] = "warning"
    assert labels(report)[f"{NS}/problem"] == "missing-host-files"  # only errors block


def _engine(name: str, version: str, *, judged: bool, max_cdi: str | None, enabled: bool | None = True) -> dict:
    return {
        "name": name, "version": version, "cdi_library": "v0.6.2", "max_cdi_version": max_cdi,
        "cdi_enabled": enabled, "spec_dirs": ["/etc/cdi", "/var/run/cdi"], "learned_from": "build info",
        "sources": ["/usr/bin/containerd"], "judged": judged, "containers": [],
    }  # fmt: skip


def test_the_judging_engine_and_its_spec_ceiling_are_labels():
    report = _probed("nvidia-current", "nvidia-580")
    report["engines"] = [
        _engine("docker", "28.5.1", judged=False, max_cdi="1.0.0"),
        _engine("containerd", "1.7.24+ds1-1", judged=True, max_cdi="0.8.0"),
    ]
    got = labels(report)
    assert got[f"{NS}/engine"] == "containerd" and got[f"{NS}/engine-version"] == "1.7.24_ds1-1"
    assert got[f"{NS}/engine-max-cdi"] == "0.8.0"
    report["engines"][1] = _engine("containerd", "1.7.24", judged=True, max_cdi="0.8.0", enabled=False)
    report["containers"] = []
    off = labels(report)
    assert off[f"{NS}/engine-max-cdi"] == "off" and off[f"{NS}/problem"] == "cdi-off"
    for key, value in {**got, **off}.items():
        assert kubernetes_label_ok(key, value), (key, value)
    del report["engines"]
    assert not [k for k in labels(report) if "/engine" in k]  # a report without the field: no guess
