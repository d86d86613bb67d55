"""The deployment files: Kubernetes manifests valid offline (against the bundled Kubernetes
schemas, strictly), their cgpu arguments accepted by cgpu itself, and nothing of the host
writable but the NFD features dir."""

from __future__ import annotations

import configparser
import shlex

import pytest
import yaml

from cgpu.cli import _parser
from cgpu.fleet.nfd import NAMESPACE
from tests.conftest import REPO

DEPLOY = REPO / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifests_validate_strictly(path):
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is a dev dependency")
    for document in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)


def _daemonset() -> dict:
    return yaml.safe_load((DEPLOY / "kubernetes" / "daemonset.yaml").read_text())


def test_the_daemonset_runs_a_watch_cgpu_accepts():
    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    args = _parser().parse_args(container["args"])
    assert args.command == "watch" and args.nfd_file.startswith("/etc/kubernetes/node-feature-discovery/features.d/")
    assert args.root == "/host" and all(d.startswith("/host/") for d in args.spec_dirs)


def test_the_daemonset_writes_only_the_features_dir_and_keeps_no_privilege():
    pod = _daemonset()["spec"]["template"]["spec"]
    container = pod["containers"][0]
    host_volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    writable = [m["name"] for m in container["volumeMounts"] if m["name"] in host_volumes and not m.get("readOnly")]
    assert writable == ["features"]
    assert {"/etc/cdi", "/var/run/cdi", "/dev", "/proc/driver", "/sys/class/drm"} <= set(host_volumes.values())
    security = container["securityContext"]
    assert security["capabilities"]["drop"] == ["ALL"] and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True and not security.get("privileged")


def test_the_example_pod_selects_a_label_cgpu_writes():
    pod = yaml.safe_load((DEPLOY / "kubernetes" / "example-pod.yaml").read_text())
    ((key, value),) = pod["spec"]["nodeSelector"].items()
    assert key == f"{NAMESPACE}/vulkan" and value == "true"


def test_the_systemd_unit_runs_a_watch_cgpu_accepts():
    unit = configparser.ConfigParser(interpolation=None)
    unit.read(DEPLOY / "systemd" / "cgpu-watch.service")
    argv = shlex.split(unit["Service"]["ExecStart"])
    args = _parser().parse_args(argv[1:])
    assert args.command == "watch" and args.answer_file.startswith("/run/cgpu/")
    assert "143" in unit["Service"]["SuccessExitStatus"]
