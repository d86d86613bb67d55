"""`--verify` through the real Docker Engines: cgpu's own probe, in its probe image (built from this host's
python3 packages and imported into the daemon through docker-py: no registry), in one container per device.
The live answer agrees with the static one, and both with what the engine does (test_real_engines.py)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import validate_report
from tests.engines import specs
from tests.engines.conftest import SUITES

VERIFY_SECONDS = 600  # a busy host: the probe image (about 340 MB) built and imported, then 8 containers


def verify(real_engines, run_cli, dockerd, *extra: str) -> tuple[int, dict]:
    # A cache dir per daemon: the probe image's build lock, and the remembered host engine (which must not be
    # another daemon's; test_static_answer.py checks that DOCKER_HOST keys it).
    env = {"DOCKER_HOST": dockerd.host, "CGPU_CACHE_DIR": str(dockerd.home / "cgpu-cache")}
    code, out, err = run_cli(
        "probe",
        "--backend",
        "cdi",
        "--spec-dir",
        str(real_engines.spec_dir),
        "--engine",
        "docker",
        "--verify",
        "--json",
        *extra,
        env=env,
        timeout=VERIFY_SECONDS,
    )
    report = json.loads(out)
    validate_report(report)
    return code, report


@pytest.mark.parametrize("suite", SUITES)
def test_verify_agrees_with_the_real_docker(real_engines, run_cli, suite):
    dockerd = real_engines.dockerd(suite, True)
    outcomes = real_engines.docker_measure(suite, True)
    code, report = verify(real_engines, run_cli, dockerd)
    assert code == 0, report["problems"]
    devices = {d["name"]: d for d in report["devices"]}
    for version in specs.VERSIONS:
        device = devices[specs.device_name(version)]
        if outcomes[version].injected:
            assert device["status"] == "ok", device
            assert device["live_status"] == "agrees", device
        else:
            assert device["status"] == "blocked", (version, device, outcomes[version])
    ran = [p["message"] for p in report["problems"] if p["source"] == "--verify" and "ran cgpu's probe" in p["message"]]
    injected = sum(o.injected for v, o in outcomes.items() if v in specs.VERSIONS)
    assert ran and f"in {injected} docker {dockerd.version} container(s)" in ran[0], report["problems"]


def test_verify_says_cdi_is_off_in_the_real_docker(real_engines, run_cli):
    """A Docker daemon with CDI off (features.cdi false): cgpu says so and how to turn it on, resolves no device
    and runs no container."""
    dockerd = None
    for suite in SUITES:
        try:
            dockerd = real_engines.dockerd(suite, False)
            break
        except pytest.skip.Exception:
            continue
    if dockerd is None:
        pytest.skip("no real Docker Engine came up")
    _code, report = verify(real_engines, run_cli, dockerd)
    said = [p["message"] for p in report["problems"] if p["severity"] == "error"]
    assert any('"features": {"cdi": true}' in m for m in said), report["problems"]
    # The engine would refuse every device: none is resolvable, none was tried in a container.
    assert [d for d in report["devices"] if d["status"] != "blocked"] == []
    assert all(d.get("live_status") is None for d in report["devices"])
    assert dockerd.docker("ps", "-aq").stdout.strip() == b""
