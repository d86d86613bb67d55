"""The command line: parses arguments, runs a backend, prints, and chooses the exit status.

Exit status (one place, documented in the README and in each command's --help):
  0  the backend ran (an empty `containers` is a valid answer); `image check`: yes
  1  the backend could not run (missing tool, timeout, engine refused); the report says why
  2  bad usage, whatever the option (a malformed --device, --engine, --distro or image reference)
  3  internal error in cgpu (a bug: the report says so)
  4  `image check`: the image would not get vulkan under krunkit
  5  `image check`: cannot tell from the image alone
  130 interrupted (Ctrl-C)
  143 terminated (SIGTERM: `timeout`, systemd, a container runtime, an agent's own limit)
Either way everything cgpu started has been stopped first.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from enum import IntEnum

from cgpu.apis import API_ORDER
from cgpu.backends import BACKENDS, default_backend, run_backend
from cgpu.options import DEFAULT_ROOT, GROUPS, OPTIONS, Option, find, flag_of, in_range, range_text, taken_by
from cgpu.report import ReportBuilder, to_json
from cgpu.version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]

OUTPUT_FORMATS = ("json", "yaml", "name", "wide")


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


_STOPPED_EXIT = """  3    internal error in cgpu (a bug; please report it)
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM); either way everything
       cgpu started is stopped first"""

_PROBE_EXIT = f"""exit status:
  0    the backend ran (an empty answer is an answer; --brief, --explain and
       --list-devices repeat the report's errors and warnings on stderr)
  1    cgpu could not run (missing tool, timeout, engine refused): the report
       says why
  2    bad usage: an unknown option, one of another backend, a malformed
       --device, --engine or --distro, a --root that is not a directory
{_STOPPED_EXIT}"""

_IMAGE_EXIT_TEXT = f"""exit status:
  0    yes: the image would get vulkan under krunkit
  1    the image could not be read, or the probe --machine asks for did not run
  2    bad usage: an unknown option, a REF that is no image reference
{_STOPPED_EXIT}
  4    no: the image would not get vulkan (the checks say why and the fix)
  5    unknown: cannot tell from the image alone"""

_ENVIRONMENT = """environment:
  CGPU_CACHE_DIR     where cgpu caches parsed specs, the host engine and krunkit
                     answers (default: the user's cache dir, cgpu/ in it)
  CGPU_VERIFY_LABEL  the cgpu.verify label of --verify's containers (default 1)
  CGPU_WSL_DISTRO    the WSL distro when --distro is not given
  CGPU_WSL_EXE       the wsl.exe to run (default: wsl.exe on PATH)
  CGPU_KRUNKIT_EXE   the krunkit to run (default: PATH, podman's helper dirs)
  NO_COLOR, COLUMNS  no automatic colour; the width to wrap to (40 to 1000)"""

_PROBE_EPILOG = f"""--timeout defaults (each command cgpu runs gets its own limit):
  cdi      nothing runs without --verify; --engine auto: 10 s;
           --verify: 60 s per container, 30 s per engine API call
  wsl      90 s (the first call boots the WSL VM)
  krunkit  180 s in a podman machine, 300 s with --vm-image (boot and probe)
  local    30 s per API

examples:
  cgpu probe                   the answer for this node
  cgpu probe --brief        one line, e.g. cuda,vulkan,opencl (unknown: cuda?)
  cgpu probe --list-devices    every CDI device name, its status and spec file
  cgpu probe --explain cuda --device nvidia.com/gpu=0
  cgpu probe --json --spec-dir /etc/cdi --root /host
  cgpu probe -q                names only, one per line (as -o name)
  cgpu probe -o yaml -s /etc/cdi -e podman@4.3.1

{_ENVIRONMENT}

{_PROBE_EXIT}"""

_IMAGE_EPILOG = f"""examples:
  cgpu image check quay.io/slopezpa/fedora-vgpu-llama
  cgpu image check oci-archive:probe.tar --json
  cgpu image check localhost/my-app --machine podman-machine-default

--timeout default: 300 s for the whole check (exporting the image included).

environment:
  DOCKER_HOST        the Docker daemon an image is exported from
  CGPU_KRUNKIT_EXE   the krunkit --machine's probe runs (as for probe)
  NO_COLOR, COLUMNS  no automatic colour; the width to wrap to (40 to 1000)

{_IMAGE_EXIT_TEXT}"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's, wrapping to `cgpu.terminal.width()` as the rest of cgpu's text does: argparse
    makes a formatter for every `add_argument` (to check its metavar), and its own asks
    `shutil.get_terminal_size`, whose import (bz2, lzma, zlib and fnmatch with it) cost 7.5M
    instructions, over 4% of a whole probe."""

    def __init__(
        self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None
    ) -> None:
        from cgpu.terminal import width as columns

        super().__init__(prog, indent_increment, max_help_position, columns() - 2 if width is None else width)


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """cgpu's argument parser. With `command`, only that subcommand gets its options: building
    each one's costs argparse groups and gettext look-ups at every start. None builds them all
    (the top-level help, completion, the man page)."""
    parser = argparse.ArgumentParser(
        prog="cgpu",
        description="Which GPU APIs does a container started here actually get?",
        epilog=(
            "examples:\n  cgpu probe\n  cgpu watch --answer-file /run/cgpu/answer.json\n  cgpu image check REF\n"
            "  cgpu schema\n  source <(cgpu completion bash)\n  cgpu man > cgpu.1\n\n"
            "exit status: each command's --help lists its own (0 success, 2 bad usage,\n"
            "3 internal error, 130 interrupted, 143 terminated)"
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"cgpu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for name, add in _COMMANDS.items():
        if command is None or name == command:
            add(sub)
    return parser


def _add_probe(sub: Subcommands) -> None:
    """`cgpu probe`."""
    probe = sub.add_parser(
        "probe",
        help="report the GPU APIs containers get on this node",
        description="Report the GPU APIs a container started on this node gets, and why.",
        epilog=_PROBE_EPILOG,
        formatter_class=HelpFormatter,
    )
    views = probe.add_argument_group("output (one of; --list-devices also takes --json, -o and -q)")
    output = views.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="the report as one JSON object (for machines): -o json")
    output.add_argument(
        "-o",
        "--output",
        choices=OUTPUT_FORMATS,
        metavar="FORMAT",
        help="json: the report (as --json); yaml: the same as YAML; name: one device name per line; "
        "wide: the device list, names never cut",
    )
    output.add_argument("-q", "--quiet", action="store_true", help="device names only, one per line (-o name)")
    output.add_argument("--brief", action="store_true", help="one line: the APIs containers get, unknown ones with ?")
    output.add_argument(
        "--explain", choices=API_ORDER, metavar="API", help="the checklist behind one API's answer, per device"
    )
    views.add_argument(
        "--list-devices", action="store_true", help="every device name with its status, APIs and spec file"
    )
    probe.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the human output: auto (default) on a terminal unless NO_COLOR is set",
    )
    probe.add_argument(
        "--image",
        metavar="REF",
        help="answer for containers of this image (podman/Docker storage, oci:, oci-archive:, docker-archive:, dir:): "
        "an API the node gives but the image lacks a part of is absent; read, never run or pulled",
    )
    _add_probe_options(probe)
    probe.set_defaults(subparser=probe)  # its own usage line on a usage error


def _add_watch(sub: Subcommands) -> None:
    """`cgpu watch`."""
    watch = sub.add_parser(
        "watch",
        help="keep an answer file and/or an NFD feature file current",
        description="Probe, write the answer, then probe again whenever a spec dir or the NVIDIA\n"
        "driver version changes, and every --interval seconds. Runs until SIGTERM or\nCtrl-C.",
        epilog="example:\n  cgpu watch --nfd-file /etc/kubernetes/node-feature-discovery/features.d/cgpu \\\n"
        "      --answer-file /run/cgpu/answer.json\n\n"
        "signals:\n  SIGHUP probes again at once; SIGTERM and SIGINT end it at once, no\n"
        "  temporary file left\n\n"
        "exit status:\n  2    bad usage\n  1    the backend cannot probe at all (a file that cannot be\n"
        "       written is logged and tried again, never an exit); with --check-age:\n"
        "       a file is missing or old\n"
        "  130  interrupted (Ctrl-C); 143 terminated (SIGTERM): the last complete files\n"
        "       stay\n\n" + _ENVIRONMENT,
        formatter_class=HelpFormatter,
    )
    watch.add_argument("--answer-file", metavar="PATH", help="keep the JSON report here (replaced atomically)")
    watch.add_argument("--nfd-file", metavar="PATH", help="keep a Node Feature Discovery feature file here")
    watch.add_argument(
        "--metrics-file",
        metavar="PATH",
        help="keep a node_exporter textfile (Prometheus text format) here, e.g. .../textfile/cgpu.prom",
    )
    watch.add_argument(
        "--interval", type=_seconds, default=300.0, metavar="SECONDS", help="probe at least this often (default: 300)"
    )
    watch.add_argument(
        "--expiry",
        type=_seconds,
        metavar="SECONDS",
        help="NFD drops the labels this long after the last write (default: 3 intervals)",
    )
    watch.add_argument(
        "--check-age",
        type=_seconds,
        metavar="SECONDS",
        help="do not watch: exit 0 when every file given was written within SECONDS, else 1 (a liveness probe)",
    )
    _add_probe_options(watch)
    watch.set_defaults(subparser=watch)


def _add_image(sub: Subcommands) -> None:
    """`cgpu image check`."""
    image = sub.add_parser("image", help="image tools", description="Image tools.")
    image_sub = image.add_subparsers(dest="image_command", required=True, metavar="COMMAND")
    check = image_sub.add_parser(
        "check",
        help="would this image get vulkan under krunkit (Mesa/Venus)?",
        description="Would this image get vulkan in a krunkit VM (Mesa's Venus driver)? Reads the\n"
        "image without running it; with --machine also runs cgpu's probe in it inside\nthat VM.",
        epilog=_IMAGE_EPILOG,
        formatter_class=HelpFormatter,
    )
    check.add_argument(
        "ref",
        help="NAME[:TAG] (a local podman image, else a local Docker one; never pulled), "
        "containers-storage:NAME (podman only), docker-daemon:NAME (Docker only), oci-archive:PATH, "
        "docker-archive:PATH (`docker save`, `podman save`), oci:PATH (an OCI layout) or dir:PATH (a root "
        "filesystem, e.g. `podman image mount`'s output)",
    )
    check.add_argument("--json", action="store_true", help="the answer as one JSON object (for machines)")
    check.add_argument("--machine", metavar="NAME", help="also run the probe in this krunkit VM")
    check.add_argument(
        "--backend",
        choices=BACKENDS,
        help="instead: per API, what containers of this image get on this node as that backend sees it "
        "(the image part of `probe --image REF`)",
    )
    check.add_argument("--timeout", type=_seconds, metavar="SECONDS", help="limit for the whole check (default: 300)")
    check.add_argument("--color", choices=("auto", "always", "never"), default="auto", help="as for probe")


def _add_krunkit(sub: Subcommands) -> None:
    """`cgpu krunkit write-assets` and `build-image`."""
    krunkit_cmd = sub.add_parser(
        "krunkit",
        help="krunkit tools",
        description="Tools for the krunkit backend (macOS).",
    )
    krunkit_sub = krunkit_cmd.add_subparsers(dest="krunkit_command", required=True, metavar="COMMAND")
    assets = krunkit_sub.add_parser(
        "write-assets",
        help="write the Venus probe image's build context (Containerfile, guest files)",
        description="Write the build context of the Venus probe image the krunkit backend runs: the\n"
        "Containerfile and the guest files of a probe VM. Nothing is overwritten.",
        epilog="example:\n  cgpu krunkit write-assets cgpu-venus-probe\n"
        "  podman --connection podman-machine-default build \\\n"
        "      -t localhost/cgpu-venus-probe:latest cgpu-venus-probe",
        formatter_class=HelpFormatter,
    )
    assets.add_argument("dir", metavar="DIR", help="a new or empty folder")
    build = krunkit_sub.add_parser(
        "build-image",
        help="build the Venus probe image in a podman machine, showing the build as it runs",
        description="Build the Venus probe image (localhost/cgpu-venus-probe:latest) from the build\n"
        "context `write-assets` writes, with `podman build`: its output is shown live on\n"
        "stderr, and its last lines again if it fails.",
        epilog="example:\n  cgpu krunkit build-image --machine podman-machine-default\n\n"
        "exit status:\n  0  built\n  1  podman is missing, failed, or ran past --timeout (then stopped)\n"
        "  2  bad usage",
        formatter_class=HelpFormatter,
    )
    build.add_argument("--machine", metavar="NAME", help="the podman machine to build in (default: podman's default)")
    build.add_argument("--timeout", type=_seconds, metavar="SECONDS", help="limit for the whole build (default: 1800)")


def _add_schema(sub: Subcommands) -> None:
    """`cgpu schema`."""
    schema = sub.add_parser(
        "schema",
        help="print the JSON Schema of the probe report or the image check",
        description="Print the JSON Schema of the probe report (`cgpu probe --json`, the default)\n"
        "or of the image check's answer (`cgpu image check --json`).",
        epilog="examples:\n  cgpu schema > cgpu-report.schema.json\n  cgpu schema image-check",
        formatter_class=HelpFormatter,
    )
    schema.add_argument("what", nargs="?", choices=("report", "image-check"), default="report")


def _add_samples(sub: Subcommands) -> None:
    """`cgpu samples`."""
    samples = sub.add_parser(
        "samples",
        help="write the CDI samples and fake hosts the README's commands use",
        description="Write the CDI sample specs and the fake host trees they are checked against\n"
        "(cdi-samples/ in a checkout) into a new or empty folder: what a pip user\n"
        "needs to run the README's commands. Nothing is overwritten.",
        epilog="example:\n  cgpu samples cdi-samples\n"
        "  cgpu probe -b cdi -e none -s cdi-samples/nvidia-current/spec \\\n"
        "      -r cdi-samples/hosts/nvidia-580\n\n"
        "exit status:\n  0  written\n  1  the folder is not new or empty, or cannot be written\n  2  bad usage",
        formatter_class=HelpFormatter,
    )
    samples.add_argument("dir", metavar="DIR", help="a new or empty folder")


def _add_completion(sub: Subcommands) -> None:
    """`cgpu completion`."""
    completion = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, fish)",
        description="Print the completion script for a shell, generated from cgpu's own options.",
        epilog="examples:\n  source <(cgpu completion bash)          # bash, this shell\n"
        "  cgpu completion zsh > ~/.zfunc/_cgpu    # zsh (bashcompinit)\n"
        "  cgpu completion fish > ~/.config/fish/completions/cgpu.fish",
        formatter_class=HelpFormatter,
    )
    completion.add_argument("shell", choices=("bash", "zsh", "fish"))


def _add_man(sub: Subcommands) -> None:
    """`cgpu man`."""
    sub.add_parser(
        "man",
        help="print the man page (roff), generated from these options",
        description="Print cgpu's man page as roff, generated from the same options as --help.",
        epilog="example:\n  cgpu man > cgpu.1 && man -l cgpu.1",
        formatter_class=HelpFormatter,
    )


# Each subcommand's parser, in the order the help lists them
_COMMANDS: dict[str, Callable[[Subcommands], None]] = {
    "probe": _add_probe,
    "watch": _add_watch,
    "image": _add_image,
    "krunkit": _add_krunkit,
    "schema": _add_schema,
    "samples": _add_samples,
    "completion": _add_completion,
    "man": _add_man,
}
# The commands that describe every command: the whole parser is built for them
_OF_EVERY_COMMAND = ("completion", "man")


def _add_probe_options(parser: argparse.ArgumentParser) -> None:
    """The options that choose and steer a backend: shared by `probe` and `watch`."""
    parser.add_argument(
        "-b", "--backend", choices=BACKENDS, help="default: cdi on Linux, wsl on Windows, krunkit on macOS"
    )
    add_options(parser)


def add_options(parser: argparse.ArgumentParser, table: Sequence[Option] = OPTIONS) -> None:
    """The backend options of `table`, each as its kind takes it: a flag's value, a repeatable
    flag for a list, a switch for a bool, a checked number of seconds."""
    groups: dict[str | None, Any] = {None: parser}
    groups.update((title, parser.add_argument_group(title)) for title in GROUPS.values())  # in GROUPS' order
    for option in table:
        flags = (option.short, option.flag) if option.short else (option.flag,)
        kind = option.kind
        arguments: dict[str, Any] = {"dest": option.keyword, "help": option.help}
        if kind == "flag":
            arguments["action"] = "store_true"
        else:
            arguments["metavar"] = option.metavar
        if kind in ("texts", "paths"):
            arguments["action"] = "append"
        if kind == "seconds":
            arguments["type"] = _seconds
        groups[option.group].add_argument(*flags, **arguments)


def main(argv: Sequence[str] | None = None) -> int:
    hangup = _ignore_hangup_while_starting(sys.argv[1:2] if argv is None else list(argv[:1]))
    try:
        return _main(argv)
    finally:
        if hangup is not None:
            signal.signal(signal.SIGHUP, hangup)


def _main(argv: Sequence[str] | None) -> int:
    as_program = argv is None  # not called in-process with arguments (a test, an agent)
    if as_program:  # a whole-run --timeout counts from the process's start (slow on a busy host)
        from cgpu.clock import count_from_process_start

        count_from_process_start()
    argv, devices = _take_devices(list(sys.argv[1:] if argv is None else argv))
    own = argv[0] if argv and argv[0] in _COMMANDS and argv[0] not in _OF_EVERY_COMMAND else None
    parser = _parser(own)  # only that command's parser, when the command line starts with one
    args = parser.parse_args(argv)
    if devices:
        args.devices = devices + (args.devices or [])
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # called in another thread: only the main one takes signals
        previous = False
    try:
        if args.command == "schema":
            from cgpu.model import image_check_schema, report_schema

            _emit(to_json(report_schema() if args.what == "report" else image_check_schema()))
            return ExitCode.OK
        if args.command in ("completion", "man"):
            from cgpu.shell import completion, man_page

            _emit(
                (completion(parser, args.shell) if args.command == "completion" else man_page(parser, __version__))[:-1]
            )
            return ExitCode.OK
        if args.command == "samples":
            return _write_samples(args.dir)
        if args.command == "image":
            return _image_check(args)
        if args.command == "krunkit" and args.krunkit_command == "build-image":
            return _build_image(args.machine, args.timeout)
        if args.command == "krunkit":
            return _write_assets(args.dir)
        if args.command == "watch":
            return _watch(args.subparser, args)
        return _probe(args.subparser, args)
    except _StdoutError as exc:
        print(f"cgpu: error: cannot write the answer to stdout: {exc}", file=sys.stderr)
        return ExitCode.COULD_NOT_RUN
    except Terminated:
        print("cgpu: terminated", file=sys.stderr)
        return ExitCode.TERMINATED
    except KeyboardInterrupt:
        print("cgpu: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    finally:
        if previous is not False:
            signal.signal(signal.SIGTERM, previous)
        if as_program:  # only the exit is left: its collections would free what the OS takes back anyway
            import gc

            gc.freeze()  # ~0.1 s of CPU, a second on a busy host, past every --timeout


def _ignore_hangup_while_starting(command: Sequence[str]) -> Any:
    """`watch` takes SIGHUP as "probe again", but its handler is installed only once the options
    are parsed: until then the default action would kill it. A SIGHUP that early is ignored (the
    first probe is still ahead). Returns the disposition to restore (None: nothing changed)."""
    if list(command) != ["watch"] or not hasattr(signal, "SIGHUP"):
        return None
    try:
        return signal.signal(signal.SIGHUP, signal.SIG_IGN)
    except ValueError:  # called in another thread: only the main one takes signals
        return None


def backend_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace, backend: str, table: Sequence[Option] = OPTIONS
) -> dict[str, Any]:
    """The backend options given on the command line (those of `table`, as the library's
    keywords); one of another backend is a usage error."""
    given = {
        option.keyword: value
        for option in table
        if (value := getattr(args, option.keyword, None)) is not None and value is not False
    }
    misplaced = set(given) - taken_by(backend, table)
    if misplaced:
        flags = ", ".join(flag_of(key, table) for key in sorted(misplaced))
        parser.error(f"{flags} do(es) not apply to --backend {backend}")
    return given


def _run(
    command: str,
    backend: str,
    given: dict[str, Any],
    progress: Callable[[str], None] | None,
    memory: object = None,
) -> tuple[ReportBuilder, ExitCode]:
    """Run the backend (with `memory`, what it keeps from the last probe: None, this process's):
    its report and the exit status it earns (a bug in cgpu is a report too)."""
    try:
        builder = run_backend(backend, given, progress=progress, memory=memory)
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
        builder.failed("cgpu", f"internal error, please report it: {type(exc).__name__}: {exc}", "internal-error")
        code = ExitCode.INTERNAL
    if code == ExitCode.USAGE:  # nothing was checked: no report that could pass for an answer
        from cgpu.terminal import escape

        for message in builder.usage(flag_of):
            print(f"cgpu {command}: error: argument {escape(message)}", file=sys.stderr)
    return builder, code


def _probe(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.list_devices and (args.brief or args.explain):
        parser.error("--list-devices does not combine with --brief or --explain (it does with --json)")
    output = "json" if args.json else "name" if args.quiet else args.output
    backend = args.backend or default_backend()
    given = backend_options(parser, args, backend)
    if args.image is not None:
        from cgpu.errors import CgpuValueError
        from cgpu.image.source import check_reference

        try:
            check_reference(args.image)
        except CgpuValueError as exc:
            parser.error(f"argument --image: {exc}")
    human = not (output in ("json", "yaml", "name") or args.brief)
    builder, code = _run("probe", backend, given, _progress if human else None)
    if code == ExitCode.USAGE:
        return code
    report = builder.build()
    if args.image is not None and code == ExitCode.OK:
        from cgpu.image.answer import with_image

        report = with_image(report, args.image, timeout=given.get("timeout"))
    if output == "json":
        _emit(to_json(report))
        return code
    if output == "yaml":
        from cgpu.report import to_yaml

        _emit(to_yaml(report).rstrip("\n"))
        return code
    from cgpu import render
    from cgpu.terminal import Style, escape, width

    if output == "name":  # every name, aliases too, as `nvidia-ctk cdi list`; nothing at all for none
        if report["devices"]:
            _emit("\n".join(escape(device["name"]) for device in report["devices"]))
        _say_problems(report)
        return code
    if args.brief:
        _emit(render.brief(report))
        _say_problems(report)
        return code
    columns, style = width(), Style.choose(args.color)
    if args.list_devices or args.explain or output == "wide":
        _say_problems(report)  # the terse views show no problems block of their own in full
    if args.list_devices or output == "wide":
        _emit(render.render_device_list(report, columns=columns, style=style, wide=output == "wide"))
    elif args.explain:
        text = render.render_explain(
            report, args.explain, devices=args.devices, root=args.root or DEFAULT_ROOT, columns=columns, style=style
        )
        _emit(text)
    else:
        text = render.render_report(report, columns=columns, style=style)
        if "image" in report:
            from cgpu.image.answer import render_image

            text += "\n\n" + render_image(report["image"], columns=columns, style=style)
        _emit(text)
    return code


def _say_problems(report: dict[str, Any]) -> None:
    """The report's errors and warnings on stderr, one line each, most severe first: the terse
    views must not pass for a clean answer."""
    from cgpu.render import merge_problems
    from cgpu.terminal import escape

    for problem in merge_problems(report["problems"]):
        if problem["severity"] in ("error", "warning"):
            text = f"cgpu probe: {problem['severity']}: {problem['source']}: {problem['message']}"
            print(escape(text), file=sys.stderr)


def _watch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Runs until SIGTERM (143) or Ctrl-C (130); bad usage found by the first probe is 2."""
    from cgpu.fleet.watch import MIN_INTERVAL_S, WatchOptions, watch

    if not (args.answer_file or args.nfd_file or args.metrics_file):
        parser.error("give --answer-file, --nfd-file or both (and/or --metrics-file): watch keeps its answer there")
    if args.check_age is not None:
        from cgpu.fleet.health import check_age

        return check_age([args.answer_file, args.nfd_file, args.metrics_file], args.check_age)
    if args.interval < MIN_INTERVAL_S:
        parser.error(
            f"--interval {args.interval:g} is under {MIN_INTERVAL_S:g} second: watch would probe in a busy loop "
            "(changes are seen at once anyway; the interval is only the longest wait)"
        )
    if args.expiry is not None and args.expiry < args.interval:
        parser.error(
            f"--expiry {args.expiry:g} is shorter than --interval {args.interval:g}: NFD would drop the labels "
            "before the next write renews them"
        )
    from cgpu.backends import Backend

    backend = args.backend or default_backend()
    given = backend_options(parser, args, backend)
    chosen = Backend(backend)
    memory = chosen.new_memory()  # what this watch keeps from one probe to the next

    def probe() -> dict[str, Any]:
        builder, code = _run("watch", backend, given, None, memory)
        if code == ExitCode.USAGE:
            raise _BadUsage()
        return builder.build()

    def log(message: str) -> None:
        import datetime

        from cgpu.terminal import escape_lines

        stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        print(f"cgpu watch {stamp} {escape_lines(message)}", file=sys.stderr, flush=True)

    try:
        options = WatchOptions(
            root=args.root or DEFAULT_ROOT,
            answer_file=args.answer_file,
            nfd_file=args.nfd_file,
            metrics_file=args.metrics_file,
            interval=args.interval,
            expiry=args.expiry or 3 * args.interval,
            log=log,
            terminated=Terminated,
        )
        watch(probe, options, chosen.watching(given, memory))
    except _BadUsage:
        return ExitCode.USAGE
    return ExitCode.OK


class _BadUsage(Exception):
    """The first probe found the options cannot work (already printed)."""


def _take_devices(argv: list[str]) -> tuple[list[str], list[str]]:
    """`probe`'s and `watch`'s `--device NAME`, `-d NAME` and `--device=NAME`, taken out before argparse sees them.

    argparse looks for the next option by scanning the index of every option again, for each
    option: quadratic in their number (50,000 `--device` flags took 86 s). Anything unusual
    (a value starting with `-`, anything after `--`) is left for argparse to judge.
    """
    if not argv or argv[0] not in ("probe", "watch"):
        return argv, []
    option = find("devices")
    long, short = option.flag, option.short
    rest, devices = [argv[0]], []
    index = 1
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            rest += argv[index:]
            break
        if arg.startswith(long + "="):
            devices.append(arg.removeprefix(long + "="))
        elif arg in (long, short) and index + 1 < len(argv) and not argv[index + 1].startswith("-"):
            devices.append(argv[index + 1])
            index += 1
        else:
            rest.append(arg)
        index += 1
    return rest, devices


def _image_check(args: argparse.Namespace) -> int:
    from cgpu.errors import CgpuValueError
    from cgpu.image.check import check_image, render_image_check
    from cgpu.terminal import escape

    if args.backend is not None:
        if args.machine is not None:
            print(
                "cgpu image check: error: --machine is krunkit's Venus check; with --backend give none", file=sys.stderr
            )
            return ExitCode.USAGE
        return _image_on_node(args)
    try:
        result = check_image(
            args.ref, machine=args.machine, timeout=args.timeout, progress=None if args.json else _progress
        )
        code = image_exit_code(result)
        if args.json:
            text = to_json(result)
        else:
            from cgpu.terminal import Style, width

            text = render_image_check(result, columns=width(), style=Style.choose(args.color))
    except KeyboardInterrupt:
        raise
    except CgpuValueError as exc:  # REF is no image reference at all
        print(f"cgpu image check: error: argument REF: {escape(exc)}", file=sys.stderr)
        return ExitCode.USAGE
    except Exception as exc:  # a bug in cgpu: say so, never a traceback
        message = escape(f"{type(exc).__name__}: {exc}")
        print(f"cgpu image check: internal error, please report it: {message}", file=sys.stderr)
        return ExitCode.INTERNAL
    _emit(text)
    return code


def _image_on_node(args: argparse.Namespace) -> int:
    """`image check REF --backend NAME`: the backend's probe with the image, its image part shown.
    Exit 0 when the image has what every API the node gives needs, 4 when it lacks a part of one,
    5 when it cannot tell, 1 when the probe or the image could not be read."""
    from cgpu.errors import CgpuValueError
    from cgpu.image.answer import image_exit, render_image, with_image
    from cgpu.image.source import check_reference
    from cgpu.terminal import escape

    try:
        check_reference(args.ref)
    except CgpuValueError as exc:
        print(f"cgpu image check: error: argument REF: {escape(exc)}", file=sys.stderr)
        return ExitCode.USAGE
    given = {"timeout": args.timeout} if args.timeout else {}
    builder, code = _run("image check", args.backend, given, None if args.json else _progress)
    if code != ExitCode.OK:
        return code
    report = with_image(builder.build(), args.ref, timeout=args.timeout)
    answer = {"backend": report["backend"], "containers": report["containers"], **report["image"]}
    answer["problems"] = report["problems"]
    if args.json:
        _emit(to_json(answer))
    else:
        from cgpu.render import render_problems
        from cgpu.terminal import Style, width

        columns, style = width(), Style.choose(args.color)
        lines = [render_image(report["image"], columns=columns, style=style)]
        lines += render_problems(report["problems"], columns=columns, style=style)
        _emit("\n".join(lines))
    return {
        "yes": ExitCode.OK,
        "no": ExitCode.IMAGE_NO,
        "unknown": ExitCode.IMAGE_UNKNOWN,
        "unread": ExitCode.COULD_NOT_RUN,
    }[image_exit(report["image"])]


def _write_assets(folder: str) -> int:
    from cgpu.backends.krunkit.image_files import write_assets
    from cgpu.terminal import escape

    try:
        written = write_assets(folder)
    except OSError as exc:
        print(f"cgpu krunkit write-assets: {escape(exc)}", file=sys.stderr)
        return ExitCode.COULD_NOT_RUN
    _emit("\n".join(escape(path) for path in written))
    return ExitCode.OK


def _write_samples(folder: str) -> int:
    from cgpu.samples import write_samples
    from cgpu.terminal import escape

    try:
        count = write_samples(folder)
    except OSError as exc:
        print(f"cgpu samples: {escape(exc)}", file=sys.stderr)
        return ExitCode.COULD_NOT_RUN
    first = (
        f"cgpu probe --backend cdi --engine none --spec-dir {folder}/nvidia-current/spec "
        f"--root {folder}/hosts/nvidia-580"
    )
    _emit(escape(f"wrote {count} files into {folder}; try: {first}"))
    return ExitCode.OK


def _build_image(machine: str | None, timeout: float | None) -> int:
    from cgpu.backends.krunkit import DEFAULT_PROBE_IMAGE
    from cgpu.backends.krunkit.image_files import BUILD_TIMEOUT_S, build_image
    from cgpu.run import CommandError, CommandTimeoutError, decode
    from cgpu.terminal import escape_lines

    def show(chunk: bytes) -> None:  # the build's own output, live; a closed stderr must not stop the reading
        try:
            sys.stderr.write(escape_lines(decode(chunk)))
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    where = f"in podman machine {machine}" if machine else "with podman"
    try:
        done = build_image(machine=machine, tag=DEFAULT_PROBE_IMAGE, timeout=timeout or BUILD_TIMEOUT_S, tee=show)
    except CommandError as exc:
        kept = decode(exc.stdout + exc.stderr) if isinstance(exc, CommandTimeoutError) else ""
        _build_failed(f"{exc}", kept)
        return ExitCode.COULD_NOT_RUN
    if done.returncode != 0:
        _build_failed(f"podman build {where} failed (exit status {done.returncode})", decode(done.stdout + done.stderr))
        return ExitCode.COULD_NOT_RUN
    _emit(f"built {DEFAULT_PROBE_IMAGE} {escape_lines(where)}")
    return ExitCode.OK


def _build_failed(reason: str, output: str) -> None:
    """Say why, then the build's last lines again: the live view has scrolled them away."""
    from cgpu.terminal import escape, escape_lines

    tail = output.rstrip("\n").split("\n")[-30:] if output.strip() else []
    print(f"cgpu krunkit build-image: {escape(reason)}", file=sys.stderr)
    if tail:
        print("its last lines:", file=sys.stderr)
        print(escape_lines("\n".join("  " + line for line in tail)), file=sys.stderr)


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


class _StdoutError(Exception):
    """The answer could not be written: stdout is closed or full (`cgpu probe > /dev/full`)."""


def _emit(text: str) -> None:
    """Print the answer; a reader that went away (`cgpu probe | head`) changes no exit status,
    while a closed or full stdout is `_StdoutError` (one line and exit 1, never a traceback)."""
    if sys.stdout is None:  # started with stdout closed (`cgpu probe >&-`)
        raise _StdoutError("stdout is closed")
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _quiet_stdout()
    except (OSError, ValueError) as exc:  # ENOSPC, EIO, EBADF; ValueError: a closed file object
        _quiet_stdout()
        raise _StdoutError(getattr(exc, "strerror", None) or str(exc)) from None


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is left stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not in_range(value):
        raise argparse.ArgumentTypeError(f"{text!r}: give {range_text()}")
    return value


def _progress(message: str) -> None:
    from cgpu.terminal import escape

    print(f"cgpu: {escape(message)}", file=sys.stderr, flush=True)
