from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from pydantic import ValidationError

from cgpu.apis import API_ORDER
from cgpu.report import ReportBuilder
from tests.conftest import REPO, validate_report
from tests.timing import assert_within, interpreter_run


def test_builder_fills_all_six_and_orders_containers():
    report = ReportBuilder("cdi")
    report.provide("opencl", "mounted")
    report.provide("cuda", "mounted")
    report.provide("cuda", "mounted twice")
    built = report.build()
    assert built["containers"] == ["cuda", "opencl"]
    assert list(built["evidence"]) == list(API_ORDER)
    assert "never reaches a Linux container" in built["evidence"]["metal"]
    validate_report(built)


def test_withhold_after_provide_removes_api():
    report = ReportBuilder("cdi")
    report.provide("vulkan", "icd")
    report.absent("vulkan", "icd names lavapipe, a software driver")
    assert report.build()["containers"] == []


def test_unknown_api_is_rejected():
    with pytest.raises(ValueError):
        ReportBuilder("cdi").provide("glide", "x")


def test_model_rejects_out_of_order_and_missing_evidence():
    built = ReportBuilder("cdi").build()
    with pytest.raises(ValidationError):
        validate_report({**built, "containers": ["vulkan", "cuda"]})
    with pytest.raises(ValidationError):
        validate_report({**built, "evidence": {"cuda": "x"}})
    with pytest.raises(ValidationError):
        validate_report({**built, "surprise": 1})


def test_schema_command_prints_json_schema(run_cli):
    code, out, err = run_cli("schema")
    assert code == 0, err
    schema = json.loads(out)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert set(schema["required"]) >= {"containers", "evidence", "backend", "devices", "problems"}


def test_version(run_cli):
    code, out, _ = run_cli("--version")
    assert code == 0 and out.startswith("cgpu ")


def test_option_of_another_backend_is_a_usage_error(run_cli):
    code, out, err = run_cli("probe", "--backend", "wsl", "--spec-dir", "/etc/cdi")
    assert code == 2
    assert "--spec-dir" in err and "Traceback" not in err


def test_run_keeps_bounded_output_and_feeds_input():
    from cgpu.run import MAX_OUTPUT, run

    flood = run([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'x' * (40 << 20))"], timeout=60)
    assert flood.returncode == 0 and len(flood.stdout) == MAX_OUTPUT
    echoed = run(
        [sys.executable, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"],
        timeout=30,
        input=b"\xff" * 300_000,
    )
    assert echoed.stdout == b"\xff" * 300_000


@pytest.mark.slow
def test_run_stops_a_command_whose_daemon_keeps_the_pipe_open():
    """The command exits but leaves a process in its own session holding stdout: the timeout still
    holds (communicate() would have waited for that process)."""
    from cgpu.run import CommandTimeoutError, run

    code = (
        "import subprocess, sys; d = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(20)'], "
        "start_new_session=True); print(d.pid, flush=True)"
    )
    started = time.monotonic()
    with pytest.raises(CommandTimeoutError) as raised:
        run([sys.executable, "-c", code], timeout=2)
    seconds = time.monotonic() - started
    os.kill(int(raised.value.stdout), signal.SIGKILL)  # the daemon is outside cgpu's reach by design
    # the timeout and the 1 s grace for the pipes; not the daemon's 20 s
    assert_within(seconds, 2 + 1, interpreter_run, "run() of a command whose daemon holds its pipe")


@pytest.mark.parametrize("args, status", [(("probe", "--backend", "wsl"), 1), (("schema",), 0)])
def test_a_closed_pipe_keeps_the_exit_status(args, status, tmp_path):
    """`cgpu ... | head` in a pipeline with pipefail: the reader leaving must not turn a failure into 0."""
    command = f"set -o pipefail; {sys.executable} -m cgpu {' '.join(args)} | true"
    proc = subprocess.run(
        [shutil.which("bash") or "/bin/bash", "-c", command],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "PATH": str(tmp_path)},
    )  # no wsl.exe on PATH
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_device_details_may_use_any_key():
    """Details come from probe output (untrusted): a key like `self` or `name` must not collide."""
    entry = ReportBuilder("local").device("Venus", ["vulkan"], self=1, apis_seen=2)
    assert entry["name"] == "Venus" and entry["self"] == 1


def test_library_call_raises_valueerror_for_values_that_cannot_work():
    import cgpu

    with pytest.raises(ValueError, match="timeout"):
        cgpu.probe(backend="cdi", spec_dirs=["cdi-samples/amd/spec"], timeout=-1)
    with pytest.raises(ValueError, match="not a CDI device name"):
        cgpu.probe(backend="cdi", spec_dirs=["cdi-samples/amd/spec"], devices=["gpu=0"])
    report = cgpu.probe(  # a fake host: judged by the newest rules, not by this machine's engine
        backend="cdi",
        spec_dirs=[str(REPO / "cdi-samples/amd/spec")],
        root=str(REPO / "cdi-samples/hosts/amd"),
        engine="none",
    )
    assert report.containers == ["rocm", "vulkan", "opencl"]


_SAMPLE = ("--backend", "cdi", "--engine", "none", "--spec-dir", "cdi-samples/nvidia-current/spec")


@pytest.mark.parametrize(
    "args, words",
    [
        (("probe", *_SAMPLE, "--device", "bad", "--brief"), "argument --device: 'bad' is not a CDI device name"),
        (("probe", "--backend", "cdi", "--engine", "lxc@1", "--brief"), "argument --engine: unknown engine 'lxc'"),
        (("probe", "--backend", "wsl", "--distro", "a;b", "--brief"), "argument --distro: 'a;b' is not a WSL distro"),
        (("probe", *_SAMPLE, "--root", "/nonexistent/cgpu-root"), "argument --root: '/nonexistent/cgpu-root' is not"),
        (("image", "check", "Bad::Ref"), "argument REF: 'Bad::Ref' is not an image reference"),
        (("image", "check", "oci-archive:", "--json"), "argument REF: 'oci-archive:': give a path"),
    ],
)
def test_bad_usage_is_exit_2_naming_the_flag_whatever_the_option(run_cli, args, words):
    code, out, err = run_cli(*args)
    assert code == 2 and out == "", err
    assert f"cgpu {' '.join(args[:2]) if args[0] == 'image' else args[0]}: error: {words}" in err


def test_a_usage_error_shows_the_subcommands_usage_line(run_cli):
    code, _, err = run_cli("probe", "--backend", "wsl", "--spec-dir", "x")
    assert code == 2 and err.startswith("usage: cgpu probe ") and "--spec-dir do(es) not apply" in err


def test_each_command_lists_its_own_exit_codes(run_cli):
    _, image, _ = run_cli("image", "check", "--help")
    _, probe, _ = run_cli("probe", "--help")
    image_codes, probe_codes = image.split("exit status:")[1], probe.split("exit status:")[1]
    assert "0    yes: the image would get vulkan" in image_codes and "the backend ran" not in image_codes
    assert "  4    no:" in image_codes and "  5    unknown:" in image_codes
    assert "0    the backend ran" in probe_codes
    assert "\n  4 " not in probe_codes and "\n  5 " not in probe_codes and "image" not in probe_codes


def _commands(parser):
    import argparse

    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize(
    "argv",
    [
        ["probe", "--json", "-s", "/x", "--engine", "none", "--timeout", "5"],
        ["watch", "--interval", "5", "--answer-file", "/a", "--backend", "cdi"],
        ["image", "check", "oci:/i", "--json"],
        ["krunkit", "build-image", "--machine", "m"],
        ["krunkit", "write-assets", "/d"],
        ["schema", "image-check"],
        ["samples", "/d"],
    ],
)
def test_a_command_line_builds_only_its_commands_parser_and_reads_the_same(argv):
    from cgpu import cli

    alone, whole = cli._parser(argv[0]), cli._parser()
    assert list(_commands(alone)) == [argv[0]]  # the other commands' options are never built
    assert list(_commands(whole)) == list(cli._COMMANDS)
    read_alone, read_whole = vars(alone.parse_args(argv)), vars(whole.parse_args(argv))
    if "subparser" in read_whole:  # that command's own parser object, one per build
        assert read_alone.pop("subparser").format_help() == read_whole.pop("subparser").format_help()
    assert read_alone == read_whole


def test_the_top_level_help_still_lists_every_command():
    result = subprocess.run(
        [sys.executable, "-m", "cgpu", "--help"], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert result.returncode == 0
    listed = result.stdout.split("COMMAND", 2)[-1]
    for command in ("probe", "watch", "image", "krunkit", "schema", "samples", "completion", "man"):
        assert re.search(rf"^    {command}\s", listed, re.MULTILINE), command
