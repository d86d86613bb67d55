"""The wsl backend's entry: one wsl.exe call that runs probe.sh (with the local probe on stdin) in the
session, and what is said when it could not run."""

from __future__ import annotations

import os
import re
import shutil
import sys

from cgpu.apis import CONTAINER_APIS
from cgpu.backends.wsl.judging import judge
from cgpu.backends.wsl.output import FORMAT, ProbeOutputError, excerpt, explain_failure, parse_output
from cgpu.report import ReportBuilder
from cgpu.run import CommandError, CommandNotFoundError, CommandTimeoutError, run

DEFAULT_TIMEOUT = 90.0  # the first call boots the WSL VM, which can take tens of seconds
# WSL's own rule for distro names; anything else would be read as an option or a path.
DISTRO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_LOCAL_PROBE = 120_000  # it travels as one argument of python3 -c; Linux allows 128 KiB


def probe(report: ReportBuilder, *, distro: str | None = None, timeout: float | None = None) -> None:
    distro = distro or os.environ.get("CGPU_WSL_DISTRO") or None
    if distro is not None and not DISTRO_NAME.fullmatch(distro):
        report.usage_error("distro", f"{distro!r} is not a WSL distro name (letters, digits, '.', '_', '-')")
        return
    exe = _find_wsl_exe(report)
    script = _probe_script(report)
    if exe is None or script is None:
        return
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    local_probe = _local_probe_source(report)
    # Inside the session: two python runs and nvidia-smi, well within the whole call's limit.
    py_timeout = max(1, int(timeout / 4)) if local_probe is not None else 0
    smi_timeout = max(1, int(timeout / 8))
    argv = [
        exe,
        *(["-d", distro] if distro else []),
        "-e",
        "sh",
        "-c",
        script,
        "cgpu-wsl-probe",
        str(smi_timeout),
        str(py_timeout),
    ]
    where = f"distro {distro}" if distro else "the default distro"
    report.progress(f"probing WSL {where} (the first call starts WSL and can take a while)")
    try:
        done = run(argv, timeout=timeout, input=local_probe or b"", env={**os.environ, "WSL_UTF8": "1"})
    except CommandNotFoundError as exc:  # the argv holds the whole probe script: name the executable only
        _could_not_run(report, exe, f"could not run {exe}: {exc.reason}; {_INSTALL_WSL}")
        return
    except CommandTimeoutError:
        _could_not_run(
            report,
            exe,
            f"wsl.exe gave no answer for {where} within {timeout:g} s and was "
            "stopped; check `wsl.exe -l -v` and try a longer --timeout",
        )
        return
    except CommandError as exc:
        _could_not_run(report, exe, f"could not run {exe}: {exc.reason}")
        return
    source = f"wsl.exe ({where})"
    start = done.stdout.find(FORMAT + b"\n")
    if start < 0:
        _could_not_run(report, source, explain_failure(done.returncode, done.stdout, done.stderr, distro))
        return
    try:
        session = parse_output(done.stdout[start:])
    except ProbeOutputError as exc:
        _could_not_run(report, source, f"the probe's output was not understood: {exc}")
        return
    if done.stdout[:start].strip():
        report.problem("info", source, f"text before the probe's output: {excerpt(done.stdout[:start])}", "probe")
    judge(report, session, distro or session.text("wsl_distro_name") or "default", local_probe is not None)


def _could_not_run(report: ReportBuilder, source: str, message: str) -> None:
    report.failed(source, message)
    for api in CONTAINER_APIS:
        report.unknown(api, "unknown: cgpu could not probe the WSL session (see problems)")


_INSTALL_WSL = "install WSL 2 (`wsl.exe --install` as administrator, then restart), or point CGPU_WSL_EXE at wsl.exe"


def _find_wsl_exe(report: ReportBuilder) -> str | None:
    configured = os.environ.get("CGPU_WSL_EXE")
    if configured:
        if not os.path.isfile(configured):
            _could_not_run(report, "CGPU_WSL_EXE", f"{configured} does not exist; {_INSTALL_WSL}")
            return None
        return configured
    found = shutil.which("wsl.exe")
    if found is None and sys.platform != "win32":
        _could_not_run(
            report,
            "wsl.exe",
            "wsl.exe is not on PATH: the wsl backend asks a WSL session on Windows "
            "(run cgpu there, or point CGPU_WSL_EXE at a wsl.exe)",
        )
    elif found is None:
        _could_not_run(report, "wsl.exe", f"wsl.exe is not on PATH; {_INSTALL_WSL}")
    return found


def _probe_script(report: ReportBuilder) -> str | None:
    from importlib.resources import files

    try:  # text mode turns a Windows checkout's CRLF into the LF sh needs
        return files(__package__ or "cgpu.backends.wsl").joinpath("probe.sh").read_text(encoding="utf-8")
    except OSError:
        _could_not_run(
            report,
            "cgpu",
            "the in-session probe cgpu/backends/wsl/probe.sh is missing from this installation; reinstall cgpu",
        )
        return None


def _local_probe_source(report: ReportBuilder) -> bytes | None:
    """The local backend's probe (probe.py), to enumerate adapters with the session's python3."""
    from cgpu.gpu_probe import PROBE_SCRIPT

    try:
        source = PROBE_SCRIPT.read_bytes()
    except OSError:
        return None
    if len(source) > MAX_LOCAL_PROBE:
        report.problem(
            "warning",
            str(PROBE_SCRIPT),
            f"{len(source)} bytes is too big to pass to the session's python3 "
            f"(limit {MAX_LOCAL_PROBE}); adapters are not enumerated",
            "probe",
        )
        return None
    return source
