"""The command line: parses arguments, runs a backend, prints, and chooses the exit status.

Exit status (one place, documented in the README):
  0  the backend ran (an empty `containers` is a valid answer)
  1  the backend could not run (missing tool, timeout, engine refused); the report says why
  2  bad usage
  3  internal error in cgpu (a bug: the report says so)
  4  `image check`: the image would not get vulkan under krunkit
  5  `image check`: cannot tell from the image alone
  130 interrupted (Ctrl-C)
  143 terminated (SIGTERM: `timeout`, systemd, a container runtime, an agent's own limit)
Either way everything cgpu started has been stopped first.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence
from enum import IntEnum
from typing import Any

from cgpu import __version__
from cgpu.backends import BACKENDS, MAX_TIMEOUT, OPTIONS, default_backend, run_backend
from cgpu.report import ReportBuilder


class ExitCode(IntEnum):
    OK = 0
    COULD_NOT_RUN = 1
    USAGE = 2
    INTERNAL = 3
    IMAGE_NO = 4
    IMAGE_UNKNOWN = 5
    INTERRUPTED = 130
    TERMINATED = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where cgpu is, so it unwinds like Ctrl-C: every `finally` and
    `except BaseException` that stops a child, a container or a service runs. Without it
    Python dies at once and leaves them running (each child runs in its own session)."""


def _on_sigterm(_signum: int, _frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup short
    raise Terminated()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cgpu", description="Which GPU APIs does a container started here actually get?"
    )
    parser.add_argument("--version", action="version", version=f"cgpu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    probe = sub.add_parser("probe", help="report the GPU APIs containers get on this node")
    probe.add_argument("--backend", choices=BACKENDS, help="default: cdi on Linux, wsl on Windows, krunkit on macOS")
    probe.add_argument("--json", action="store_true", help="print the report as one JSON object")
    probe.add_argument("--timeout", type=_seconds, metavar="SECONDS", help="limit for each command cgpu runs")
    probe.add_argument(
        "--probe-image",
        metavar="REF",
        help="a local image that runs cgpu's probe (cdi --verify, krunkit); never pulled",
    )
    cdi = probe.add_argument_group("cdi backend (Linux)")
    cdi.add_argument(
        "--spec-dir",
        dest="spec_dirs",
        action="append",
        metavar="DIR",
        help="CDI spec directory, repeatable, lowest priority first (default: /etc/cdi, then /var/run/cdi)",
    )
    cdi.add_argument("--root", metavar="DIR", help="host filesystem the specs are checked against (default: /)")
    cdi.add_argument(
        "--engine",
        metavar="ENGINE@VERSION|auto|none",
        help="judge specs as podman@X or docker@X would; auto asks the host's engine; none: newest rules",
    )
    cdi.add_argument(
        "--device",
        dest="devices",
        action="append",
        metavar="NAME",
        help="only these qualified device names (vendor/class=name), repeatable",
    )
    cdi.add_argument("--verify", action="store_true", help="also run the probe in a real container per device")
    wsl = probe.add_argument_group("wsl backend (Windows)")
    wsl.add_argument("--distro", metavar="NAME", help="the WSL distro of the agent's containers session")
    krunkit = probe.add_argument_group("krunkit backend (macOS)")
    krunkit.add_argument("--machine", metavar="NAME", help="the podman machine (libkrun provider) to use")
    krunkit.add_argument("--vm-image", metavar="PATH", help="boot this disk image with krunkit instead")
    krunkit.add_argument("--refresh", action="store_true", help="ignore the cached answer")

    image = sub.add_parser("image", help="image tools")
    image_sub = image.add_subparsers(dest="image_command", required=True, metavar="COMMAND")
    check = image_sub.add_parser("check", help="would this image get vulkan under krunkit (Mesa/Venus)?")
    check.add_argument("ref", help="podman/docker image, oci-archive:PATH, docker-archive:PATH or dir:PATH")
    check.add_argument("--json", action="store_true")
    check.add_argument("--machine", metavar="NAME", help="also run the probe in this krunkit VM")
    check.add_argument("--timeout", type=_seconds, metavar="SECONDS")

    schema = sub.add_parser("schema", help="print the JSON Schema of the probe report or the image check")
    schema.add_argument("what", nargs="?", choices=("report", "image-check"), default="report")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # called in another thread: only the main one takes signals
        previous = False
    try:
        if args.command == "schema":
            from cgpu.model import image_check_schema, report_schema

            _emit(json.dumps(report_schema() if args.what == "report" else image_check_schema(), indent=2))
            return ExitCode.OK
        if args.command == "image":
            return _image_check(args)
        return _probe(parser, args)
    except Terminated:
        print("cgpu: terminated", file=sys.stderr)
        return ExitCode.TERMINATED
    except KeyboardInterrupt:
        print("cgpu: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    finally:
        if previous is not False:
            signal.signal(signal.SIGTERM, previous)


def _probe(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    backend = args.backend or default_backend()
    given = {
        key: value
        for key, value in vars(args).items()
        if key not in ("command", "backend", "json") and value not in (None, False)
    }
    misplaced = set(given) - OPTIONS[backend]
    if misplaced:
        flags = ", ".join("--" + key.removesuffix("s").replace("_", "-") for key in sorted(misplaced))
        parser.error(f"{flags} do(es) not apply to --backend {backend}")
    progress = None if args.json else _progress
    try:
        builder = run_backend(backend, given, progress=progress)
        if builder.bad_usage:
            code = ExitCode.USAGE
        elif builder.could_not_run:
            code = ExitCode.COULD_NOT_RUN
        else:
            code = ExitCode.OK
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a bug in cgpu: still one report, never a traceback
        builder = ReportBuilder(backend)
        builder.failed("cgpu", f"internal error, please report it: {type(exc).__name__}: {exc}")
        code = ExitCode.INTERNAL
    if code == ExitCode.USAGE:  # nothing was checked: no report that could pass for an answer
        for problem in builder.problems:
            if problem["severity"] == "error":
                print(f"cgpu probe: error: {problem['message']}", file=sys.stderr)
        return code
    report = builder.build()
    if args.json:
        _emit(json.dumps(report, indent=2))
    else:
        from cgpu.render import render_report

        _emit(render_report(report))
    return code


def _image_check(args: argparse.Namespace) -> int:
    from cgpu.image.check import check_image, render_image_check

    try:
        result = check_image(
            args.ref, machine=args.machine, timeout=args.timeout, progress=None if args.json else _progress
        )
        code = image_exit_code(result)
        text = json.dumps(result, indent=2) if args.json else render_image_check(result)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a bug in cgpu: say so, never a traceback
        print(f"cgpu image check: internal error, please report it: {type(exc).__name__}: {exc}", file=sys.stderr)
        return ExitCode.INTERNAL
    _emit(text)
    return code


_IMAGE_EXIT = {"yes": ExitCode.OK, "no": ExitCode.IMAGE_NO, "unknown": ExitCode.IMAGE_UNKNOWN}
_IMAGE_FAILED = {
    "unreadable": ExitCode.COULD_NOT_RUN,
    "probe_failed": ExitCode.COULD_NOT_RUN,
    "internal_error": ExitCode.INTERNAL,
}


def image_exit_code(result: dict[str, Any]) -> ExitCode:
    """The exit status of `image check` for its answer: the verdict once the image was checked."""
    if result["status"] == "checked":
        return _IMAGE_EXIT[result["verdict"]]
    return _IMAGE_FAILED[result["status"]]


def _emit(text: str) -> None:
    """Print the answer; a reader that went away (`cgpu probe | head`) changes no exit status."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's last flush stays quiet too


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= MAX_TIMEOUT:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of seconds, at most {MAX_TIMEOUT:g}")
    return value


def _progress(message: str) -> None:
    print(f"cgpu: {message}", file=sys.stderr, flush=True)
