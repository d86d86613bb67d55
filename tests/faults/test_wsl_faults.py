"""WSL backend faults at the CLI: wsl.exe stand-ins that are not executable, die by a signal,
babble random bytes, never answer, or are interrupted. The backend could not run: exit 1 with
one clear problem (130 for Ctrl-C), and wsl.exe is never left running."""

from __future__ import annotations

import json

import pytest

from tests.faults.conftest import STOPS, hung, stand_in

FAULTS = {
    # name: (script body, words the problem must contain)
    "killed-by-a-signal": ("kill -9 $$\n", "the probe did not answer (exit -9)"),
    "random-bytes": ("head -c 65536 /dev/urandom\n", "the probe did not answer (exit 0)"),
    "half-an-answer": ('printf "cgpu-wsl-probe 1\\nkernel 6.6\\n"\n', "the probe's output was not understood"),
    "refuses": ('printf "W\\0S\\0L\\0 \\0i\\0s\\0 \\0o\\0f\\0f\\0\\r\\0\\n\\0"; exit 255\n', "WSL is off"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_broken_wsl_exe_is_one_clear_problem(cli, bin_dir, fault):
    body, words = FAULTS[fault]
    stand_in(bin_dir, "wsl.exe", body)
    code, out, _ = cli("probe", "--backend", "wsl", "--json", "--timeout", "10")
    report = json.loads(out)
    assert code == 1 and report["containers"] == []
    [error] = report["problems"]
    assert error["source"] == "wsl.exe (the default distro)" and words in error["message"], error
    assert len(error["message"]) < 1500, "a problem is read by people: no dumps"


def test_a_wsl_exe_that_is_not_executable_is_named_without_the_script(cli, bin_dir):
    exe = stand_in(bin_dir, "wsl.exe", "exit 0\n")
    exe.chmod(0o644)
    code, out, _ = cli("probe", "--backend", "wsl", "--json", env={"CGPU_WSL_EXE": str(exe)})
    report = json.loads(out)
    assert code == 1
    [error] = report["problems"]
    assert error["message"].startswith(f"could not run {exe}: not executable (permission denied); install WSL 2")
    assert "cgpu-wsl-probe" not in error["message"]  # the probe script is in the argv, not in the problem


def test_a_hung_wsl_exe_is_stopped_at_the_timeout(cli, bin_dir):
    hung(bin_dir, "wsl.exe")
    code, out, _ = cli("probe", "--backend", "wsl", "--json", "--timeout", "1", timeout=30)
    assert code == 1
    [error] = json.loads(out)["problems"]
    assert "gave no answer for the default distro within 1 s and was stopped" in error["message"]


@pytest.mark.parametrize("signum, status, said", STOPS)
def test_ctrl_c_while_wsl_exe_runs(cli, bin_dir, signum, status, said):
    hung(bin_dir, "wsl.exe")
    code, out, err = cli.interrupt_when(lambda: cli.running("sleep 600"), "probe", "--backend", "wsl", signum=signum)
    assert code == status and out == "" and err.endswith(said + "\n")
