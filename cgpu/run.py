"""Running external commands: always with a timeout, never through a shell, never leaving
anything behind. Output stays bytes; each caller decodes what its tool writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Mapping, Sequence


class CommandError(Exception):
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
    argv: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> Completed:
    """Run argv to completion or kill its whole process group at `timeout` seconds."""
    argv = [os.fspath(a) for a in argv]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            **_new_group(),
        )
    except FileNotFoundError as exc:
        raise CommandNotFoundError(argv, "not found") from exc
    except PermissionError as exc:
        raise CommandNotFoundError(argv, "not executable (permission denied)") from exc
    except OSError as exc:
        raise CommandError(argv, f"could not start: {exc.strerror or exc}") from exc
    try:
        stdout, stderr = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        stdout, stderr = proc.communicate()
        raise CommandTimeoutError(argv, timeout, stdout or b"", stderr or b"") from None
    except BaseException:  # Ctrl-C included: nothing may outlive us
        kill_group(proc)
        proc.wait()
        raise
    return Completed(argv, proc.returncode, stdout, stderr)


def _new_group() -> dict:
    if sys.platform == "win32":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a process started by this module and everything it started."""
    if proc.poll() is not None and sys.platform == "win32":
        return
    try:
        if sys.platform == "win32":
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def format_argv(argv: Sequence[str]) -> str:
    import shlex

    return " ".join(shlex.quote(str(a)) for a in argv)


def decode(data: bytes) -> str:
    """Text from a tool's output: UTF-8, undecodable bytes shown as escapes, never an error."""
    return data.decode("utf-8", errors="backslashreplace")
