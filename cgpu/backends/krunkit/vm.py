"""The VM side of the krunkit backend: finding krunkit, or booting a probe VM with krunkit and
reading its answer (a podman machine's facts come from `cgpu.engines.client.PodmanEngine`).

Everything here returns facts or raises `VMError` with what failed and its fix; turning them
into a report is the job of the backend's other modules.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from cgpu.errors import CgpuError
from cgpu.gpu_probe import PROBE_SCRIPT
from cgpu.node.files import open_regular
from cgpu.run import CommandError, CommandTimeoutError, Completed, Helper, HelperExitedError, decode, run

KRUNKIT_ENV: Final = "CGPU_KRUNKIT_EXE"
BREW_INSTALL: Final = "brew tap slp/krun && brew trust slp/krun && brew install krunkit"
LIBKRUN_MACHINE_INIT: Final = "CONTAINERS_MACHINE_PROVIDER=libkrun podman machine init --now"

# Where podman looks for krunkit on macOS (its darwin helper_binaries_dir defaults) besides PATH.
PODMAN_HELPER_DIRS: Final = (
    "/opt/homebrew/bin",
    "/usr/local/bin",
    "/opt/podman/bin",
    "/opt/homebrew/opt/podman/libexec/podman",
    "/usr/local/opt/podman/libexec/podman",
)

# The probe VM cgpu boots from --vm-image. krunkit always gives it a Venus virtio-gpu (its
# `virtio-gpu` flag is accepted for vfkit parity); VRAM is what RAM leaves of ~62 GiB, so a
# small VM leaves the GPU room. The guest contract (krunkit/guest/) uses the vsock port and
# the virtio-fs tag.
VM_DEFAULTS: Final[dict[str, Any]] = {
    "cpus": 2,
    "memory_mib": 2048,
    "ready_vsock_port": 1025,  # podman machine's readiness port: the guest sends "Ready"
    "results_tag": "cgpu-results",  # virtio-fs share the guest writes probe.json into
    "gpu": "virtio-gpu,width=800,height=600",
}
MAX_MEMORY_MIB: Final = 61440  # krunkit refuses more ("to leave room for VRAM")
STOP_GRACE_S: Final = 5.0
LOG_TAIL_LINES: Final = 15
MAX_GUEST_OUTPUT: Final = 4 * 1024 * 1024  # of the probe's output or a log read back from the VM
# What the guest runs (krunkit/guest/cgpu-probe.sh: `podman run` of the probe image), for its Completed.
GUEST_PROBE: Final = ["cgpu-probe.sh"]


class VMError(CgpuError):
    """Something about the VM failed; `message` says what and how to fix it, `log_tail` is
    the end of the VM's logs when there are any."""

    def __init__(self, source: str, message: str, *, log_tail: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.message = message
        self.log_tail = log_tail


# --- krunkit ----------------------------------------------------------------------------


def find_krunkit() -> str | None:
    """`CGPU_KRUNKIT_EXE`, else krunkit on PATH, else in podman's helper directories."""
    override = os.environ.get(KRUNKIT_ENV)
    if override:
        return override
    found = shutil.which("krunkit")
    if found:
        return found
    for folder in PODMAN_HELPER_DIRS:
        candidate = os.path.join(folder, "krunkit")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def krunkit_version(exe: str, *, timeout: float) -> str:
    """`krunkit --version` prints `krunkit 1.2.1`; returns `1.2.1`."""
    try:
        done = run([exe, "--version"], timeout=timeout)
    except CommandError as exc:
        raise VMError(exe, f"{exc}; install krunkit: {BREW_INSTALL}") from None
    text = decode(done.stdout).strip()
    match = re.fullmatch(r"krunkit\s+(\d+\.\d+\.\d+\S*)", text)
    if done.returncode != 0 or match is None:
        raise VMError(
            exe,
            f"`{exe} --version` exited {done.returncode} with {text[:200]!r} "
            f"{decode(done.stderr).strip()[:300]!r}, not `krunkit X.Y.Z`; reinstall it: {BREW_INSTALL}",
        )
    return match.group(1)


# --- booting a probe VM with krunkit ----------------------------------------------------


def krunkit_argv(
    exe: str, disk: str, *, run_dir: Path, sock_dir: Path, shared: Path, cpus: int, memory_mib: int
) -> list[str]:
    """krunkit's command line for the probe VM (the flags podman machine uses, plus a
    virtio-fs share for the answer and the console and krunkit logs for the report)."""
    for what, value in (
        ("--vm-image", disk),
        ("the results directory", str(shared)),
        ("the run directory", str(run_dir)),
    ):
        if "," in value:  # krunkit's --device values are comma-separated key=value lists
            raise VMError(
                value,
                f"{what} path contains a comma, which krunkit's --device syntax cannot carry; "
                "move or link it to a path without one",
            )
    return [
        exe,
        "--cpus",
        str(cpus),
        "--memory",
        str(memory_mib),
        "--bootloader",
        f"efi,variable-store={run_dir / 'efi-variable-store'},create",
        "--device",
        f"virtio-blk,path={disk}",
        "--device",
        "virtio-rng",
        "--device",
        f"virtio-vsock,port={VM_DEFAULTS['ready_vsock_port']},socketURL={sock_dir / 'ready.sock'},listen",
        "--device",
        f"virtio-fs,sharedDir={shared},mountTag={VM_DEFAULTS['results_tag']}",
        "--device",
        f"virtio-serial,logFilePath={run_dir / 'console.log'}",
        "--device",
        VM_DEFAULTS["gpu"],
        "--restful-uri",
        f"unix://{sock_dir / 'rest.sock'}",
        "--log-file",
        str(run_dir / "krunkit.log"),
        "--pidfile",
        str(run_dir / "krunkit.pid"),
    ]


def boot_and_probe(
    exe: str,
    disk: str,
    *,
    run_dir: Path,
    probe_image: str | None,
    timeout: float,
    progress: Callable[[str], None],
    cpus: int = VM_DEFAULTS["cpus"],
    memory_mib: int = VM_DEFAULTS["memory_mib"],
) -> Completed:
    """Boot `disk` with krunkit, wait for the guest's Ready on vsock and then for its probe
    answer in the shared directory, and stop the VM, whatever happens (timeout, crash, Ctrl-C).

    `run_dir` keeps the VM's logs for the report. UNIX socket paths are short-lived and live
    in a fresh temp dir (macOS caps them at 104 bytes)."""
    if not os.path.isfile(disk):
        raise VMError(disk, "--vm-image is not a file")
    if memory_mib > MAX_MEMORY_MIB:
        raise VMError("--memory", f"{memory_mib} MiB is above krunkit's limit of {MAX_MEMORY_MIB} MiB")
    shared = run_dir / "shared"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("console.log", "krunkit.log", "krunkit.pid"):
            with contextlib.suppress(FileNotFoundError):
                (run_dir / stale).unlink()
        shutil.rmtree(shared, ignore_errors=True)
        shared.mkdir()
        (shared / "request.json").write_text(json.dumps({"probe_image": probe_image}))
        (shared / "probe.py").write_bytes(PROBE_SCRIPT.read_bytes())  # the guest runs cgpu's probe in the image
    except OSError as exc:
        raise VMError(str(run_dir), f"could not prepare the VM's directory: {exc.strerror or exc}") from None
    sock_dir = Path(tempfile.mkdtemp(prefix="cgpu-vm-"))
    try:
        argv = krunkit_argv(
            exe, disk, run_dir=run_dir, sock_dir=sock_dir, shared=shared, cpus=cpus, memory_mib=memory_mib
        )
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(sock_dir / "ready.sock"))
            listener.listen(1)
            # Stopped as podman stops it: asked over its REST socket, killed when it does not end in time.
            vm = Helper(argv, stop_grace=STOP_GRACE_S, ask_to_stop=lambda: _ask_to_stop(sock_dir / "rest.sock"))
            try:
                vm.start()
            except CommandError as exc:
                raise VMError(exe, f"could not start krunkit: {exc.reason}; install it: {BREW_INSTALL}") from None
            with vm:
                started = time.monotonic()
                deadline = started + timeout
                _wait_ready(vm, listener, run_dir, started=started, deadline=deadline, progress=progress)
                progress(f"VM ready after {time.monotonic() - started:.1f} s; waiting for the probe's answer")
                return _wait_result(vm, shared, run_dir, started=started, deadline=deadline, progress=progress)
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


def _wait_ready(
    vm: Helper,
    listener: socket.socket,
    run_dir: Path,
    *,
    started: float,
    deadline: float,
    progress: Callable[[str], None],
) -> None:
    """Podman's readiness protocol: the guest connects to vsock port 1025 (our UNIX socket)
    and writes `Ready`; meanwhile krunkit must not exit."""
    watch = _ReadyWatch(listener, started, progress)
    try:
        vm.wait_for(watch.poll, timeout=max(0.0, deadline - time.monotonic()), interval=0)
    except HelperExitedError as exc:
        raise VMError(
            "krunkit", _exit_message(exc.returncode, "before the VM was ready"), log_tail=vm_log_tail(run_dir, vm)
        ) from None
    except CommandTimeoutError:
        raise VMError(
            "krunkit",
            f"the VM did not report ready within {deadline - started:g} s "
            "(the guest never wrote `Ready` to vsock port "
            f"{VM_DEFAULTS['ready_vsock_port']}); it was stopped",
            log_tail=vm_log_tail(run_dir, vm),
        ) from None
    finally:
        watch.close()


class _ReadyWatch:
    """One look at a time for the guest's `Ready` (each waits at most 0.2 s), saying every
    5 s that the VM is still booting."""

    def __init__(self, listener: socket.socket, started: float, progress: Callable[[str], None]) -> None:
        self._listener = listener
        self._started = self._said = started
        self._progress = progress
        self._conn: socket.socket | None = None
        self._buffer = b""

    def poll(self) -> bool | None:
        now = time.monotonic()
        if now - self._said >= 5:
            self._progress(f"booting the VM ({now - self._started:.0f} s)")
            self._said = now
        waiting = self._conn or self._listener
        if not select.select([waiting], [], [], 0.2)[0]:
            return None
        if self._conn is None:
            self._conn, _ = self._listener.accept()
            return None
        chunk = self._conn.recv(256)
        self._buffer += chunk
        if b"Ready" in self._buffer:
            return True
        if not chunk:  # the guest hung up without saying Ready; wait for another try
            self.close()
        return None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self._buffer = b""


def _wait_result(
    vm: Helper,
    shared: Path,
    run_dir: Path,
    *,
    started: float,
    deadline: float,
    progress: Callable[[str], None],
) -> Completed:
    """The guest writes probe.out/probe.err, then probe.rc last (atomically, by rename)."""
    said = time.monotonic()

    def poll() -> Completed | None:
        nonlocal said
        now = time.monotonic()
        if now - said >= 5:
            progress(f"waiting for the probe in the VM ({now - started:.0f} s)")
            said = now
        return _read_result(shared)

    try:
        return vm.wait_for(poll, timeout=max(0.0, deadline - time.monotonic()), interval=0.1)
    except HelperExitedError as exc:
        raise VMError(
            "krunkit",
            _exit_message(exc.returncode, "before the guest wrote the probe's answer"),
            log_tail=vm_log_tail(run_dir, vm),
        ) from None
    except CommandTimeoutError:
        raise VMError(
            "krunkit",
            f"the guest booted but wrote no probe answer to {shared} within {deadline - started:g} s; it was stopped",
            log_tail=vm_log_tail(run_dir, vm),
        ) from None


def _read_result(shared: Path) -> Completed | None:
    try:
        rc_text = (shared / "probe.rc").read_text(errors="replace").strip()
    except FileNotFoundError:
        return None
    try:
        returncode = int(rc_text)
    except ValueError:
        raise VMError(str(shared / "probe.rc"), f"not an exit status: {rc_text[:50]!r}") from None

    def read(name: str) -> bytes:  # written by the guest: bounded, and never a FIFO
        try:
            with open_regular(str(shared / name)) as handle:
                return handle.read(MAX_GUEST_OUTPUT)
        except FileNotFoundError:
            return b""

    return Completed(GUEST_PROBE, returncode, read("probe.out"), read("probe.err"))


def _ask_to_stop(rest_sock: Path) -> None:
    """Ask krunkit to stop the VM over its REST socket, as podman does."""
    body = b'{"state": "Stop"}'
    request = (
        b"POST /vm/state HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
    )
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(2)
        conn.connect(str(rest_sock))
        conn.sendall(request)
        conn.recv(512)


def _exit_message(code: int, when: str) -> str:
    if code == 2:
        return (
            f"krunkit exited with code 2 {when}: it rejected its command line, so it is older than "
            f"these flags need; upgrade it: brew upgrade krunkit"
        )
    if code < 0:
        return f"krunkit was killed by signal {-code} {when}"
    return f"krunkit exited with code {code} {when}"


def vm_log_tail(run_dir: Path, vm: Helper, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of krunkit's own output, its log file and the guest console."""
    said = _tail(decode(vm.output()), lines)
    parts = [f"krunkit: {said}"] if said else []
    for name in ("krunkit.log", "console.log"):
        try:
            with open_regular(str(run_dir / name)) as handle:
                handle.seek(max(0, os.fstat(handle.fileno()).st_size - MAX_GUEST_OUTPUT))  # the tail is shown
                text = _tail(decode(handle.read()), lines)
        except OSError:
            continue
        if text:
            parts.append(f"{name}: {text}")
    return " | ".join(parts)


def _tail(text: str, lines: int) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())
