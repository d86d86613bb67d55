"""The wsl backend's readers: probe.sh's format, wsl.exe's text, the local probe's JSON, INI files,
and the command line as Windows hands it to wsl.exe."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgpu.backends.wsl.output import (
    END,
    FORMAT,
    KEYS,
    REPEATED_KEYS,
    ProbeOutputError,
    adapters,
    decode_wsl_text,
    explain_failure,
    ini_value,
    parse_output,
)
from cgpu.gpu_probe.answer import read_child_answer

SCRIPT = Path(__file__).resolve().parents[2] / "cgpu" / "backends" / "wsl" / "probe.sh"
key_values = st.dictionaries(
    st.sampled_from(sorted(KEYS)),
    st.lists(st.binary(max_size=64), min_size=1, max_size=3),
).map(lambda d: {k: (v if k in REPEATED_KEYS else v[:1]) for k, v in d.items()})


def render(values: dict[str, list[bytes]]) -> bytes:
    """What probe.sh prints for these values."""
    lines = [FORMAT]
    for key, found in values.items():
        lines += [f"{key}={value.hex()}".encode() for value in found]
    return b"\n".join([*lines, END, b""])


@given(key_values)
def test_parse_round_trips(values):
    assert parse_output(render(values)).values == values


@given(key_values, st.data())
def test_any_damage_is_caught(values, data):
    good = render(values)
    index = data.draw(st.integers(0, len(good) - 1))
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != good[index]))
    damaged = good[:index] + bytes([byte]) + good[index + 1 :]
    try:
        parsed = parse_output(damaged)
    except ProbeOutputError:
        return
    # A few substitutions still spell valid output (another hex digit): then it parses to something else.
    assert parsed.values != values or damaged == good


@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_crash_the_parser(data):
    try:
        parse_output(FORMAT + b"\n" + data)
    except ProbeOutputError:
        pass


def test_truncated_output_is_refused():
    good = render({"dxg": [b"char"], "wsl_lib": [b"libdxcore.so/libd3d12.so"]})
    with pytest.raises(ProbeOutputError, match="end line"):
        parse_output(good[: good.index(END)])
    with pytest.raises(ProbeOutputError, match="repeats the key"):
        parse_output(render({"dxg": [b"char"]}).replace(b"\ndxg=", b"\ndxg=63686172\ndxg=", 1))
    with pytest.raises(ProbeOutputError, match="after the end line"):
        parse_output(good + b"extra\n")


@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\ufeff"), max_size=80))
def test_wsl_text_in_utf16_is_recognised(text):
    message = text + "\r\nError code: Wsl/Service/WSL_E_DISTRO_NOT_FOUND\r\n"
    assert decode_wsl_text(message.encode("utf-16-le")) == message
    assert decode_wsl_text(message.encode("utf-16")) == message  # with a BOM
    assert decode_wsl_text(message.encode("utf-16-le")[:-1]).startswith(message[:-1])  # cut short


def test_wsl_text_in_utf8_and_garbage():
    assert (
        decode_wsl_text(b"Fehlercode: Wsl/Service/WSL_E_DISTRO_NOT_FOUND")
        == "Fehlercode: Wsl/Service/WSL_E_DISTRO_NOT_FOUND"
    )
    assert decode_wsl_text(b"\x80abc") == "\\x80abc"


@given(st.binary(max_size=200), st.binary(max_size=200), st.sampled_from([0, 1, 127, 255, -1, 0xFFFFFFFF]))
def test_failure_explanations_never_crash(stdout, stderr, code):
    assert explain_failure(code, stdout, stderr, "Ubuntu")


def test_wsl_error_codes_are_explained():
    text = "There is no distribution with the supplied name.\r\nError code: Wsl/Service/WSL_E_DISTRO_NOT_FOUND\r\n"
    message = explain_failure(0xFFFFFFFF, text.encode("utf-16-le"), b"", "Ubuntu")
    assert message.startswith("Wsl/Service/WSL_E_DISTRO_NOT_FOUND: there is no WSL distro named Ubuntu")
    message = explain_failure(255, b"", b"Error code: Wsl/Service/CreateInstance/E_ACCESSDENIED", None)
    assert "E_ACCESSDENIED" in message
    # Exit -1 from the Linux side is not wsl.exe's: our script never exits 255, so say what we saw.
    assert "did not answer (exit 1)" in explain_failure(1, b"Wsl/ nothing", b"", None)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["available", "summary", "devices", "name", "vendor_id", "device_id", "hardware", "counted"]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@given(json_values)
def test_local_probe_reader_never_crashes(value):
    found = read_child_answer(json.dumps(value).encode(), "directml", source="test")
    if found is not None:
        assert all(isinstance(adapter.hardware, bool) for adapter in adapters(found[0]))


def test_local_probe_adapters_and_warp():
    found, _problems = read_child_answer(
        json.dumps(
            {
                "available": True,
                "summary": "2 of 3",
                "devices": [
                    {"name": "Microsoft Basic Render Driver", "vendor_id": "0x1414", "device_id": "0x008c"},
                    {
                        "name": "AMD Radeon RX 7800 XT",
                        "vendor_id": "0x1002",
                        "device_id": "0x747e",
                        "hardware": True,
                        "counted": True,
                    },
                    {"name": "Remote Display Adapter", "vendor_id": "0x1414", "hardware": False, "counted": True},
                    "not a device",
                ],
            }
        ).encode(),
        "directml",
        source="test",
    )
    assert [(a.name, a.vendor, a.hardware, a.ids) for a in adapters(found)] == [
        ("Microsoft Basic Render Driver", None, False, {"vendor_id": "0x1414", "device_id": "0x008c"}),
        ("AMD Radeon RX 7800 XT", "AMD", True, {"vendor_id": "0x1002", "device_id": "0x747e"}),
        ("Remote Display Adapter", None, False, {"vendor_id": "0x1414"}),
    ]
    assert read_child_answer(b"\xff not json", "directml", source="test") is None
    assert read_child_answer(b'{"summary": "no available flag"}', "directml", source="test") is None


def test_ini_values():
    text = '[wsl2]\nGPUSupport = False # off\n[gpu]\nenabled=true\n[Gpu]\nEnabled = "false"\n'
    assert ini_value(text, "wsl2", "gpuSupport") == "false"
    assert ini_value(text, "gpu", "enabled") == "false"  # the last one wins
    assert ini_value(text, "boot", "systemd") is None


# -- the command line Windows builds for wsl.exe -------------------------------------------


def command_line_to_argv(line: str) -> list[str]:
    """CommandLineToArgvW's rules (as wsl.exe applies them after -e), for arguments after the first."""
    args, current, quoted, index, started = [], [], False, 0, False
    while index < len(line):
        char = line[index]
        if char == "\\":
            count = len(line[index:]) - len(line[index:].lstrip("\\"))
            index += count
            if index < len(line) and line[index] == '"':
                current.append("\\" * (count // 2))
                if count % 2:
                    current.append('"')
                    index += 1
            else:
                current.append("\\" * count)
            started = True
            continue
        if char == '"':
            quoted = not quoted
            started = True
        elif char in " \t" and not quoted:
            if started:
                args.append("".join(current))
                current, started = [], False
        else:
            current.append(char)
            started = True
        index += 1
    if started:
        args.append("".join(current))
    return args


def test_probe_script_survives_the_windows_command_line():
    """On Windows, subprocess joins argv with list2cmdline; wsl.exe splits it with CommandLineToArgvW."""
    script = SCRIPT.read_text(encoding="utf-8")
    argv = ["sh", "-c", script, "cgpu-wsl-probe", "15", "30"]
    line = subprocess.list2cmdline(["wsl.exe", "-d", "Ubuntu", "-e", *argv])
    assert len(line) < 32767  # CreateProcess's limit for the whole command line
    after_exec = line.split(" -e ", 1)[1]
    assert command_line_to_argv(after_exec) == argv


@settings(max_examples=200)
@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\x00"), min_size=1), min_size=1, max_size=5))
def test_windows_command_line_model_round_trips(argv):
    assert command_line_to_argv(subprocess.list2cmdline(argv)) == argv


def test_local_probe_runs_from_stdin_without_a_file():
    """The real probe.py, sent on stdin and run by probe.sh as `python3 -c <source> --child API`."""
    import shutil

    local_probe = Path(__file__).resolve().parents[2] / "cgpu" / "gpu_probe" / "standalone.py"
    busybox, python = shutil.which("busybox"), shutil.which("python3")
    if not local_probe.is_file() or busybox is None or python is None:
        pytest.skip("needs cgpu/gpu_probe/standalone.py (the local backend's probe), busybox and python3")
    done = subprocess.run(
        [busybox, "sh", "-c", SCRIPT.read_text(), "cgpu-wsl-probe", "5", "20"],
        input=local_probe.read_bytes(),
        capture_output=True,
        timeout=120,
    )
    session = parse_output(done.stdout)
    for api in ("directml", "cuda"):
        found = read_child_answer(session.values[f"local_{api}"][0], api, source="test")
        assert found is not None, session.values[f"local_{api}"]
        assert found[0].state != "provided"  # no GPU on a test machine; the point is that it answered


def test_gpu_vendors_in_the_driver_store():
    from cgpu.backends.wsl.judging import _driver_stores

    session = parse_output(
        render(
            {
                "drivers": [
                    b"6_lenovo_iigd_dch.inf_amd64_55f5/u0420529.inf_amd64_88c3/ntprint.inf_amd64_83a2/"
                    b"nvmdi.inf_amd64_4d2b/stornvme.inf_amd64_abe5"
                ],
                "driver_so": [b"nvmdi.inf_amd64_4d2b/libcuda.so.1.1", b"ntprint.inf_amd64_83a2/libfoo.so"],
            }
        )
    )
    assert _driver_stores(session) == {
        "nvmdi.inf_amd64_4d2b": "NVIDIA",
        "6_lenovo_iigd_dch.inf_amd64_55f5": "Intel",
        "u0420529.inf_amd64_88c3": "AMD",
    }
