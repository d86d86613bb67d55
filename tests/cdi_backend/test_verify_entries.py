"""`--verify` answers per device and the backend puts each answer in that device's entry as it
builds the entries: verify never looks for or edits entries in a built report."""

from __future__ import annotations

from typing import Any

from cgpu.backends.cdi import verify
from cgpu.backends.cdi.verify import LiveCheck

from .helpers import HOSTS, SAMPLES, probe

SPEC = SAMPLES / "nvidia-8gpu-mig" / "spec"
HOST = HOSTS / "nvidia-580"
DEVICES = ["nvidia.com/gpu=4", "nvidia.com/gpu=5", "nvidia.com/gpu=6"]


def test_each_devices_live_check_goes_in_its_entry(monkeypatch):
    asked: list[Any] = []

    def verify_devices(report, devices, static, **options):
        assert report.devices == []  # nothing built yet: the entries come after, with these results
        asked.append((devices, static))
        report.problem("error", devices[1], "the container did not start", "verify")
        return [
            LiveCheck(devices[0], "disagrees", 1.25, apis=["cuda"], evidence={"cuda": "cuInit ok"}, devices=[]),
            LiveCheck(devices[1], "failed", 0.5, reason="the container did not start"),
        ]  # none for the third: the engine went away before it

    static = probe([SPEC], HOST, devices=DEVICES)
    monkeypatch.setattr(verify, "verify_devices", verify_devices)
    report = probe([SPEC], HOST, devices=DEVICES, verify=True)

    [(devices, apis)] = asked
    assert devices == DEVICES and apis == {d["name"]: d["apis"] for d in static["devices"]}
    first, second, third = report["devices"]
    assert first == {
        **static["devices"][0],
        "live_seconds": 1.25,
        "live_apis": ["cuda"],
        "live_evidence": {"cuda": "cuInit ok"},
        "live_devices": [],
        "live_status": "disagrees",
    }
    assert list(first)[-5:] == ["live_seconds", "live_apis", "live_evidence", "live_devices", "live_status"]
    assert second == {**static["devices"][1], "live_status": "failed", "live_seconds": 0.5}
    assert third == static["devices"][2]  # not checked: the static answer alone
    failed = {"severity": "error", "source": DEVICES[1], "message": "the container did not start", "kind": "verify"}
    assert failed in report["problems"]


def test_blocked_devices_are_not_verified_and_keep_their_entries(monkeypatch, tmp_path):
    asked: list[list[str]] = []
    monkeypatch.setattr(
        verify, "verify_devices", lambda report, devices, static, **options: asked.append(devices) or []
    )
    empty_host = tmp_path / "host"
    empty_host.mkdir()
    static = probe([SPEC], empty_host, devices=DEVICES)
    assert {d["status"] for d in static["devices"]} == {"blocked"}
    report = probe([SPEC], empty_host, devices=DEVICES, verify=True)
    assert asked == [[]] and report["devices"] == static["devices"]


def test_a_live_check_names_what_goes_in_the_entry():
    agrees = LiveCheck("vendor.com/gpu=0", "agrees", 2.0, apis=[], evidence={}, devices=[{"name": "llvmpipe"}])
    assert agrees.entry_fields() == {
        "live_seconds": 2.0,
        "live_apis": [],
        "live_evidence": {},
        "live_devices": [{"name": "llvmpipe"}],
        "live_status": "agrees",
    }
    failed = LiveCheck("vendor.com/gpu=0", "failed", 0.0, reason="not run: --timeout was used up")
    assert failed.entry_fields() == {"live_status": "failed", "live_seconds": 0.0}
    assert failed.reason == "not run: --timeout was used up" and failed.apis is None
