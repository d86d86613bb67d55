"""Local backend faults at the CLI: a driver that hangs in its init is stopped at --timeout,
and Ctrl-C while the probe's child processes run ends them all."""

from __future__ import annotations

import json

import pytest

from tests.faults.conftest import STOPS, marked_processes
from tests.probe.conftest import build, clean_env, fake_cuda  # noqa: F401 - fixtures


def _env(cli, fake_cuda) -> dict[str, str]:
    return {
        **clean_env(),
        **{k: cli.env[k] for k in ("CGPU_FAULT_MARK", "PATH", "PYTHONPATH", "TMPDIR")},
        "LD_LIBRARY_PATH": str(fake_cuda),
        "FAKE_CUDA_COUNT": "1",
        "FAKE_CUDA_INIT": "hang",
    }


def test_a_hanging_driver_is_stopped_at_the_timeout(cli, fake_cuda):
    code, out, _ = cli("probe", "--backend", "local", "--json", "--timeout", "1", env=_env(cli, fake_cuda))
    report = json.loads(out)
    assert code == 0 and "cuda" not in report["containers"]
    assert any(p["severity"] == "warning" and "cuda" in p["message"] for p in report["problems"]), report["problems"]


@pytest.mark.parametrize("signum, status, said", STOPS)
def test_ctrl_c_while_the_probe_children_run(cli, fake_cuda, signum, status, said):
    code, out, err = cli.interrupt_when(
        lambda: len(marked_processes(cli.mark)) >= 2,
        "probe",
        "--backend",
        "local",
        "--timeout",
        "60",
        env=_env(cli, fake_cuda),
        signum=signum,
    )
    assert code == status and out == "" and said in err
