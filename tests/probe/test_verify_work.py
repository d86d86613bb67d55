"""`--verify` judges with the same probe: a device that starts in its container but cannot run
the check work disagrees with a static "yes", and the problem says where the work stopped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from cgpu.backends.cdi.verify import _verify_device
from cgpu.report import ReportBuilder
from cgpu.run import Completed
from tests.probe.conftest import PROBE, clean_env

DEVICE = "nvidia.com/gpu=0"


class ProbeEngine:
    """An engine whose container runs the real probe file here, against the stand-in libcuda."""

    name = "podman"

    def __init__(self, library_dir: Path) -> None:
        self.library_dir = library_dir

    def describe(self) -> str:
        return "podman (stand-in)"

    def run_container(self, image: str, command: list[str], **options: Any) -> Completed:
        env = clean_env(LD_LIBRARY_PATH=str(self.library_dir), FAKE_CUDA_INIT="0", FAKE_CUDA_COUNT="1")
        argv = [sys.executable, str(PROBE), "--api", "cuda"]
        proc = subprocess.run(argv, capture_output=True, env=env, timeout=60, check=False)
        return Completed(argv, proc.returncode, proc.stdout, proc.stderr)


def verify(library_dir: Path) -> tuple[str, list[str]]:
    report = ReportBuilder("cdi")
    check = _verify_device(report, ProbeEngine(library_dir), "image", DEVICE, ["cuda"], b"", 60)  # type: ignore[arg-type]
    return check.outcome, [p.message for p in report.problems if p.source == DEVICE]


def test_device_that_starts_but_cannot_run_the_work_disagrees_with_the_reason(fake_cuda_without_jit):
    outcome, problems = verify(fake_cuda_without_jit)
    assert outcome == "disagrees"
    [problem] = [p for p in problems if p.startswith("cuda: the static answer from the spec gives it")]
    assert (
        "the device starts but cannot run the check work (Fake GPU 0 stopped at cuModuleLoadDataEx with "
        "CUDA_ERROR_JIT_COMPILER_NOT_FOUND)" in problem
    )
    assert "--probe-image" not in problem  # the image is not what is missing


def test_device_whose_work_ran_agrees(fake_cuda):
    outcome, problems = verify(fake_cuda)
    assert outcome == "agrees" and problems == []
