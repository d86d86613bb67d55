"""The fault catalogue's tools: run the real CLI as a subprocess carrying an environment mark,
put stand-in executables first on PATH, interrupt a run at the moment it waits on one, and
fail any test that leaves a marked process or a temp file behind (the --verify tests also
check for containers this run labelled). Linux only: processes are found in /proc."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import validate_cli_output
from tests.timing import asleep

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "cdi-samples"
MARK_VAR = "CGPU_FAULT_MARK"
INTERRUPTED = 130
TERMINATED = 143
# Ctrl-C, and SIGTERM (what `timeout`, systemd and container runtimes send): (signal, exit status, stderr)
STOPS = [
    pytest.param(signal.SIGINT, INTERRUPTED, "cgpu: interrupted", id="ctrl-c"),
    pytest.param(signal.SIGTERM, TERMINATED, "cgpu: terminated", id="sigterm"),
]


def marked_processes(mark: str) -> list[str]:
    """Live processes (zombies aside) whose environment carries MARK_VAR=mark."""
    found = []
    needle = f"{MARK_VAR}={mark}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in env.split(b"\0") and stat.rpartition(")")[2].split()[0] != "Z":
            found.append(f"{entry}: {cmd}")
    return found


class Cli:
    """Runs `python -m cgpu` with this test's mark, a private cache and PATH as the test sets it."""

    def __init__(self, mark: str, env: dict[str, str]) -> None:
        self.mark = mark
        self.env = env

    def popen(self, *args: str, env: dict[str, str] | None = None, wrapper: tuple[str, ...] = ()) -> subprocess.Popen:
        """`wrapper` goes before the interpreter (e.g. setpriv to run as another user)."""
        return subprocess.Popen(
            [*wrapper, sys.executable, "-m", "cgpu", *args],
            cwd=REPO,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def __call__(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 120, wrapper: tuple[str, ...] = ()
    ) -> tuple[int, str, str]:
        code, out, err = self._collect(self.popen(*args, env=env, wrapper=wrapper), timeout)
        validate_cli_output(args, out)
        return code, out, err

    def interrupt_when(
        self,
        ready: Callable[[], bool],
        *args: str,
        env: dict[str, str] | None = None,
        within: float = 60,
        signum: int = signal.SIGINT,
    ) -> tuple[int, str, str]:
        """Start cgpu, send SIGINT (Ctrl-C) or `signum` once `ready()` holds and cgpu waits (every
        thread of it asleep: it has settled into waiting on that stage), and return what it did."""
        proc = self.popen(*args, env=env)
        deadline = time.monotonic() + within
        while not (ready() and asleep(proc.pid)):
            if proc.poll() is not None or time.monotonic() > deadline:
                code, _, err = self._collect(proc, 30)
                pytest.fail(f"the stage to interrupt was never reached (exit {code}): {err[-2000:]}")
            time.sleep(0.05)
        proc.send_signal(signum)
        code, out, err = self._collect(proc, 60)
        validate_cli_output(args, out)
        return code, out, err

    @staticmethod
    def _collect(proc: subprocess.Popen, timeout: float) -> tuple[int, str, str]:
        """Wait for cgpu (killed if it outlives `timeout`); its output, which never holds a traceback."""
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        stderr = err.decode(errors="replace")
        assert "Traceback" not in stderr, stderr
        return proc.returncode, out.decode(errors="replace"), stderr

    def running(self, name: str) -> bool:
        """A marked process whose command line names `name` is alive."""
        return any(name in line for line in marked_processes(self.mark))


@pytest.fixture
def bin_dir(tmp_path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    return folder


@pytest.fixture
def cli(tmp_path, bin_dir) -> Cli:
    """The CLI runner; fails the test when a marked process or a cgpu temp file outlives it
    (the run's TMPDIR is private, so whatever cgpu leaves in it is cgpu's)."""
    if not os.path.isdir("/proc"):
        pytest.skip("the fault tests find leftover processes in /proc (Linux)")
    mark = uuid.uuid4().hex
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {
        **os.environ,
        MARK_VAR: mark,
        "CGPU_CACHE_DIR": str(tmp_path / "cache"),
        "TMPDIR": str(tmp),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
    }
    yield Cli(mark, env)
    deadline = time.monotonic() + 30  # a killed process needs a moment to be reaped (longer when busy)
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for line in left:
        os.kill(int(line.split(":")[0]), signal.SIGKILL)
    assert not left, f"processes left behind: {left}"
    stray = [str(p.relative_to(tmp)) for p in tmp.rglob("*")]
    assert not stray, f"temp files left behind: {stray}"


def stand_in(folder: Path, name: str, body: str) -> Path:
    """An executable `name` in `folder`: a sh script with this body."""
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def hung(folder: Path, name: str) -> Path:
    """`name` that never answers (a wedged daemon, a hung VM start)."""
    return stand_in(folder, name, "exec sleep 600\n")


def need_root(reason: str) -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip(f"needs root: {reason}")


@pytest.fixture
def nobody():
    """(wrapper, folder): run cgpu as user nobody, with a folder nobody can reach (pytest's own
    temp folders are private to root)."""
    need_root("only root can become another user")
    setpriv = need("setpriv")
    wrapper = (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")
    can = subprocess.run(
        [*wrapper, sys.executable, "-c", "import cgpu.cli"],
        capture_output=True,
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    if can.returncode != 0:  # e.g. a checkout under /root, which only root may enter
        pytest.skip(f"user nobody cannot run cgpu from {REPO}: {can.stderr.decode(errors='replace')[-200:]}")
    folder = Path(tempfile.mkdtemp(prefix="cgpu-faults-"))
    folder.chmod(0o755)
    try:
        yield wrapper, folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed")
    return path


def mount_tmpfs(point: Path, options: str) -> Path:
    """Mount a small tmpfs at `point` (skips where that is not possible); unmount() it after."""
    need_root("mounting a tmpfs")
    need("mount")
    point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "cgpu-faults", str(point)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    return point


def unmount(point: Path) -> None:
    subprocess.run(["umount", "-l", str(point)], capture_output=True)


def fill(folder: Path) -> None:
    """Fill the file system under `folder` (a file named filler), leaving its inodes."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
