"""Output is always valid: JSON in UTF-8 whatever the bytes of a file name, a closed or full
stdout said in one line, any COLUMNS, and no text without a length cap."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from cgpu.report import MAX_TEXT, ReportBuilder, to_json
from tests.conftest import REPO

SAMPLE = ["--backend", "cdi", "--engine", "none", "--root", str(REPO / "cdi-samples/hosts/nvidia-580")]
SPEC = REPO / "cdi-samples/nvidia-current/spec/nvidia.yaml"


def cli(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "cgpu", *args],
        capture_output="stdout" not in kwargs,
        timeout=120,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        **kwargs,
    )


@pytest.mark.skipif(sys.platform != "linux", reason="file names of any bytes: Linux")
def test_json_is_utf8_whatever_the_bytes_of_a_file_name(tmp_path):
    specs = os.fsencode(tmp_path / "specs")
    os.mkdir(specs)
    shutil.copyfile(SPEC, os.path.join(specs, b"nvidia-\xff\xfe.yaml"))
    done = cli("probe", *SAMPLE, "--spec-dir", os.fsdecode(specs), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.decode("utf-8"))  # strict: a lone surrogate would fail here
    assert report["devices"][0]["spec"].endswith("/nvidia-\\xff\\xfe.yaml")
    assert b"\\ud" not in done.stdout


def test_the_serializer_writes_undecodable_bytes_as_text_and_keeps_real_characters():
    data = {"path": os.fsdecode(b"/etc/cdi/\xff.yaml"), os.fsdecode(b"k\x80"): ["\ud800", "😀 é"]}
    text = to_json(data, indent=None)
    text.encode("utf-8")  # strict
    assert json.loads(text) == {"path": "/etc/cdi/\\xff.yaml", "k\\x80": ["\\ud800", "😀 é"]}
    assert to_json({"a": "C:\\udc"}) == json.dumps({"a": "C:\\udc"}, indent=2)  # a backslash stays a backslash


def test_the_answer_file_goes_through_the_same_serializer(tmp_path):
    from cgpu.fleet.watch import Publisher

    report = ReportBuilder("cdi")
    report.problem("warning", os.fsdecode(b"/etc/cdi/\xff.yaml"), "unreadable")
    answer = tmp_path / "answer.json"
    Publisher(answer_file=str(answer), nfd_file=None, expiry=60, log=print).publish(
        report.build(), finished_at=0.0, duration=0.1
    )
    assert json.loads(answer.read_bytes().decode("utf-8"))["problems"][0]["source"] == "/etc/cdi/\\xff.yaml"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("mode", [[], ["--json"], ["--brief"], ["--list-devices"]])
def test_a_full_stdout_is_one_line_and_exit_1(mode):
    with open("/dev/full", "wb") as full:
        done = cli("probe", *SAMPLE, "--spec-dir", str(SPEC.parent), *mode, stdout=full, stderr=subprocess.PIPE)
    err = done.stderr.decode()
    assert done.returncode == 1 and "Traceback" not in err, err
    assert err == "cgpu: error: cannot write the answer to stdout: No space left on device\n"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to start cgpu with stdout closed")
def test_a_closed_stdout_is_one_line_and_exit_1():
    command = f"exec {sys.executable} -m cgpu schema >&-"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 1 and done.stderr == "cgpu: error: cannot write the answer to stdout: stdout is closed\n"


@pytest.mark.parametrize("columns", ["²", "-5", "abc", "9" * 30, "0", " 120 ", "١٢٠"])
def test_any_columns_value_is_taken_or_ignored(columns):
    for args in (("probe", *SAMPLE, "--spec-dir", str(SPEC.parent)), ("image", "check", "dir:/nonexistent/cgpu")):
        done = cli(*args, env={"COLUMNS": columns})
        err = done.stderr.decode()
        assert done.returncode in (0, 1) and "Traceback" not in err and "internal error" not in err, err
        assert max(len(line) for line in done.stdout.decode().splitlines()) <= 1000


def test_width_takes_numbers_within_bounds_and_ignores_the_rest(monkeypatch):
    from cgpu.terminal import width

    for value, expected in [("120", 120), ("10", 40), ("99999", 1000), ("²", 80), ("-5", 80), ("1" * 5000, 80)]:
        monkeypatch.setenv("COLUMNS", value)
        assert width(open(os.devnull)) == expected, value


def test_every_text_is_capped_with_an_ellipsis(tmp_path):
    spec = yaml.safe_load(SPEC.read_text())
    spec["containerEdits"].setdefault("env", []).append("LD_LIBRARY_PATH=" + "../" * 200_000)
    (tmp_path / "nvidia.yaml").write_text(yaml.safe_dump(spec))
    done = cli("probe", *SAMPLE, "--spec-dir", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    texts = [*report["evidence"].values(), *(p["message"] for p in report["problems"])]
    texts += [v for d in report["devices"] for v in d.get("checks", {}).values()]
    assert max(map(len, texts)) <= MAX_TEXT and any(t.endswith("…") for t in texts)
    builder = ReportBuilder("local")
    builder.provide("vulkan", "x" * 600_000)
    builder.problem("error", "y" * 10_000, "z" * 10_000)
    built = builder.build()
    assert len(built["evidence"]["vulkan"]) == MAX_TEXT and built["evidence"]["vulkan"].endswith("x…")
    assert len(built["problems"][0]["message"]) == MAX_TEXT == len(built["problems"][0]["source"])


@pytest.mark.parametrize("mode", [["--brief"], ["--explain", "cuda"], ["--list-devices"]])
def test_the_terse_modes_say_the_reports_problems_on_stderr(mode, tmp_path):
    done = cli(
        "probe",
        *SAMPLE,
        "--spec-dir",
        str(tmp_path / "missing"),
        "--spec-dir",
        str(SPEC.parent),
        "--device",
        "nvidia.com/gpu=9",
        *mode,
    )
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 0 and len(lines) == 2, lines
    assert lines[0].startswith("cgpu probe: error: nvidia.com/gpu=9: unresolvable CDI devices nvidia.com/gpu=9")
    assert lines[1].startswith(f"cgpu probe: warning: {tmp_path / 'missing'}: the spec dir")
    full = cli("probe", *SAMPLE, "--spec-dir", str(SPEC.parent), "--device", "nvidia.com/gpu=9", "--json")
    assert json.loads(full.stdout)["containers"] == [] and done.stdout.strip() != b""


def test_a_clean_report_says_nothing_on_stderr():
    done = cli("probe", *SAMPLE, "--spec-dir", str(SPEC.parent), "--brief")
    assert (done.returncode, done.stdout, done.stderr) == (0, b"cuda,vulkan,opencl\n", b"")


def test_an_engine_named_that_is_not_there_is_an_error_and_every_api_unknown(tmp_path):
    """Not the newest rules' yes: the containers of an engine cgpu cannot read or ask are not known."""
    done = cli(
        "probe",
        *SAMPLE[:2],
        "--engine",
        "docker",
        *SAMPLE[4:],
        "--spec-dir",
        str(SPEC.parent),
        "--brief",
        env={"PATH": str(tmp_path)},  # no docker here
    )
    assert done.returncode == 0 and done.stdout == b"cuda?,rocm?,vulkan?,opencl?,directml?\n"
    assert done.stderr.decode().startswith("cgpu probe: error: --engine docker: no docker is installed under ")
    assert "cannot tell what its containers get" in done.stderr.decode()


def test_explain_lists_only_the_devices_seen_for_that_api():
    from cgpu.render import render_explain

    builder = ReportBuilder("local")
    builder.absent("vulkan", "only lavapipe")
    seen = {"status": "ignored", "counted": False, "source": "local probe", "reason": "a CPU device"}
    builder.device("llvmpipe", [], api="vulkan", **seen)
    builder.device("pthread-cpu", [], api="opencl", **seen)
    text = render_explain(builder.build(), "vulkan")
    assert "llvmpipe" in text and "pthread-cpu" not in text


@pytest.mark.parametrize(
    "text",
    [
        "plain",
        "caf\u00e9 \U0001f600 \u2603",  # a character above U+FFFF is a surrogate pair in the JSON text
        "/etc/cdi/\udcff\udc80.yaml",  # undecodable bytes of a file name
        "lone \ud800 high, lone \udfff low, \udc00 below the byte range",
        "\\udc80 is text here, and so is \\\\\udc81 after two backslashes",
    ],
)
def test_the_streamed_answer_is_byte_for_byte_what_to_json_writes(text):
    from cgpu.report import json_chunks

    data = {"devices": [{"name": text, "checks": {text: [text, 1, None, True]}}] * 3, text: text}
    pieces = list(json_chunks(data, size=7))
    assert len(pieces) > 1
    assert b"".join(pieces) == (to_json(data) + "\n").encode()


def test_the_streamed_answer_writes_two_lone_surrogates_that_read_as_a_pair_as_that_character():
    """The one difference from to_json, which sees the data: the JSON text of a high and a low
    surrogate side by side is that of the character they encode (file names never hold one: an
    undecodable byte is a low surrogate alone)."""
    from cgpu.report import json_chunks

    assert json.loads(b"".join(json_chunks({"a": "\ud83d\ude00"}))) == {"a": "\U0001f600"}
