"""Running external commands: always with a timeout, never through a shell, never leaving
anything behind. Output stays bytes; each caller decodes what its tool writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from cgpu.errors import CgpuError

T = TypeVar("T")


class CommandError(CgpuError):
    """A command could not be run or did not finish; str() names the command."""

    def __init__(self, argv: Sequence[str], message: str) -> None:
        super().__init__(f"{format_argv(argv)}: {message}")
        self.argv = list(argv)
        self.reason = message  # without the command line, for callers whose argv is long


class CommandNotFoundError(CommandError):
    pass


class CommandTimeoutError(CommandError):
    def __init__(self, argv: Sequence[str], timeout: float, stdout: bytes, stderr: bytes) -> None:
        super().__init__(argv, f"no answer within {timeout:g} s; it was stopped")
        self.timeout = timeout
        self.stdout = stdout
        self.stderr = stderr


@dataclass(frozen=True)
class Completed:
    """A finished command: its exit status and output. The one shape for every "it ran and
    said this": a host command, the probe in a container, the probe in a VM."""

    argv: list[str]  # what ran, as far as cgpu knows it
    returncode: int
    stdout: bytes
    stderr: bytes


# What a command may print before the rest is read and dropped: far above any answer cgpu reads,
# low enough that a broken tool printing without end costs bounded memory.
MAX_OUTPUT = 16 * 1024 * 1024


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    tee: Callable[[bytes], None] | None = None,
) -> Completed:
    """Run argv to completion or kill its whole process group at `timeout` seconds.

    Each output stream keeps its first MAX_OUTPUT bytes (the rest is read and dropped, so the
    command never blocks on a full pipe). A process that keeps the pipes open after the command
    exited (a daemon it left behind) counts against the same timeout. `tee`, when given, is
    handed each chunk of stdout and stderr as it arrives (a live view of a long build), from the
    reading threads; what is kept is the same.
    """
    argv = [os.fspath(a) for a in argv]
    proc = _spawn(
        argv,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
        cwd=cwd,
    )
    deadline = time.monotonic() + timeout
    stdout, stderr = _Capped(proc.stdout, tee), _Capped(proc.stderr, tee)
    workers = [stdout.start(), stderr.start()]
    if input is not None:
        workers.append(_start(_feed, proc.stdin, input))
    try:
        finished = _wait(proc, workers, deadline)
    except BaseException:  # Ctrl-C included: nothing may outlive us
        kill_group(proc)
        raise
    if not finished:
        kill_group(proc)
        grace = time.monotonic() + 1  # a process outside the group may still hold a pipe
        for worker in workers:
            worker.join(max(0.0, grace - time.monotonic()))
        raise CommandTimeoutError(argv, timeout, stdout.data(), stderr.data()) from None
    return Completed(argv, proc.returncode, stdout.data(), stderr.data())


def _spawn(argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
    """Start argv in a process group of its own, its stdout a pipe; CommandError when it cannot."""
    try:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, **options, **_new_group())
    except FileNotFoundError as exc:
        raise CommandNotFoundError(argv, "not found") from exc
    except PermissionError as exc:
        raise CommandNotFoundError(argv, "not executable (permission denied)") from exc
    except OSError as exc:
        raise CommandError(argv, f"could not start: {exc.strerror or exc}") from exc


def _wait(proc: subprocess.Popen[bytes], workers: list[threading.Thread], deadline: float) -> bool:
    """Whether the command exited and its pipes closed before the deadline."""
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            return False
    return True


class _Capped:
    """Reads one pipe to its end in a thread, keeping the first MAX_OUTPUT bytes."""

    def __init__(self, pipe: IO[bytes] | None, tee: Callable[[bytes], None] | None = None) -> None:
        self._pipe = pipe
        self._tee = tee
        self._chunks: list[bytes] = []
        self._kept = 0

    def start(self) -> threading.Thread:
        return _start(self._read)

    def _read(self) -> None:
        assert self._pipe is not None
        with self._pipe:
            while chunk := self._pipe.read1(65536):  # type: ignore[attr-defined]  # a BufferedReader
                if self._tee is not None:
                    self._tee(chunk)
                if self._kept < MAX_OUTPUT:
                    chunk = chunk[: MAX_OUTPUT - self._kept]
                    self._chunks.append(chunk)
                    self._kept += len(chunk)

    def data(self) -> bytes:
        return b"".join(self._chunks)


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        with pipe:
            pipe.write(data)
    except (BrokenPipeError, OSError):  # the command stopped reading: its exit status says why
        pass


def _start(target: Callable[..., None], *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _new_group() -> dict[str, Any]:
    if sys.platform == "win32":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill a process started in a group of its own and everything in that group, then collect
    it; one stuck in the kernel (state D) is not waited on for ever."""
    try:
        if sys.platform == "win32":
            if proc.poll() is None:
                proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)  # also when the leader is gone: what it left runs on
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


# What a helper's output keeps for messages: the end is what explains a failure.
HELPER_OUTPUT_TAIL = 64 * 1024


class HelperExitedError(CommandError):
    def __init__(self, argv: Sequence[str], returncode: int) -> None:
        super().__init__(argv, f"exited with status {returncode}")
        self.returncode = returncode


class Helper:
    """A long-lived helper process (podman's API service, a krunkit VM) that cgpu starts, waits
    on and stops, never leaving it running.

    It runs in a process group (session) of its own, so Ctrl-C reaches cgpu alone, which then
    stops it; its stdout and stderr are read into a buffer that keeps the last
    HELPER_OUTPUT_TAIL bytes. `stop` asks it to end (SIGTERM to its group, or `ask_to_stop`),
    gives it `stop_grace` seconds, then kills its group. As a context manager it is started on
    entry and stopped on every way out: asked and given its grace when the block ended normally,
    killed at once on an error, Ctrl-C included."""

    def __init__(
        self, argv: Sequence[str], *, stop_grace: float, ask_to_stop: Callable[[], None] | None = None
    ) -> None:
        self.argv = [os.fspath(a) for a in argv]
        self._stop_grace = stop_grace
        self._ask_to_stop = ask_to_stop
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopped = False
        self._reader: threading.Thread | None = None
        self._output = bytearray()
        self._lock = threading.Lock()

    def __enter__(self) -> Helper:
        if self._proc is None:  # a caller may start it first, to tell start-up errors apart
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.stop(graceful=exc_type is None)

    def start(self) -> None:
        self._proc = _spawn(self.argv, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self._reader = _start(self._read, self._proc.stdout)

    def _read(self, pipe: IO[bytes]) -> None:
        with pipe:
            while chunk := pipe.read1(65536):  # type: ignore[attr-defined]  # a BufferedReader
                with self._lock:
                    self._output += chunk
                    del self._output[:-HELPER_OUTPUT_TAIL]

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """Its exit status once it has ended, else None."""
        assert self._proc is not None, "not started"
        return self._proc.poll()

    def wait_for(self, ready: Callable[[], T | None], *, timeout: float, interval: float = 0.05) -> T:
        """Call `ready` every `interval` seconds until it returns something other than None,
        and return that. Raises HelperExitedError when the helper ends first (after one last
        look: it may have answered just before it ended), CommandTimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            answer = ready()
            if answer is not None:
                return answer
            code = self.returncode
            if code is not None:
                answer = ready()
                if answer is not None:
                    return answer
                self._drain()  # its last words explain why it ended
                raise HelperExitedError(self.argv, code)
            if time.monotonic() >= deadline:
                raise CommandTimeoutError(self.argv, timeout, self.output(), b"")
            time.sleep(interval)

    def output(self) -> bytes:
        """The last HELPER_OUTPUT_TAIL bytes it printed so far (stdout and stderr together)."""
        with self._lock:
            return bytes(self._output)

    def stop(self, *, graceful: bool = True) -> None:
        """End it and whatever it left in its group; graceful: asked first and given its grace.
        Safe to call again, and when it has already ended."""
        proc = self._proc
        if proc is None or self._stopped:
            return
        self._stopped = True
        try:
            if graceful and proc.poll() is None:
                if self._ask_to_stop is not None:
                    self._ask_to_stop()
                else:
                    _terminate_group(proc)
                try:
                    proc.wait(self._stop_grace)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            kill_group(proc)
            self._drain()

    def _drain(self) -> None:
        """Let the reader take what is left in the pipe (bounded: a process that escaped the
        group may hold it open)."""
        if self._reader is not None:
            self._reader.join(1)


def _terminate_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        if sys.platform == "win32":
            proc.terminate()
        else:
            os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


def format_argv(argv: Sequence[str]) -> str:
    import shlex

    return " ".join(shlex.quote(str(a)) for a in argv)


def decode(data: bytes) -> str:
    """Text from a tool's output: UTF-8, undecodable bytes shown as escapes, never an error."""
    return data.decode("utf-8", errors="backslashreplace")
