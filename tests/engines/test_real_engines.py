"""What each real engine does with specs of every cdiVersion, with CDI on and off: measured on the daemons,
never assumed (Debian unstable moves). These check the harness and the engines alone, not cgpu: they are the
ground truth the static answer is compared with in test_static_answer.py.

Expected ceilings: a Debian build links Debian's CDI library package where its control data names it
(Built-Using / Static-Built-Using), else the library the release vendors (docs/cdi.md, the engine rows).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.engines import harness, specs
from tests.engines.conftest import CDI_SETTINGS, SUITES, setting_id

# Docker Engine releases whose Debian build vendors its own CDI library (no Debian CDI package in its control
# data): the highest cdiVersion of that library (moby vendor.mod at each tag; docs/cdi.md's Docker rows).
DOCKER_VENDORED = (((25, 0), "0.6.0"), ((26, 1), "0.7.0"), ((27, 4), "0.8.0"), ((28, 1), "1.0.0"), ((29, 2), "1.1.0"))
CDI_PACKAGE = re.compile(r"golang-tags\.cncf-container-device-interface\s*\(=\s*([0-9.]+)")


def release(version: str) -> tuple[int, int]:
    found = re.match(r"v?(\d+)\.(\d+)", version)
    assert found, f"not a version: {version!r}"
    return int(found.group(1)), int(found.group(2))


def linked_library(control: dict[str, str]) -> str | None:
    """The Debian CDI library package version the package was built with, if its control data names one."""
    for field in ("Static-Built-Using", "Built-Using"):
        found = CDI_PACKAGE.search(control.get(field, ""))
        if found:
            return found.group(1)
    return None


def expected_docker_ceiling(version: str, control: dict[str, str]) -> str:
    library = linked_library(control)
    if library:
        return specs.library_ceiling(library)
    rows = [ceiling for since, ceiling in DOCKER_VENDORED if release(version) >= since]
    assert rows, f"Docker {version} is older than any row"
    return rows[-1]


def assert_prefix(outcomes: dict[str, specs.Outcome], ceiling: str) -> None:
    """Every version up to the ceiling injected, every one above refused."""
    for version in specs.VERSIONS:
        injected = outcomes[version].injected
        up_to = specs.VERSIONS.index(version) <= specs.VERSIONS.index(ceiling)
        assert injected == up_to, f"cdiVersion {version}: injected={injected}: {outcomes[version].detail}"


@pytest.mark.parametrize("suite", SUITES)
def test_docker_injects_up_to_its_cdi_library(real_engines, suite):
    dockerd = real_engines.dockerd(suite, True)
    outcomes = real_engines.docker_measure(suite, True)
    ceiling = specs.ceiling(outcomes)
    expected = expected_docker_ceiling(dockerd.version, dockerd.suite.packages["docker.io"])
    assert ceiling == expected, f"Docker {dockerd.version}: measured {ceiling}, its CDI library reads {expected}"
    assert_prefix(outcomes, expected)
    for version in specs.VERSIONS[specs.VERSIONS.index(expected) + 1 :]:
        assert "CDI device injection failed" in outcomes[version].detail, outcomes[version].detail
    assert "unresolvable CDI devices" in outcomes["unknown"].detail
    assert not outcomes["unknown"].injected


@pytest.mark.parametrize("suite", SUITES)
def test_containerd_cri_injects_up_to_its_cdi_library(real_engines, suite):
    containerd = real_engines.containerd(suite, True)
    outcomes = real_engines.cri_measure(suite, True)
    library = linked_library(containerd.suite.packages["containerd"])
    if library is None:
        pytest.skip(f"containerd {containerd.version}'s control data names no Debian CDI library")
    expected = specs.library_ceiling(library)
    assert specs.ceiling(outcomes) == expected, f"containerd {containerd.version}, CDI library {library}"
    assert_prefix(outcomes, expected)
    refusal = outcomes["unknown"].detail
    assert "CDI device injection failed" in refusal and "unresolvable CDI devices" in refusal, refusal


@pytest.mark.parametrize("suite", SUITES)
def test_cri_annotation_is_the_same_request(real_engines, suite):
    """The `cdi.k8s.io/` annotation (older kubelets, device plugins) and the CRI's CDI_devices field get the
    same answer."""
    by_field = real_engines.cri_measure(suite, True)
    by_annotation = real_engines.cri_measure(suite, True, annotation=True)
    assert {v: o.injected for v, o in by_annotation.items()} == {v: o.injected for v, o in by_field.items()}


@pytest.mark.parametrize("cdi", CDI_SETTINGS, ids=setting_id)
@pytest.mark.parametrize("suite", SUITES)
def test_docker_cdi_setting(real_engines, suite, cdi):
    """features.cdi decides; left out, CDI is on from Docker 28.2 (off before). Off: every CDI request is refused
    with Docker's own message, and `docker info` lists no spec dir."""
    dockerd = real_engines.dockerd(suite, cdi)
    on = cdi if cdi is not None else release(dockerd.version) >= (28, 2)
    outcomes = real_engines.docker_measure(suite, cdi)
    dirs = dockerd.info().get("CDISpecDirs")
    if on:
        assert dirs == [str(real_engines.spec_dir)]
        assert outcomes["0.3.0"].injected, outcomes["0.3.0"].detail
    else:
        assert not dirs
        for version, outcome in outcomes.items():
            assert not outcome.injected, version
            assert 'could not select device driver "cdi"' in outcome.detail, outcome.detail


@pytest.mark.parametrize("cdi", CDI_SETTINGS, ids=setting_id)
@pytest.mark.parametrize("suite", SUITES)
def test_containerd_cdi_setting(real_engines, suite, cdi):
    """enable_cdi decides; left out, off in 1.7 and on from 2.0. Off: the CRI's CDI devices are ignored, the
    container is created without them (an unknown device too: nothing tells the kubelet)."""
    containerd = real_engines.containerd(suite, cdi)
    on = cdi if cdi is not None else release(containerd.version) >= (2, 0)
    outcomes = real_engines.cri_measure(suite, cdi)
    if on:
        assert outcomes["0.3.0"].injected, outcomes["0.3.0"].detail
    else:
        for version, outcome in outcomes.items():
            assert outcome == specs.Outcome(False, "created without the device's edits"), version


def test_engine_versions_are_read_from_the_engines(real_engines):
    """Each daemon's version is its own answer (API, CRI Version) and matches its package's version."""
    seen = 0
    for suite in SUITES:
        found, _reason = harness.suite(suite)
        if found is None:
            continue
        dockerd = real_engines.dockerd(suite, True)
        package = dockerd.suite.packages["docker.io"]["Version"]
        assert package.startswith(dockerd.version.split("+")[0]), (dockerd.version, package)
        client = real_engines.cri(suite, True)
        try:
            answer = client.version()
        finally:
            client.close()
        assert answer.runtime_name == "containerd"
        assert answer.runtime_version == real_engines.containerd(suite, True).version
        assert dockerd.suite.packages["containerd"]["Version"].startswith(answer.runtime_version.split("+")[0])
        seen += 1
    if not seen:
        pytest.skip("no suite of real engines here")


@pytest.mark.engines
@pytest.mark.slow
def test_a_session_leaves_nothing_behind():
    """Start a containerd with a running pod sandbox and a dockerd on it, close the session: no process
    names its dir, nothing is mounted under it, and the shared dirs are as they were."""
    found = next((s for s in (harness.suite(n)[0] for n in SUITES) if s is not None), None)
    if found is None:
        pytest.skip(harness.suite(SUITES[0])[1])
    busybox, reason = harness.busybox()
    if busybox is None:
        pytest.skip(reason)
    before = {d: Path(d).exists() for d in harness.SHARED_DIRS}
    seconds = ""
    home = Path(tempfile.mkdtemp(prefix="cgpu-e-", dir="/tmp"))
    session = harness.Session(home)
    try:
        (home / "cdi").mkdir()
        rootfs = harness.rootfs_tar(busybox, home / "rootfs.tar")
        containerd = harness.Containerd(found, home / "c", True, home / "cdi")
        session.containerds.append(containerd)
        try:
            containerd.start(harness.oci_archive(rootfs, home / "oci.tar"))
        except Exception as exc:
            pytest.skip(f"containerd of {found.name} did not come up: {exc}")
        dockerd = harness.Dockerd(found, containerd, home / "d", True, home / "cdi")
        session.dockerds.append(dockerd)
        dockerd.start(rootfs)
        seconds = str(600_000 + os.getpid())  # this test's container, told apart by its command line
        done = dockerd.docker("run", "-d", "--network", "none", harness.IMAGE, "sleep", seconds)
        assert done.returncode == 0, harness.text(done)
        assert harness.pids_mentioning(str(home))
        assert harness.pids_mentioning(f"sleep\0{seconds}")
    finally:
        session.close()
    try:
        assert harness.pids_mentioning(str(home)) == []
        assert harness.pids_mentioning(f"sleep\0{seconds}") == []
        assert harness.mounts_under(home) == []
        for folder, existed in before.items():
            if not existed:  # another session may have made it meanwhile: then it is not empty
                assert not Path(folder).exists() or any(Path(folder).iterdir()), folder
    finally:
        shutil.rmtree(home, ignore_errors=True)
