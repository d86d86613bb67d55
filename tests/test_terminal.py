"""What reaches a person's terminal: one sanitiser for outside values, width, colour, the answer first."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cgpu import render
from cgpu.gpu_probe import standalone
from cgpu.report import ReportBuilder
from cgpu.terminal import Style, escape
from tests.image.trees import docker_archive, fedora_tree, layer_tar
from tests.timing import assert_within, timed

REPO = Path(__file__).resolve().parent.parent
MIG = ("--engine", "none", "--spec-dir", "cdi-samples/nvidia-8gpu-mig/spec", "--root", "cdi-samples/hosts/nvidia-580")
# Everything a hostile value tried on a terminal: cursor up, carriage return, hidden text, OSC 52
# (clipboard), CSI as one C1 byte, DEL, a bidi override, NUL, and a forged answer line.
HOSTILE = "\x1b[8A\r\x1b[8m\x1b]52;c;Y3VybCBldmlsfHNo\x07\x9b2J\x7f\u202etxt.exe\x00\ncontainers get: cuda, vulkan"


def unsafe(text: str) -> list[str]:
    """Characters no outside value may bring to a terminal: C0 but newline, DEL, C1, bidi overrides."""
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F or c in "\u202a\u202e\u2066"]


# --- the sanitiser ---------------------------------------------------------------------------------


def test_escape_shows_every_control_and_keeps_the_text_readable():
    assert escape("plain /dev/nvidia0 ünïcode ✓") == "plain /dev/nvidia0 ünïcode ✓"
    shown = escape(HOSTILE)
    assert unsafe(shown) == [] and "\n" not in shown
    assert shown.startswith("\\e[8A\\r\\e[8m\\e]52;c;")
    assert "\\x9b2J\\x7f\\u202etxt.exe\\x00\\ncontainers get" in shown
    assert escape(os.fsdecode(b"spec-\xff.yaml")) == "spec-\\xff.yaml"  # an undecodable file name byte
    assert escape("a\u2028b\u200bc\u2066") == "a\\u2028b\\u200bc\\u2066"  # line separator, invisible ones


@given(st.text(alphabet=st.characters(codec=None)))
def test_escape_leaves_nothing_unsafe_and_the_probe_escapes_the_same(text):
    shown = escape(text)
    assert unsafe(shown) == [] and "\n" not in shown
    shown.encode("utf-8")  # raises on a lone surrogate: it would crash the print
    assert standalone.escape(text) == shown


# --- outside values through the real CLI -----------------------------------------------------------


def _hostile_spec(folder: Path) -> Path:
    """A spec whose env, hook and mount values and whose file name carry control characters."""
    folder.mkdir()
    value = json.dumps(HOSTILE)  # JSON is YAML: the escapes arrive as real control characters
    path = json.dumps(HOSTILE.replace("\x00", ""))  # a NUL in a path: see the report
    (folder / "evil\x1b[2J\x9b.json").write_text(
        "{"
        '"cdiVersion": "0.6.0", "kind": "example.com/gpu",'
        f'"containerEdits": {{"env": ["LD_PRELOAD=/x/{value[1:-1]}"], '
        f'"hooks": [{{"hookName": "createContainer", "path": "/bin/sh", "args": ["sh", "-c", {value}]}}]}},'
        '"devices": [{"name": "dev0", "containerEdits": {"deviceNodes": [{"path": "/dev/dri/renderD128"}],'
        f'"mounts": [{{"hostPath": {path}, "containerPath": "/etc/vulkan/icd.d/x.json"}}]}}}}]'
        "}"
    )
    return folder


@pytest.mark.parametrize("mode", [(), ("--list-devices",), ("--explain", "vulkan"), ("--color", "always")])
def test_spec_values_and_file_names_reach_the_terminal_escaped(run_cli, tmp_path, mode):
    specs = _hostile_spec(tmp_path / "spec")
    root = tmp_path / "root"
    (root / "dev/dri").mkdir(parents=True)
    (root / "dev/dri/renderD128").write_text("")
    code, out, err = run_cli("probe", "--engine", "none", "--spec-dir", str(specs), "--root", str(root), *mode)
    assert code == 0, err
    if mode == ("--color", "always"):  # cgpu's own colour codes are the only escapes left
        out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert unsafe(out) == [] and unsafe(err) == []
    assert not any(line.startswith("containers get: cuda") for line in out.splitlines()[1:])
    shown = out + err if mode == ("--list-devices",) else out  # --list-devices: the problems on stderr
    assert "\\e[8A" in re.sub(r"\n\s*", "", shown)  # shown, not hidden (maybe wrapped)
    assert json.loads(run_cli("probe", "--engine", "none", "--spec-dir", str(specs), "--root", str(root), "--json")[1])


def test_yaml_output_escapes_bidi_and_zero_width_characters_as_json_does(run_cli, tmp_path):
    import yaml

    specs = tmp_path / "spec"
    specs.mkdir()
    (specs / "gpu.json").write_text(
        json.dumps(
            {
                "cdiVersion": "0.6.0",
                "kind": "example.com/gpu",
                "containerEdits": {"env": ["LD_PRELOAD=/x/\u202etxt.exe\u200b\u2066.so"]},
                "devices": [{"name": "dev0", "containerEdits": {"deviceNodes": [{"path": "/dev/dri/renderD128"}]}}],
            },
            ensure_ascii=False,  # the characters themselves in the file
        )
    )
    root = tmp_path / "root"
    (root / "dev/dri").mkdir(parents=True)
    (root / "dev/dri/renderD128").write_text("")
    probe = ("probe", "--engine", "none", "--spec-dir", str(specs), "--root", str(root))
    code, out, err = run_cli(*probe, "-o", "yaml")
    assert code == 0, err
    assert [c for c in out if not c.isprintable() and c != "\n"] == []
    assert "\\u202Etxt.exe\\u200B\\u2066.so" in out  # shown escaped, as the JSON shows them
    report, same = yaml.safe_load(out), json.loads(run_cli(*probe, "--json")[1])
    assert {**report, "checked_at": None} == {**same, "checked_at": None}  # the same data


def test_image_tags_os_release_and_icd_paths_reach_the_terminal_escaped(run_cli, tmp_path):
    root = fedora_tree(tmp_path / "rootfs")
    (root / "etc/os-release").write_text(f"PRETTY_NAME={json.dumps(HOSTILE)}\nID=fedora\n")
    (root / f"usr/share/vulkan/icd.d/x{HOSTILE[:12]}.json").write_text('{"ICD": {"library_path": "/x\\u001b[8A"}}')
    code, out, err = run_cli("image", "check", f"dir:{root}")
    assert unsafe(out) == [] and unsafe(err) == [], out
    archive = docker_archive(tmp_path / "img.tar", [layer_tar(root)])
    manifest = subprocess.run(["tar", "-xOf", archive, "manifest.json"], capture_output=True, check=True).stdout
    entry = json.loads(manifest)
    entry[0]["RepoTags"] = [f"localhost/{HOSTILE}:x"]
    subprocess.run(["tar", "--delete", "-f", archive, "manifest.json"], check=True)
    (tmp_path / "manifest.json").write_text(json.dumps(entry))
    subprocess.run(["tar", "-rf", archive, "-C", tmp_path, "manifest.json"], check=True)
    code, out, err = run_cli("image", "check", f"docker-archive:{archive}")
    assert unsafe(out) == [] and unsafe(err) == [], out


def test_device_names_and_stderr_of_other_backends_are_escaped_when_rendered():
    """WSL adapter names and a container's or VM's stderr reach the report as device names,
    evidence and problems (those backends need wsl.exe or krunkit); every field is escaped."""
    report = ReportBuilder("wsl")
    report.device(f"NVIDIA {HOSTILE}", ["cuda"], status="ok", vendor=HOSTILE, libc="glibc", kernel=HOSTILE, os=HOSTILE)
    report.provide("cuda", f"libcuda.so.1 {HOSTILE}")
    report.problem("warning", f"wsl.exe {HOSTILE}", f"stderr: {HOSTILE}")
    built = report.build()
    for text in (
        render.render_report(built, columns=80),
        render.render_device_list(built),
        render.render_explain(built, "cuda"),
        render.brief(built),
    ):
        assert unsafe(text) == []


# --- the answer at a glance ------------------------------------------------------------------------


def test_mig_sample_answers_on_the_first_line_and_groups_aliases(run_cli):
    code, out, err = run_cli("probe", *MIG)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "containers get: cuda, vulkan, opencl · 13 devices (25 names) · no problems"
    assert "devices: 13 (25 names: a device's other names are its aliases, shown as `also`)" in out
    assert "nvidia.com/gpu=4 (and 12 other devices) gets" in out  # distinct devices, not names
    assert "also MIG-3f0a0000-7c1e-5b4a-8d2f-1a2b3c4d5e00" in out
    assert sum(line.startswith("  - metal") for line in lines) == 1 and "  - metal    Apple host API" in out
    devices = {d["name"]: d for d in json.loads(run_cli("probe", *MIG, "--json")[1])["devices"]}
    assert devices["nvidia.com/gpu=GPU-4a9c0b0e-1f83-5d2a-9e55-2b1c7d0e6f04"]["alias_of"] == "nvidia.com/gpu=4"
    assert "alias_of" not in devices["nvidia.com/gpu=0:1"]  # another MIG instance of GPU 0, not a name of 0:0


@pytest.mark.parametrize("columns", ["80", "120", None])
def test_no_line_is_wider_than_the_terminal(run_cli, columns):
    env = {"COLUMNS": columns} if columns else {}
    if columns is None:
        env = {k: "" for k in ("COLUMNS",)}  # piped: 80 columns
    for args in (
        MIG,
        ("--engine", "none", "--spec-dir", "cdi-samples/nvidia-1.17/spec", "--root", "cdi-samples/hosts/nvidia-580"),
    ):
        for mode in ((), ("--list-devices",), ("--explain", "opencl")):
            code, out, _ = run_cli("probe", *args, *mode, env=env)
            assert max(len(line) for line in out.splitlines()) <= int(columns or 80), (args, mode)


def test_a_name_too_long_for_the_column_gets_a_line_of_its_own(run_cli):
    uuid = "nvidia.com/gpu=GPU-4a9c0b0e-1f83-5d2a-9e55-2b1c7d0e6f04"
    code, out, _ = run_cli("probe", *MIG, "--device", uuid, "--device", "nvidia.com/gpu=all")
    table = out[out.index("DEVICE") :].splitlines()
    assert table[1:4] == [
        uuid,
        " " * 20 + "ok      cuda, vulkan, opencl",
        "nvidia.com/gpu=all  ok      cuda, vulkan, opencl",
    ]


def _on_a_terminal(*args: str, env: dict[str, str], columns: int = 120) -> str:
    """Run the CLI with a pseudo-terminal of `columns` as stdout: what a person sees."""
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu", "probe", *args],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        env={**clean, "TERM": "xterm", **env},
    )
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed its end
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(leader)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_colour_on_a_terminal_only_and_never_with_no_color():
    coloured = _on_a_terminal(*MIG, env={})
    assert "\x1b[" in coloured
    plain = re.sub(r"\x1b\[[0-9;]*m", "", coloured)
    assert plain.splitlines()[0].startswith("containers get: cuda, vulkan, opencl")
    assert max(len(line) for line in plain.splitlines()) <= 120
    assert "\x1b" not in _on_a_terminal(*MIG, env={"NO_COLOR": "1"})
    assert "\x1b" not in _on_a_terminal(*MIG, "--color", "never", env={})
    assert (
        "\x1b"
        not in subprocess.run(
            [sys.executable, "-m", "cgpu", "probe", *MIG], capture_output=True, text=True, cwd=REPO, check=True
        ).stdout
    )


def test_style_choice(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")  # no-color.org: an explicit --color wins over it, auto does not
    assert Style.choose("always").enabled and not Style.choose("never").enabled
    with open(os.devnull, "w") as devnull:
        assert not Style.choose("auto", stream=devnull).enabled
    assert Style(True)("x", "red") == "\x1b[31mx\x1b[0m" and Style(False)("x", "red") == "x"


def test_unknown_is_never_printed_as_none():
    report = ReportBuilder("wsl")
    report.failed("wsl.exe", "timed out after 90 s")
    built = report.build()
    assert render.summary(built).startswith("containers get: nothing known; unknown: cuda, rocm, vulkan")
    assert render.brief(built) == "cuda?,rocm?,vulkan?,opencl?,directml?"
    text = render.render_report(built, columns=80)
    assert "none" not in text.splitlines()[0] and max(len(line) for line in text.splitlines()) <= 80


def test_problems_are_sorted_by_severity_and_merged():
    problems = [
        {"severity": "info", "source": "a", "message": "m1"},
        {"severity": "warning", "source": "b", "message": "m2"},
        {"severity": "error", "source": "c", "message": "m3"},
        {"severity": "warning", "source": "d", "message": "m2"},
        {"severity": "warning", "source": "b", "message": "m2"},
    ]
    assert render.merge_problems(problems) == [
        {"severity": "error", "source": "c", "message": "m3"},
        {"severity": "warning", "source": "b, d", "message": "m2"},
        {"severity": "info", "source": "a", "message": "m1"},
    ]


# --- the everyday commands -------------------------------------------------------------------------


def test_brief_list_devices_and_explain(run_cli):
    assert run_cli("probe", *MIG, "--brief") == (0, "cuda,vulkan,opencl\n", "")
    code, out, _ = run_cli(
        "probe", "--engine", "none", "--spec-dir", "cdi-samples/lavapipe/spec", "--root", "cdi-samples/hosts/software"
    )
    assert "example.com/gpu=software  no APIs  -" in out  # a device that gives nothing says so
    code, out, _ = run_cli("probe", *MIG, "--list-devices")
    rows = out.splitlines()
    assert rows[0] == f"spec {MIG[3]}/nvidia.yaml"
    assert rows[1].split() == ["DEVICE", "STATUS", "APIS"]
    assert rows[2].split() == ["nvidia.com/gpu=4", "ok", "cuda,", "vulkan,", "opencl"]
    assert sum(row.startswith("  nvidia.com/gpu=") for row in rows) == 25  # every name, aliases too
    code, out, _ = run_cli(
        "probe", "--engine", "none", "--spec-dir", "cdi-samples/nvidia-1.17/spec",
        "--root", "cdi-samples/hosts/nvidia-580", "--explain", "cuda", "--device", "nvidia.com/gpu=0",
    )  # fmt: skip
    assert code == 0
    words = " ".join(out.split())
    assert out.startswith("cuda (absent): not provided: nvidia.com/gpu=0 would give cuda but no container")
    assert (
        "✗ a container starts: these host paths it needs are missing under --root cdi-samples/hosts/nvidia-580:"
        in words
    )
    assert "      ✗ /usr/lib/x86_64-linux-gnu/libcuda.so.575.64.03\n" in out
    assert "✓ cuda: gets /dev/nvidiactl" in words


@pytest.mark.parametrize(
    "name, says",
    [
        ("nvidia.com/gpu", "the =NAME part is missing (e.g. nvidia.com/gpu=0 or nvidia.com/gpu=all); did you mean"),
        ("gpu=4", "the vendor/ part is missing before gpu; did you mean nvidia.com/gpu=4?"),
        ("gpu0", "it is not qualified: give vendor/class=name"),
        ("nvidia.com/gpu=", "the name after = is empty"),
        ("nvidia.com/gpu=-x", "the name '-x' must start and end with a letter or digit"),
    ],
)
def test_each_malformed_device_name_gets_its_own_reason(run_cli, name, says):
    code, out, err = run_cli("probe", *MIG, "--device", name)
    assert code == 2 and out == ""
    assert says in err


def test_an_unknown_device_name_gets_the_close_ones(run_cli):
    code, out, _ = run_cli("probe", *MIG, "--device", "nvidia.com/gpu=GPU-4a9c0b0e-1f83-5d2a-9e55-2b1c7d0e6f0")
    assert code == 0
    assert "did you mean nvidia.com/gpu=GPU-4a9c0b0e-1f83-5d2a-9e55-2b1c7d0e6f0" in " ".join(out.split())


def test_fifty_thousand_device_flags_are_taken_in_linear_time(run_cli):
    """argparse rescans every option index per option: 50,000 `--device` flags took 86 s."""

    def flags(count: int) -> list[str]:
        args = []
        for i in range(count):
            args += ["--device", f"nvidia.com/gpu={i % 8}"] if i % 2 else [f"--device=nvidia.com/gpu=x{i}"]
        return args

    (code, out, err), seconds = timed(lambda: run_cli("probe", *MIG, *flags(50_000), "--brief"))
    assert (code, out) == (0, "cuda,vulkan,opencl\n"), err
    # were it linear: ten times a run with a tenth of the flags (quadratic is a hundred times)
    assert_within(
        seconds, 15, lambda: 10 * timed(lambda: run_cli("probe", *MIG, *flags(5_000), "--brief"))[1], "50,000 flags"
    )


def test_help_gives_timeout_defaults_exit_codes_and_examples(run_cli):
    from cgpu.backends.cdi import verify
    from cgpu.backends.krunkit import BOOT_TIMEOUT_S, RUN_TIMEOUT_S
    from cgpu.backends.wsl import DEFAULT_TIMEOUT as WSL
    from cgpu.image.check import DEFAULT_TIMEOUT as EXPORT

    out = run_cli("probe", "--help", env={"COLUMNS": "120"})[1]
    for seconds in (
        verify.DEFAULT_TIMEOUT,
        verify.API_TIMEOUT,
        WSL,
        RUN_TIMEOUT_S,
        BOOT_TIMEOUT_S,
        standalone.DEFAULT_TIMEOUT,
    ):
        assert f"{seconds:g} s" in out
    assert "exit status:" in out and "examples:" in out and "--explain" in out
    out = run_cli("image", "check", "--help")[1]
    assert f"{EXPORT:g} s" in out and "exit status:" in out and "oci:PATH" in out
    assert "--json" in out and "the answer as one JSON object" in out
    for command in (
        (),
        ("probe",),
        ("watch",),
        ("schema",),
        ("image", "check"),
        ("krunkit", "write-assets"),
        ("krunkit", "build-image"),
        ("samples",),
        ("completion",),
        ("man",),
    ):
        text = run_cli(*command, "--help", env={"COLUMNS": "80"})[1]
        assert "example" in text and max(len(line) for line in text.splitlines()) <= 80, command


def test_the_standalone_probe_has_a_human_mode(tmp_path):
    probe = shutil.copy(REPO / "cgpu/gpu_probe/standalone.py", tmp_path / "probe.py")
    done = subprocess.run(
        [sys.executable, probe, "--human", "--api", "metal", "--api", "cuda"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.startswith("GPU APIs that work here:")
    assert "  - metal" in done.stdout and max(len(line) for line in done.stdout.splitlines()) <= 80
    plain = subprocess.run([sys.executable, probe, "--api", "metal"], capture_output=True, text=True, timeout=60)
    assert json.loads(plain.stdout)["apis"]["metal"]["available"] is False  # JSON stays the default


def test_one_gpu_is_one_device_whatever_its_names(run_cli):
    sample = (
        "--engine",
        "none",
        "--spec-dir",
        "cdi-samples/nvidia-current/spec",
        "--root",
        "cdi-samples/hosts/nvidia-580",
    )
    code, out, err = run_cli("probe", "--backend", "cdi", *sample)
    assert (
        code == 0 and out.splitlines()[0] == "containers get: cuda, vulkan, opencl · 1 device (3 names) · no problems"
    )
    assert "devices: 1 (3 names:" in out and "other device" not in out


def test_a_gpus_own_mig_devices_are_suggested_first(run_cli):
    code, _, err = run_cli("probe", *MIG, "--device", "nvidia.com/gpu=0", "--brief")
    assert code == 0 and "did you mean nvidia.com/gpu=0:0, nvidia.com/gpu=0:1, " in err, err


@pytest.mark.parametrize("columns", ["80", "120"])
def test_list_devices_never_wraps_a_name(run_cli, columns):
    code, out, _ = run_cli("probe", *MIG, "--list-devices", env={"COLUMNS": columns})
    rows = out.splitlines()[1:]
    assert code == 0 and len(rows) == 26 and all(len(row) <= int(columns) for row in rows)
    assert all(
        row.split()[1:] in (["STATUS", "APIS"], ["ok", "cuda,", "vulkan,", "opencl"], ["ok", "cuda,", "opencl"])
        for row in rows
    )
    uuid = next(row.split()[0] for row in rows if "6f04" in row)
    if columns == "80":  # cut in the middle: the end that tells UUIDs apart stays
        assert "…" in uuid and uuid.endswith("-2b1c7d0e6f04") and uuid.startswith("nvidia.com/gpu=GPU-")
    else:
        assert uuid == "nvidia.com/gpu=GPU-4a9c0b0e-1f83-5d2a-9e55-2b1c7d0e6f04"


def test_list_devices_keeps_the_warnings_on_stderr(run_cli, tmp_path):
    code, out, err = run_cli("probe", *MIG, "--spec-dir", str(tmp_path / "none"), "--list-devices")
    assert code == 0 and "DEVICE" in out and err.startswith(f"cgpu probe: warning: {tmp_path / 'none'}: the spec dir")


def test_list_devices_with_json_is_the_report_with_every_full_name(run_cli):
    code, out, _ = run_cli("probe", *MIG, "--list-devices", "--json")
    names = [d["name"] for d in json.loads(out)["devices"]]
    assert code == 0 and len(names) == 25 and "nvidia.com/gpu=GPU-4a9c0b0e-1f83-5d2a-9e55-2b1c7d0e6f04" in names
    code, _, err = run_cli("probe", *MIG, "--list-devices", "--brief")
    assert code == 2 and "--list-devices does not combine with --brief" in err
