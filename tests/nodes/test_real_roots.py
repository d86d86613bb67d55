"""The DaemonSet on real Debian nodes: roots made by mmdebstrap from Debian's archive with containerd, podman and
docker.io installed by dpkg (scripts/node_roots.py), given an NVIDIA driver and a spec where nvidia-ctk writes it,
seen through the manifest's own mounts and arguments.

These roots have what hand-made ones lacked: `var/run -> /run`, an absolute link, so the spec nvidia-cdi-refresh
writes to /var/run/cdi lies in the root's /run/cdi; merged /usr; the engines' real packages and default
configuration. Where the root's containerd can say how it reads its configuration (`containerd config dump`),
its answer decides what cgpu must say.
"""

from __future__ import annotations

import os

import pytest

from cgpu.fleet.nfd import NAMESPACE
from tests.nodes import roots

SUITES = ("bookworm", "trixie", "sid")
SPEC_DIRS = ("/var/run/cdi", "/etc/cdi")
GPU_APIS = ["cuda", "vulkan", "opencl"]
# The CRI plugin's table as Debian's trixie config.toml (version 2) names it, CDI switched on as an admin would.
CONTAINERD_CDI_ON = '[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n'

pytestmark = pytest.mark.slow


def _engine(report: dict, name: str) -> dict:
    return next(e for e in report["engines"] if e["name"] == name)


def _gpu_labels(labels: dict[str, str]) -> list[str]:
    return [api for api in GPU_APIS if labels.get(f"{NAMESPACE}/{api}") == "true"]


def test_a_debian_root_has_var_run_as_an_absolute_link(tmp_path):
    node = roots.nvidia_node(tmp_path, suite="trixie", spec_dir="/var/run/cdi")
    assert os.readlink(node / "var" / "run") == "/run"
    assert (node / "run" / "cdi" / "nvidia.yaml").is_file()  # where the spec really lies


@pytest.mark.parametrize("spec_dir", SPEC_DIRS)
@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize("cdi", ["debian-default", "switched-on"])
def test_the_daemonset_answers_as_the_roots_containerd_reads_its_config(tmp_path, suite, spec_dir, cdi):
    node = roots.nvidia_node(tmp_path, suite=suite, spec_dir=spec_dir)
    roots.kubelet_runs(node, roots.CONTAINERD_ENDPOINT)
    if cdi == "switched-on":
        roots.place(node, "/etc/containerd/config.toml", "version = 2\n" + CONTAINERD_CDI_ON)
    oracle = roots.containerd_dump(node)  # the root's own containerd, in a chroot
    pod = roots.pod_view(node, tmp_path / "pod")

    report, labels = roots.daemonset_watch(pod)
    entry = _engine(report, "containerd")
    assert entry["judged"] is True
    reads_spec = bool(oracle["enable_cdi"]) and spec_dir in (oracle["cdi_spec_dirs"] or [])
    if reads_spec:
        assert report["containers"] == GPU_APIS, report["problems"]
        assert _gpu_labels(labels) == GPU_APIS and labels[f"{NAMESPACE}/devices"] == "1"
        assert f"{NAMESPACE}/problem" not in labels
    else:
        assert report["containers"] == [] and _gpu_labels(labels) == []
        assert labels.get(f"{NAMESPACE}/problem") not in (None, "no-spec"), labels  # the reason, as a label
        reasons = [p["message"] for p in report["problems"]] + [d.get("reason", "") for d in report["devices"]]
        assert any("containerd" in r and "CDI" in r for r in reasons), reasons
        assert "containerd" in report["evidence"]["cuda"] and "nvidia-ctk" not in report["evidence"]["cuda"]
    if oracle["enable_cdi"] is not None:  # containerd 1.6's CRI has no CDI: nothing to compare
        assert entry["cdi_enabled"] is oracle["enable_cdi"]
        assert entry["spec_dirs"] == oracle["cdi_spec_dirs"]
    assert roots.daemonset_probe(pod)["containers"] == report["containers"]  # probe and watch agree


# podman's CDI library reads cdiVersion up to 0.5.0 in Debian 12's 4.3.1 (v0.5.x), up to 0.8.0 in 5.4 (v0.8.x):
# docs/cdi.md "Engines: what each release reads". The sample spec is 0.7.0, as toolkit 1.20 writes it.
PODMAN_READS = {"bookworm": False, "trixie": True, "sid": True}


@pytest.mark.parametrize("spec_dir", SPEC_DIRS)
@pytest.mark.parametrize("suite", SUITES)
def test_without_a_kubelet_the_roots_podman_judges(tmp_path, suite, spec_dir):
    node = roots.nvidia_node(tmp_path, suite=suite, spec_dir=spec_dir)
    pod = roots.pod_view(node, tmp_path / "pod")
    report = roots.daemonset_probe(pod)
    assert _engine(report, "podman")["judged"] is True
    if PODMAN_READS[suite]:
        assert report["containers"] == GPU_APIS, report["problems"]
    else:
        assert report["containers"] == []
        assert any("0.7.0" in p["message"] and "podman" in p["message"] for p in report["problems"]), report["problems"]
        assert "cdiVersion" in report["evidence"]["cuda"] and "nvidia-ctk" not in report["evidence"]["cuda"]


def test_the_pod_sees_the_nodes_driver_but_not_its_procfs(tmp_path):
    node = roots.nvidia_node(tmp_path, suite="trixie", spec_dir="/var/run/cdi")
    (node / "proc" / "self-of-the-node").write_text("hidden")
    pod = roots.pod_view(node, tmp_path / "pod")
    assert (pod / "host" / "proc" / "driver" / "nvidia" / "version").is_file()
    assert not (pod / "host" / "proc" / "self-of-the-node").exists()
