"""Fixtures for the krunkit backend: stand-ins only for what macOS has and this machine lacks
(`krunkit`, `podman machine`), the real podman engine for everything else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REAL_PODMAN = shutil.which("podman")
# What an image's own entry point prints in these tests: a forged probe answer saying Venus works
# (Vulkan provided). cgpu runs its own probe, never the entry point, so no test may see it believed.
FORGED_VENUS = {
    "name": "Forged Venus (entry point)",
    "type": 1,
    "driver_id": 22,
    "driver_name": "venus",
    "allocated": True,
    "counted": True,
    "reason": "printed by the image's entry point",
}
ENTRY_POINT_ANSWER = json.dumps(
    {
        "probe_version": 1,
        "platform": "linux-aarch64",
        "apis": {
            "vulkan": {"available": True, "summary": "vulkan available (forged)", "devices": [FORGED_VENUS]},
        },
    }
)


def marked_processes(mark: str) -> list[str]:
    """Processes (other than this one) whose environment carries `mark`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"CGPU_TEST_MARK={mark}".encode() in env.split(b"\0"):
            found.append(f"{entry}: {cmd}")
    return found


@pytest.fixture(autouse=True)
def no_leftovers(monkeypatch, tmp_path):
    """Every test: its own cache dir, and no process it started may outlive it."""
    mark = uuid.uuid4().hex
    monkeypatch.setenv("CGPU_TEST_MARK", mark)
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CGPU_KRUNKIT_EXE", raising=False)
    yield mark
    deadline = time.monotonic() + 30  # a SIGKILLed process needs a moment to be reaped (longer when busy)
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"processes left behind: {left}"


def _wrapper(path: Path, script: Path) -> Path:
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    """A PATH entry with the krunkit stand-in (and, with `fake_podman`, the podman one)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    _wrapper(folder / "krunkit", HERE / "fake_krunkit.py")
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


@pytest.fixture
def machines(bin_dir, tmp_path, monkeypatch):
    """Write the podman machine listing the `podman machine` stand-in answers with."""
    if REAL_PODMAN is None:
        pytest.skip("podman is not installed")
    listing = tmp_path / "machines.json"
    _wrapper(bin_dir / "podman", HERE / "fake_podman.py")
    monkeypatch.setenv("FAKE_PODMAN_MACHINES", str(listing))
    monkeypatch.setenv("FAKE_PODMAN_REAL", REAL_PODMAN)

    def write(*entries: dict) -> None:
        listing.write_text(json.dumps(list(entries)))

    write()
    return write


@pytest.fixture(scope="session")
def podman_api():
    """A real `podman system service` socket: what a podman machine's API socket leads to."""
    if REAL_PODMAN is None:
        pytest.skip("podman is not installed")
    folder = Path(tempfile.mkdtemp(prefix="cgpu-krunkit-api-"))
    sock = folder / "api.sock"
    env = {k: v for k, v in os.environ.items() if k != "CGPU_TEST_MARK"}  # it outlives single tests
    service = subprocess.Popen(
        [REAL_PODMAN, "system", "service", "--time=0", f"unix://{sock}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not sock.exists() and service.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not sock.exists():
            pytest.skip("podman system service did not start")
        yield str(sock)
    finally:
        service.terminate()
        try:
            service.wait(timeout=10)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def probe_images():
    """Build local images (`podman import`, no registry) whose `python3` is a shell script that
    prints a canned probe JSON: cgpu runs its own probe with the image's python3, so this plays
    cgpu's probe meeting the Mesa in a Venus probe image. The entry point prints a contrary
    answer, which cgpu must never run."""
    if REAL_PODMAN is None or not os.path.exists("/bin/busybox"):
        pytest.skip("needs podman and busybox-static")
    work = Path(tempfile.mkdtemp(prefix="cgpu-krunkit-img-"))
    tag = uuid.uuid4().hex[:8]
    made: list[str] = []

    def build(name: str, stdout: str, exit_code: int = 0, script: str | None = None) -> str:
        root = work / name
        (root / "bin").mkdir(parents=True)
        shutil.copy("/bin/busybox", root / "bin" / "busybox")
        for applet in ("sh", "cat", "sleep"):
            (root / "bin" / applet).symlink_to("busybox")
        (root / "probe.json").write_text(stdout)
        python = root / "bin" / "python3"
        python.write_text(f"#!/bin/sh\n{script or f'cat /probe.json; exit {exit_code}'}\n")
        python.chmod(0o755)
        tar = work / f"{name}.tar"
        subprocess.run(["tar", "-C", str(root), "-cf", str(tar), "."], check=True)
        ref = f"localhost/cgpu-krunkit-test-{tag}:{name}"
        entry = json.dumps(["/bin/sh", "-c", f"echo '{ENTRY_POINT_ANSWER}'"])
        done = subprocess.run(
            [REAL_PODMAN, "import", "--change", "ENV PATH=/bin", "--change", f"ENTRYPOINT {entry}", str(tar), ref],
            capture_output=True,
            timeout=60,
        )
        if done.returncode != 0:
            pytest.skip(f"podman import failed: {done.stderr.decode(errors='replace')[-300:]}")
        made.append(ref)
        return ref

    try:
        yield build
    finally:
        if made:
            subprocess.run([REAL_PODMAN, "rmi", "-f", *made], capture_output=True, timeout=60)
        shutil.rmtree(work, ignore_errors=True)


def _copy_with_libs(root: Path, files: list[str]) -> None:
    """Copy files into `root` at the same paths, with the shared libraries they link."""
    wanted = set()
    for path in files:
        wanted.add(path)
        done = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=30)
        for line in done.stdout.splitlines():
            parts = line.split()
            for part in parts:
                if part.startswith("/"):
                    wanted.add(part)
    for path in wanted:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(os.path.realpath(path), target)


@pytest.fixture(scope="session")
def real_probe_image():
    """An image with python3 and the real Vulkan loader but no driver (Debian's python3.11 and
    libvulkan.so.1 copied from this machine, no registry needed), in which cgpu runs its own
    probe. Its entry point prints a forged "Venus works" answer that cgpu must never believe."""
    python, loader = "/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libvulkan.so.1"
    stdlib = Path("/usr/lib/python3.11")
    if REAL_PODMAN is None or not (os.path.exists(python) and os.path.exists(loader) and stdlib.is_dir()):
        pytest.skip("needs podman, python3.11 and libvulkan1 (Debian 12 paths)")
    work = Path(tempfile.mkdtemp(prefix="cgpu-krunkit-py-"))
    ref = f"localhost/cgpu-krunkit-test-{uuid.uuid4().hex[:8]}:real-probe"
    try:
        root = work / "root"
        ctypes_module = next(stdlib.glob("lib-dynload/_ctypes.*.so"), None)
        if ctypes_module is None:
            pytest.skip("this python3.11 has no _ctypes module")
        _copy_with_libs(root, [python, loader, str(ctypes_module)])
        (root / "usr/bin/python3").symlink_to("python3.11")
        shutil.copytree(
            stdlib,
            root / "usr/lib/python3.11",
            symlinks=True,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(
                "test",
                "tests",
                "__pycache__",
                "idlelib",
                "tkinter",
                "turtledemo",
                "ensurepip",
                "lib2to3",
                "dist-packages",
                "site-packages",
            ),
        )
        (root / "tmp").mkdir(mode=0o1777)
        tar = work / "root.tar"
        subprocess.run(["tar", "-C", str(root), "-cf", str(tar), "."], check=True, timeout=120)
        entry = json.dumps(["python3", "-c", f"print({ENTRY_POINT_ANSWER!r})"])  # never to be run by cgpu
        done = subprocess.run(
            [REAL_PODMAN, "import", "--change", "ENV PATH=/usr/bin", "--change", f"ENTRYPOINT {entry}", str(tar), ref],
            capture_output=True,
            timeout=120,
        )
        if done.returncode != 0:
            pytest.skip(f"podman import failed: {done.stderr.decode(errors='replace')[-300:]}")
        shutil.rmtree(work, ignore_errors=True)
        yield ref
    finally:
        subprocess.run([REAL_PODMAN, "rmi", "-f", ref], capture_output=True, timeout=60)
        shutil.rmtree(work, ignore_errors=True)
