"""cgpu's static answer equals what the real engine does with the same specs, learned from the engine's
installed files alone: a node root per engine, laid out as dpkg installs it (the unpacked binary, the
package's dpkg status stanza from its control data, the daemon's own configuration), judged with the default
`--engine auto`.

"Equal": a device the engine injected is one cgpu lists as resolvable (status ok or partial); a device the
engine refused or ignored (too new a cdiVersion, CDI off, a name no spec defines) is one cgpu reports as
blocked, or leaves out with a problem, with the reason; the judging engine (`engines`, exactly one
`judged: true`) is the installed one, at its version, with CDI on or off as the engine behaved.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import validate_report
from tests.engines import harness, specs
from tests.engines.conftest import CDI_SETTINGS, SUITES, RealEngines, setting_id
from tests.engines.specs import Outcome

RESOLVABLE = ("ok", "partial")
# Where Debian's packages install each daemon, and the package whose dpkg stanza the node has.
LAYOUT = {"docker": ("usr/sbin/dockerd", "docker.io"), "containerd": ("usr/bin/containerd", "containerd")}


def dpkg_stanza(control: dict[str, str]) -> str:
    """The package's stanza as dpkg's status file holds it once installed."""
    lines = [f"Package: {control['Package']}", "Status: install ok installed"]
    lines += [f"{key}: {value}" for key, value in control.items() if key != "Package" and value]
    return "\n".join(lines) + "\n"


def node_root(engines: RealEngines, name: str, engine: str, daemon: Any) -> Path:
    """R: the engine's unpacked binary hard-linked in place (copied across file systems), R/var/lib/dpkg/status
    with its package's stanza, the daemon's configuration, and the host file the 0.4.0 spec mounts."""
    root = engines.home / "nodes" / name
    if root.exists():
        return root
    binary_rel, package = LAYOUT[engine]
    binary = root / binary_rel
    binary.parent.mkdir(parents=True)
    source = daemon.suite.binary("dockerd" if engine == "docker" else "containerd")
    try:
        os.link(source, binary)
    except OSError:
        shutil.copy2(source, binary)
    status = root / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text(dpkg_stanza(daemon.suite.packages[package]))
    if engine == "docker":
        config = root / "etc/docker/daemon.json"
        config.parent.mkdir(parents=True)
        config.write_text(json.dumps(daemon.daemon_json, indent=2) + "\n")
    else:
        config = root / "etc/containerd/config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(daemon.config_text)
    payload = root / str(engines.payload).lstrip("/")
    payload.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(engines.payload, payload)
    return root


def probe(run_cli, root: Path, spec_dir: Path, *extra: str) -> dict[str, Any]:
    code, out, err = run_cli(
        "probe", "--backend", "cdi", "--root", str(root), "--spec-dir", str(spec_dir), "--json", *extra
    )
    assert code in (0, 1), err
    report = json.loads(out)
    validate_report(report)
    if "engines" not in report:
        pytest.skip("this cgpu reports no `engines` (learning the installed engine is not merged here)")
    return dict(report)


def judged_engine(report: dict[str, Any]) -> dict[str, Any]:
    judged = [e for e in report["engines"] if e.get("judged")]
    assert len(judged) == 1, report["engines"]
    return dict(judged[0])


def release(version: str) -> str:
    """26.1.5 of 26.1.5+dfsg1 (the daemon's answer) and of 26.1.5+dfsg1-9+deb13u1+b1 (its package)."""
    return version.lstrip("v").split("+")[0].split("~")[0].split("-")[0]


def assert_same_answer(report: dict[str, Any], outcomes: dict[str, Outcome], spec_dir: Path, config: str) -> None:
    """Device by device, cgpu's answer is the engine's. A refused device not listed must have its reason as an
    error: on its spec file (a cdiVersion too new) or, where the engine injected nothing, on what says CDI is off
    (the engine's configuration file; `docker` when the daemon's API said so)."""
    devices = {d["name"]: d for d in report["devices"]}
    cdi_on = any(outcomes[v].injected for v in specs.VERSIONS)
    errors = [p for p in report["problems"] if p["severity"] == "error"]
    for version in specs.VERSIONS:
        name = specs.device_name(version)
        outcome = outcomes[version]
        device = devices.get(name)
        if outcome.injected:
            assert device is not None, f"{name}: the engine injected it, cgpu does not list it: {report['problems']}"
            assert device["status"] in RESOLVABLE, f"{name}: the engine injected it; cgpu: {device}"
            continue
        if device is not None:
            assert device["status"] == "blocked", f"{name}: the engine refused it ({outcome.detail}); cgpu: {device}"
            assert device.get("reason") or device.get("missing"), device
            continue
        where = str(spec_dir / f"{specs.tag(version)}.json") if cdi_on else config
        said = [p for p in errors if p["source"] == where]
        assert said, f"{name}: refused by the engine ({outcome.detail}); no error on {where}: {report['problems']}"
    for api, answer in report["apis"].items():
        if api != "metal":  # the specs give no GPU: whatever the engine, no API is provided
            assert answer["state"] != "provided", (api, answer)


def assert_judged(report: dict[str, Any], engine: str, daemon: Any, outcomes: dict[str, Outcome], root: Path) -> None:
    judged = judged_engine(report)
    assert judged["name"] == engine
    assert release(judged["version"]) == release(daemon.version), (judged, daemon.version)
    on = any(outcomes[v].injected for v in specs.VERSIONS)
    assert judged["cdi_enabled"] is on, judged
    if on:
        assert judged["max_cdi_version"] == specs.ceiling(outcomes), judged
    assert judged["learned_from"] in ("build-info", "package", "version"), judged
    assert judged["spec_dirs"] == [str(daemon.spec_dir)], judged  # what its configuration names
    # Learned from the node's files alone: nothing ran, every source is under the root.
    assert judged["sources"] and all(s.startswith(f"{root}/") for s in judged["sources"]), judged


@pytest.mark.parametrize("cdi", CDI_SETTINGS, ids=setting_id)
@pytest.mark.parametrize("suite", SUITES)
def test_docker_static_answer_is_the_engine_s(real_engines, run_cli, suite, cdi):
    dockerd = real_engines.dockerd(suite, cdi)
    outcomes = real_engines.docker_measure(suite, cdi)
    root = node_root(real_engines, f"{suite}-docker-{setting_id(cdi)}", "docker", dockerd)
    report = probe(run_cli, root, real_engines.spec_dir)
    assert_judged(report, "docker", dockerd, outcomes, root)
    assert_same_answer(report, outcomes, real_engines.spec_dir, str(root / "etc/docker/daemon.json"))


@pytest.mark.parametrize("cdi", CDI_SETTINGS, ids=setting_id)
@pytest.mark.parametrize("suite", SUITES)
def test_containerd_static_answer_is_the_engine_s(real_engines, run_cli, suite, cdi):
    containerd = real_engines.containerd(suite, cdi)
    outcomes = real_engines.cri_measure(suite, cdi)
    root = node_root(real_engines, f"{suite}-containerd-{setting_id(cdi)}", "containerd", containerd)
    report = probe(run_cli, root, real_engines.spec_dir)
    assert_judged(report, "containerd", containerd, outcomes, root)
    assert_same_answer(report, outcomes, real_engines.spec_dir, str(root / "etc/containerd/config.toml"))


@pytest.mark.parametrize("cdi", CDI_SETTINGS, ids=setting_id)
@pytest.mark.parametrize("suite", SUITES)
def test_docker_api_static_answer_is_the_engine_s(real_engines, run_cli, tmp_path, suite, cdi):
    """Without --root, the host's Docker daemon as DOCKER_HOST names it judges: its version and whether CDI is on
    come from its API (`docker info`'s CDISpecDirs), and the answer is again the engine's."""
    dockerd = real_engines.dockerd(suite, cdi)
    outcomes = real_engines.docker_measure(suite, cdi)
    env = {"DOCKER_HOST": dockerd.host, "CGPU_CACHE_DIR": str(tmp_path / "cache")}
    code, out, err = run_cli(
        "probe", "--backend", "cdi", "--spec-dir", str(real_engines.spec_dir), "--engine", "docker", "--json", env=env
    )
    assert code in (0, 1), err
    report = json.loads(out)
    validate_report(report)
    if "engines" not in report:
        pytest.skip("this cgpu reports no `engines` (learning the installed engine is not merged here)")
    judged = judged_engine(report)
    assert (judged["name"], release(judged["version"])) == ("docker", release(dockerd.version))
    on = any(outcomes[v].injected for v in specs.VERSIONS)
    assert judged["cdi_enabled"] is on, judged
    assert_same_answer(report, outcomes, real_engines.spec_dir, "docker")


@pytest.mark.parametrize("engine", ["docker", "containerd"])
@pytest.mark.parametrize("suite", SUITES)
def test_an_unresolvable_device_is_reported_so(real_engines, run_cli, suite, engine):
    """A name no spec defines: Docker refuses the container and so does containerd's CRI (CDI on); cgpu lists
    no such device and says it is unresolvable."""
    if engine == "docker":
        daemon: Any = real_engines.dockerd(suite, True)
        outcome = real_engines.docker_measure(suite, True)["unknown"]
    else:
        daemon = real_engines.containerd(suite, True)
        outcome = real_engines.cri_measure(suite, True)["unknown"]
    assert not outcome.injected and "unresolvable CDI devices" in outcome.detail, outcome
    root = node_root(real_engines, f"{suite}-{engine}-cdi-on", engine, daemon)
    report = probe(run_cli, root, real_engines.spec_dir, "--device", specs.UNKNOWN_DEVICE)
    assert specs.UNKNOWN_DEVICE not in {d["name"] for d in report["devices"]}
    said = [p for p in report["problems"] if p["source"] == specs.UNKNOWN_DEVICE]
    assert said and "unresolvable" in said[0]["message"], report["problems"]


def test_the_node_roots_are_what_dpkg_would_leave(real_engines):
    """The layout itself: the binary is the unpacked one, the stanza parses as dpkg's and names the version."""
    found = next((s for s in SUITES if harness.suite(s)[0] is not None), None)
    if found is None:
        pytest.skip(harness.suite(SUITES[0])[1])
    containerd = real_engines.containerd(found, True)
    root = node_root(real_engines, f"{found}-containerd-cdi-on", "containerd", containerd)
    assert os.path.samefile(root / "usr/bin/containerd", containerd.suite.binary("containerd")) or (
        (root / "usr/bin/containerd").read_bytes() == Path(containerd.suite.binary("containerd")).read_bytes()
    )
    from cgpu.node.packages import read_dpkg_status

    stanzas = read_dpkg_status((root / "var/lib/dpkg/status").read_text())
    assert [p.name for p in stanzas] == ["containerd"]
    stanza = stanzas[0]
    assert f"{stanza.version}-{stanza.release}" == containerd.suite.packages["containerd"]["Version"]


def test_the_remembered_engine_follows_docker_host(real_engines, run_cli, tmp_path):
    """Two real Docker daemons, one cache dir: each run judges by the daemon DOCKER_HOST names, not the one
    remembered from the run before (issue: the remembered host engine ignored DOCKER_HOST)."""
    daemons = [real_engines.dockerd(suite, True) for suite in SUITES]
    seen = []
    for dockerd in [*daemons, *daemons]:
        env = {"DOCKER_HOST": dockerd.host, "CGPU_CACHE_DIR": str(tmp_path / "cache")}
        code, out, err = run_cli(
            "probe",
            "--backend",
            "cdi",
            "--spec-dir",
            str(real_engines.spec_dir),
            "--engine",
            "docker",
            "--json",
            env=env,
        )
        assert code == 0, err
        report = json.loads(out)
        if "engines" not in report:
            pytest.skip("this cgpu reports no `engines` (learning the installed engine is not merged here)")
        judged = judged_engine(report)
        assert (judged["name"], release(judged["version"])) == ("docker", release(dockerd.version))
        seen.append(judged["max_cdi_version"])
    outcomes = [specs.ceiling(real_engines.docker_measure(suite, True)) for suite in SUITES]
    assert seen == outcomes + outcomes
