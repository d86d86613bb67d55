"""`verify_devices` end to end: real podman, real CDI specs, the real probe in the real probe image."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from cgpu.backends.cdi.verify import verify_devices
from cgpu.engines.client import detect_engines, version_tuple
from cgpu.engines.registry import max_cdi_version
from cgpu.report import ReportBuilder
from tests.conftest import REPO, VERIFY_FILTER, validate_report
from tests.timing import assert_within, timed, wait_for

from .conftest import labelled_containers, podman, service_processes

pytestmark = pytest.mark.podman


def _verify(devices, static, **options):
    messages: list[str] = []
    report = ReportBuilder("cdi", progress=messages.append)
    checks = verify_devices(report, devices, static, **options)
    assert [check.name for check in checks] in ([], devices)  # one result per device, in order, or none
    live = {check.name: check.entry_fields() for check in checks}
    for name in devices:
        report.device(
            name, static.get(name, []), status="ok", spec="/etc/cdi/test.yaml", checks={}, **live.get(name, {})
        )
    built = report.build()
    validate_report(built)
    return built, messages


def _entry(report, name):
    return next(d for d in report["devices"] if d["name"] == name)


def _lvp_spec(tmp_path) -> str:
    """Spec text whose device only works if both its env and its mount reach the container:
    VK_DRIVER_FILES names a manifest that exists only through the bind mount."""
    manifest = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"
    if not os.path.exists(manifest):
        pytest.skip("Mesa's lavapipe (mesa-vulkan-drivers) is not installed")
    host_copy = tmp_path / "lvp.json"
    host_copy.write_bytes(open(manifest, "rb").read())
    return (
        "containerEdits:\n  env: [VK_DRIVER_FILES=/etc/cgpu-test/lvp.json]\n"
        "devices:\n  - name: dev0\n    containerEdits:\n      mounts:\n"
        f"        - {{hostPath: {host_copy}, containerPath: /etc/cgpu-test/lvp.json, options: [ro, bind]}}\n"
    )


def test_live_answer_agrees_and_names_the_software_drivers(probe_image, cdi_spec, tmp_path, no_leftover_containers):
    kind = cdi_spec(_lvp_spec(tmp_path))
    name = f"{kind}=dev0"
    report, progress = _verify([name], {name: []}, engine="podman@4.3.1")

    entry = _entry(report, name)
    assert entry["live_status"] == "agrees", report["problems"]
    assert entry["apis"] == entry["live_apis"] == []
    # Lavapipe was found only through the mounted manifest named by the injected variable.
    assert "llvmpipe" in entry["live_evidence"]["vulkan"]
    assert "PoCL" in entry["live_evidence"]["opencl"]
    assert {"name", "api", "counted"} <= set(entry["live_devices"][0])
    assert not any(d["counted"] for d in entry["live_devices"])
    messages = [p["message"] for p in report["problems"]]
    assert any("VK_DRIVER_FILES=/etc/cgpu-test/lvp.json" in m for m in messages)
    summary = next(p for p in report["problems"] if p["source"] == "--verify")
    assert summary["severity"] == "info"
    assert f"from the image {probe_image}" in summary["message"] and "1 agree" in summary["message"]
    assert not [p for p in report["problems"] if p["severity"] != "info"]
    assert any(f"with {name}" in m for m in progress)


def test_every_disagreement_names_device_api_and_both_answers(probe_image, cdi_spec, tmp_path, no_leftover_containers):
    kind = cdi_spec(_lvp_spec(tmp_path))
    name = f"{kind}=dev0"
    report, _ = _verify([name], {name: ["vulkan", "opencl"]}, engine="podman@5.0.0")
    assert _entry(report, name)["live_status"] == "disagrees"
    warnings = [p for p in report["problems"] if p["severity"] == "warning" and p["source"] == name]
    assert [w["message"].split(":")[0] for w in warnings] == ["vulkan", "opencl"]
    vulkan = warnings[0]["message"]
    assert "static answer from the spec gives it" in vulkan and "does not have it" in vulkan
    assert "llvmpipe" in vulkan
    assert report["containers"] == []  # verification reports; it does not rewrite the static answer
    assert any("judged the specs as podman 5.0.0" in p["message"] for p in report["problems"])


def test_unresolvable_device_gives_the_engines_message(stand_in_image, cdi_spec, tmp_path, no_leftover_containers):
    kind = cdi_spec(_lvp_spec(tmp_path))
    name = f"{kind}=absent"
    report, _ = _verify([name], {name: []}, engine="podman", probe_image=stand_in_image)
    assert _entry(report, name)["live_status"] == "failed"
    error = next(p for p in report["problems"] if p["source"] == name)
    assert error["severity"] == "error"
    assert f"unresolvable CDI devices {name}" in error["message"]


def test_spec_newer_than_the_engine_accepts_is_unresolvable(stand_in_image, cdi_spec, no_leftover_containers):
    engines, _ = detect_engines()
    podman_version = next((e.version for e in engines if e.name == "podman"), "0")
    if version_tuple(podman_version) >= (4, 9):
        pytest.skip(f"podman {podman_version} accepts cdiVersion 0.6.0")
    kind = cdi_spec(
        "devices:\n  - name: dev0\n    annotations: {note: needs-0.6.0}\n"
        "    containerEdits:\n      env: [CGPU_TEST=1]\n",
        cdi_version="0.6.0",
    )
    name = f"{kind}=dev0"
    report, _ = _verify([name], {name: []}, engine="podman", probe_image=stand_in_image)
    error = next(p for p in report["problems"] if p["source"] == name)
    assert "unresolvable CDI devices" in error["message"]
    assert f"cdiVersion above {max_cdi_version('podman', podman_version)}" in error["message"]


def test_hung_probe_is_killed_at_the_timeout_and_removed(
    stand_in_image, babbling_image, cdi_spec, tmp_path, no_leftover_containers
):
    """--verify ends at --timeout: connecting to the engine counts against it, the container
    gets what is left, and is killed and removed then (bounded against the same call with a
    probe that exits at once)."""
    kind = cdi_spec(_lvp_spec(tmp_path))
    name = f"{kind}=dev0"
    (report, _), seconds = timed(
        lambda: _verify([name], {name: []}, engine="podman", probe_image=stand_in_image, timeout=5)
    )
    assert_within(
        seconds,
        5,
        lambda: timed(lambda: _verify([name], {name: []}, engine="podman", probe_image=babbling_image, timeout=60))[1],
        "--verify --timeout 5 with a hung probe",
    )
    entry = _entry(report, name)
    assert entry["live_status"] == "failed" and "live_apis" not in entry
    error = next(p for p in report["problems"] if p["source"] == name)
    assert re.search(
        r"the probe did not finish within [\d.]+ s; its container was killed and removed", error["message"]
    )


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        ("Segmentation fault", "its output is not a JSON object"),
        ('{"probe_version": 99, "apis": {}}', "the probe output is version 99"),
        ('["not", "an", "object"]', "its output is not a JSON object"),
    ],
)
def test_probe_without_a_usable_answer_is_a_failure_not_an_agreement(
    babbling_image, cdi_spec, output, reason, no_leftover_containers
):
    kind = cdi_spec(f"devices:\n  - name: dev0\n    containerEdits:\n      env: ['CGPU_TEST_OUTPUT={output}']\n")
    name = f"{kind}=dev0"
    report, _ = _verify([name], {name: []}, engine="podman", probe_image=babbling_image)
    entry = _entry(report, name)
    assert entry["live_status"] == "failed" and "live_apis" not in entry
    error = next(p for p in report["problems"] if p["source"] == name)
    assert reason in error["message"]
    assert "exit status 2" in error["message"] and "probe exploded" in error["message"]


def test_missing_probe_image_is_not_pulled(stand_in_image, cdi_spec, tmp_path):
    kind = cdi_spec(_lvp_spec(tmp_path))
    name = f"{kind}=dev0"
    report, _ = _verify([name], {name: []}, engine="podman", probe_image="localhost/cgpu-test-absent:none")
    error = next(p for p in report["problems"] if p["source"] == "--verify")
    assert "not in podman's local storage" in error["message"] and "podman pull" in error["message"]
    assert "live_status" not in _entry(report, name)


def test_docker_api_of_old_podman_is_refused_with_the_reason(stand_in_image, podman_service, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", podman_service.url)
    report, _ = _verify(["example.com/gpu=0"], {}, engine="docker@28.2.0", probe_image=stand_in_image)
    error = next(p for p in report["problems"] if p["source"] == "--verify")
    engines, _ = detect_engines()
    if version_tuple(next(e.version for e in engines if e.name == "podman")) >= (5, 4):
        pytest.skip("podman >= 5.4 honours CDI device requests on its Docker API")
    assert "silently ignores CDI device requests" in error["message"]


def test_no_device_to_verify():
    report, _ = _verify([], {})
    assert report["problems"] == [
        {
            "severity": "info",
            "source": "--verify",
            "message": "no CDI device that can start a container, so none was started",
            "kind": "verify",
        }
    ]


def test_ctrl_c_removes_the_container_and_stops_the_service(stand_in_image, cdi_spec, tmp_path):
    """SIGINT while the probe runs: cgpu removes its container and the podman service it started."""
    kind = cdi_spec(_lvp_spec(tmp_path))
    before = labelled_containers()
    code = (
        "from cgpu.report import ReportBuilder\n"
        "from cgpu.backends.cdi.verify import verify_devices\n"
        f"verify_devices(ReportBuilder('cdi'), ['{kind}=dev0'], {{}}, engine='podman',"
        f" probe_image='{stand_in_image}', timeout=300)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stderr=subprocess.PIPE)
    try:

        def running() -> set[str]:
            found = podman("ps", "-q", "--filter", VERIFY_FILTER, "--filter", f"ancestor={stand_in_image}")
            return set(found.stdout.split()) - before

        wait_for(lambda: proc.poll() is not None or running(), within=120, what="the probe container to run")
        assert running(), f"no probe container started: {proc.stderr.read() if proc.poll() is not None else ''}"
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0  # interrupted, KeyboardInterrupt reached the top
    assert labelled_containers() - before == set()
    assert service_processes() == []
