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


class PrivateSpecDir:
    """/etc/cdi as this test process and everything it starts (podman, its service, cgpu) see it: a
    private dir bind-mounted over it in a mount namespace of the process's own, so no test writes
    the machine's /etc/cdi (which every other probe on the machine reads).

    podman 4.3.1 (Debian 12) reads only /etc/cdi and /var/run/cdi: containers.conf's
    `[engine] cdi_spec_dirs` is honoured from podman 5.5 (containers/podman PR #25717; ignored
    before, containers/podman#25691), so a private containers.conf cannot move it. The namespace
    follows the host's mounts (slave), and its own go nowhere. Where the machine has no /etc/cdi,
    /etc is first overlaid in the namespace so that the mount point exists there only. unshare(2)
    moves the calling thread (the main one) and all it starts from then on; it needs root, and the
    test skips with the reason where it cannot be done."""

    CLONE_NEWNS, MS_BIND, MS_REC, MS_SLAVE = 0x00020000, 0x1000, 0x4000, 0x80000

    def __init__(self, scratch: Path) -> None:
        import ctypes
        import os

        self.path = scratch / "etc-cdi"
        self.path.mkdir()
        self.written: set[str] = set()
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            pytest.skip("the verify tests give podman a private /etc/cdi with a bind mount, which needs root")
        self._host_etc = os.open("/etc", os.O_RDONLY | os.O_DIRECTORY)  # the machine's, to check at the end
        self.host_had_dir = os.path.isdir("/etc/cdi")
        libc = ctypes.CDLL(None, use_errno=True)

        def call(what: str, result: int) -> None:
            if result != 0:
                error = ctypes.get_errno()
                pytest.skip(f"cannot give the tests a private /etc/cdi ({what}: {os.strerror(error)})")

        call("unshare", libc.unshare(self.CLONE_NEWNS))
        call("mount --make-rslave /", libc.mount(None, b"/", None, self.MS_REC | self.MS_SLAVE, None))
        if not self.host_had_dir:
            upper, work = scratch / "etc-upper", scratch / "etc-work"
            upper.mkdir()
            work.mkdir()
            options = f"lowerdir=/etc,upperdir={upper},workdir={work}".encode()
            call("overlay on /etc", libc.mount(b"overlay", b"/etc", b"overlay", 0, options))
            os.mkdir("/etc/cdi", 0o755)
        call("bind over /etc/cdi", libc.mount(str(self.path).encode(), b"/etc/cdi", None, self.MS_BIND, None))

    def host_changes(self) -> list[str]:
        """The specs of this run found in the machine's own /etc/cdi. (Whether the dir itself is as it
        was, `.ci/run` checks: another suite on a shared machine may make it meanwhile.)"""
        import os

        if "cdi" not in os.listdir(self._host_etc):
            return []
        host_cdi = os.open("cdi", os.O_RDONLY | os.O_DIRECTORY, dir_fd=self._host_etc)
        try:
            return [f"/etc/cdi/{name}" for name in os.listdir(host_cdi) if name in self.written]
        finally:
            os.close(host_cdi)


@pytest.fixture(scope="session")
def private_spec_dir(tmp_path_factory) -> PrivateSpecDir:
    """The private /etc/cdi of this test process (see PrivateSpecDir); at the end of the run, none of
    its specs may be in the machine's own /etc/cdi."""
    import os

    private = PrivateSpecDir(tmp_path_factory.mktemp("private-cdi"))
    yield private
    changes = private.host_changes()
    os.close(private._host_etc)
    assert not changes, f"the machine's /etc/cdi was written by this run: {changes}"


@pytest.fixture
def cdi_spec(private_spec_dir):
    """Write a CDI spec into /etc/cdi (this process's private one) under a unique kind; returns the
    kind; removed after."""
    written: list[Path] = []

    def write(text_for_kind, *, cdi_version: str = "0.5.0") -> str:
        kind = f"cgpu-test-{uuid.uuid4().hex[:8]}.example.com/gpu"
        path = Path("/etc/cdi") / f"{kind.split('/')[0]}.yaml"
        private_spec_dir.written.add(path.name)
        # written beside it under a name no reader takes, then renamed: a reader sees the whole spec or none
        partial = path.parent / f".{path.name}.partial"
        partial.write_text(f'cdiVersion: "{cdi_version}"\nkind: {kind}\n' + text_for_kind)
        partial.replace(path)
        written.append(path)
        assert (private_spec_dir.path / path.name).exists()  # the private dir, not the machine's
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
