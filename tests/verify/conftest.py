"""Real podman for the verify tests: a stand-in image, CDI specs under unique kinds, and a
check that no container outlives a test."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from tests.conftest import VERIFY_FILTER, VERIFY_LABEL


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)


def labelled_containers() -> set[str]:
    return set(podman("ps", "-a", "-q", "--filter", VERIFY_FILTER).stdout.split())


def _busybox_image(root: Path, python3_script: str) -> str:
    """Import a busybox image whose `python3` is the given sh script; skips the podman tests,
    with the reason, where podman cannot run a container."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (.ci/run installs podman, runc and busybox-static)")
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox-static is not installed")
    for folder in ("bin", "usr/bin", "tmp"):
        (root / folder).mkdir(parents=True)
    shutil.copy(busybox, root / "bin" / "busybox")
    for applet in ("sh", "cat", "env", "sleep", "echo", "true", "ls"):
        (root / "bin" / applet).symlink_to("busybox")
    python3 = root / "usr" / "bin" / "python3"
    python3.write_text("#!/bin/sh\n" + python3_script)
    python3.chmod(0o755)
    tar_path = root.parent / f"{root.name}.tar"
    with tarfile.open(tar_path, "w") as tar:
        tar.add(root, arcname=".")
    ref = f"localhost/cgpu-test-stand-in:{uuid.uuid4().hex[:8]}"
    done = podman("import", "--change", "ENV PATH=/usr/bin:/bin", str(tar_path), ref)
    if done.returncode != 0:
        pytest.skip(f"podman cannot import an image here: {done.stderr.strip()}")
    smoke = podman("run", "--rm", "--network", "none", ref, "true")
    if smoke.returncode != 0:
        podman("rmi", "-f", ref)
        pytest.skip(f"podman cannot run a container here: {smoke.stderr.strip()}")
    return ref


@pytest.fixture(scope="session")
def stand_in_image(tmp_path_factory) -> str:
    """A busybox image whose `python3` never answers (a hung probe); `sh`, `cat`, `env` work."""
    ref = _busybox_image(tmp_path_factory.mktemp("hung"), "exec sleep 600\n")
    yield ref
    podman("rmi", "-f", ref)


@pytest.fixture(scope="session")
def babbling_image(tmp_path_factory) -> str:
    """A busybox image whose `python3` prints what $CGPU_TEST_OUTPUT says, and complains."""
    ref = _busybox_image(
        tmp_path_factory.mktemp("babbling"), 'printf "%s" "$CGPU_TEST_OUTPUT"; echo "probe exploded" >&2; exit 2\n'
    )
    yield ref
    podman("rmi", "-f", ref)


@pytest.fixture
def cdi_spec():
    """Write a CDI spec into /etc/cdi under a unique kind; returns (kind, path); removed after."""
    written: list[Path] = []

    def write(text_for_kind, *, cdi_version: str = "0.5.0") -> str:
        kind = f"cgpu-test-{uuid.uuid4().hex[:8]}.example.com/gpu"
        spec_dir = Path("/etc/cdi")
        try:
            spec_dir.mkdir(parents=True, exist_ok=True)
            path = spec_dir / f"{kind.split('/')[0]}.yaml"
            # written beside it under a name no reader takes, then renamed: another suite's podman
            # or cgpu reading /etc/cdi at this moment sees the whole spec or none
            partial = spec_dir / f".{path.name}.partial"
            partial.write_text(f'cdiVersion: "{cdi_version}"\nkind: {kind}\n' + text_for_kind)
            partial.replace(path)
        except OSError as exc:
            pytest.skip(f"cannot write CDI specs into /etc/cdi: {exc}")
        written.append(path)
        return kind

    yield write
    for path in written:
        path.unlink(missing_ok=True)


@pytest.fixture
def no_leftover_containers():
    """Fails the test when a container this run labelled (cgpu.verify=VERIFY_LABEL) outlives it."""
    before = labelled_containers()
    yield
    left = labelled_containers() - before
    if left:
        podman("rm", "-f", *left)
    assert not left, f"containers left behind: {left}"


@pytest.fixture
def podman_service(tmp_path):
    """A private `podman system service`, for talking to podman's Docker-compatible API."""
    from cgpu.engines.client import PodmanService

    service = PodmanService.start(timeout=120)
    try:
        yield service
    finally:
        service.stop()


def service_processes() -> list[str]:
    """`podman system service` processes cgpu started in this test run (their sockets live in
    cgpu-podman-*; they inherit this run's CGPU_VERIFY_LABEL, which other runs on the host do not share)."""
    done = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, timeout=10)
    mine = f"CGPU_VERIFY_LABEL={VERIFY_LABEL}".encode()
    found = []
    for line in done.stdout.splitlines():
        if "system service" not in line or "cgpu-podman-" not in line:
            continue
        try:
            environ = Path(f"/proc/{line.split()[0]}/environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if mine in environ:
            found.append(line)
    return found


@pytest.fixture(scope="session")
def probe_image(stand_in_image) -> str:
    """The real probe image, built when this host has none yet; never removed (it is shared)."""
    from cgpu.backends.cdi.probe_image import ImageBuildError, ensure_probe_image
    from cgpu.engines.client import open_engine

    try:
        with open_engine("podman", timeout=120) as engine:
            ref, _seconds = ensure_probe_image(engine, timeout=120, progress=lambda _m: None)
    except ImageBuildError as exc:
        pytest.skip(str(exc))
    # Kept after the session: its tag is a digest of this host's packages, so every run here
    # (another test run at the same time, the user's own `--verify`) uses this same image.
    return ref
