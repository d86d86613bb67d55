""" "Could not tell" is data: on each backend's failure paths the APIs it could not answer for are
`unknown` (never `absent`), the exit status says whether the backend ran, and the human output
never says `none` while an API is unknown."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from tests.conftest import REPO

SAMPLES = REPO / "cdi-samples"
FIVE = ["cuda", "rocm", "vulkan", "opencl", "directml"]


def _states(out: str) -> dict[str, str]:
    return {api: entry["state"] for api, entry in json.loads(out)["apis"].items()}


def _first_line(run_cli, *args: str) -> str:
    return run_cli(*args)[1].splitlines()[0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local backend probes Linux")
def test_local_probe_that_gets_no_answer_in_time(run_cli):
    """Each API's child gets 0.001 s: those that time out are unknown (an API the probe rules out
    before starting a child may still be absent, on a fast enough machine); with no answer at
    all the backend could not run."""
    code, out, _ = run_cli("probe", "--backend", "local", "--timeout", "0.001", "--json")
    report = json.loads(out)
    states = _states(out)
    timed_out = [api for api in FIVE if "timed out" in report["evidence"][api]]
    assert timed_out and all(states[api] == "unknown" for api in timed_out)
    assert all(states[api] in ("unknown", "absent") for api in FIVE) and states["metal"] == "absent"
    assert code == (1 if all(states[api] == "unknown" for api in FIVE) else 0)
    line = _first_line(run_cli, "probe", "--backend", "local", "--timeout", "0.001")
    assert "none" not in line and "unknown: " in line


def test_wsl_without_wsl_exe(run_cli, tmp_path):
    env = {"CGPU_WSL_EXE": str(tmp_path / "wsl.exe")}  # not there
    code, out, _ = run_cli("probe", "--backend", "wsl", "--json", env=env)
    assert code == 1
    assert _states(out) == {**dict.fromkeys(FIVE, "unknown"), "metal": "absent"}
    assert "none" not in run_cli("probe", "--backend", "wsl", env=env)[1].splitlines()[0]


def test_krunkit_without_a_vm_to_ask(run_cli, tmp_path):
    """krunkit gives only Vulkan: the others are absent by design, Vulkan is unknown."""
    env = {"CGPU_KRUNKIT_EXE": str(tmp_path / "krunkit"), "PATH": str(tmp_path)}  # no krunkit, no podman
    code, out, _ = run_cli("probe", "--backend", "krunkit", "--json", "--timeout", "5", env=env)
    states = _states(out)
    assert code == 1 and states["vulkan"] == "unknown", out
    assert all(states[api] == "absent" for api in ("cuda", "rocm", "opencl", "directml", "metal"))


def test_cdi_spec_cgpu_cannot_read_makes_the_rest_unknown(run_cli, tmp_path):
    """A spec over cgpu's size cap (an engine reads it) may define devices: cuda is not known to
    be absent; what the readable specs give stays provided. The backend ran: exit 0."""
    specs = tmp_path / "specs"
    shutil.copytree(SAMPLES / "amd" / "spec", specs)
    big = (SAMPLES / "nvidia-current" / "spec" / "nvidia.yaml").read_text() + "#" + "x" * (5 * 1024 * 1024) + "\n"
    (specs / "nvidia.yaml").write_text(big)
    args = ["probe", "--engine", "none", "--spec-dir", str(specs), "--root", str(SAMPLES / "hosts" / "amd")]
    code, out, _ = run_cli(*args, "--json")
    assert code == 0
    assert _states(out) == {
        "cuda": "unknown",
        "rocm": "provided",
        "vulkan": "provided",
        "opencl": "provided",
        "directml": "unknown",
        "metal": "absent",
    }
    assert json.loads(out)["evidence"]["cuda"].startswith("unknown: cgpu could not read")
    assert run_cli(*args, "--brief")[1] == "rocm,vulkan,opencl,cuda?,directml?\n"
