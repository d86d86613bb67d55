"""The CUDA rule knows what the probe's check work (and any application shipping PTX) needs beyond
libcuda: the PTX JIT compiler of the same driver version. A spec without it is judged as the
dispatch fails: not a usable CUDA."""

from __future__ import annotations

from pathlib import Path

from cgpu.backends.cdi import answer_scan
from cgpu.node.host import HostFS
from cgpu.report import ReportBuilder
from tests.cdi_backend.build import scan, spec
from tests.cdi_backend.helpers import make_host

LIB = "/usr/lib/x86_64-linux-gnu"
CUDA = f"{LIB}/libcuda.so.580.82.07"
NODES = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"]


def cuda_answer(tmp_path: Path, *libraries: str) -> tuple[list[str], str]:
    mounts = [{"hostPath": p, "containerPath": p, "options": ["ro", "bind"]} for p in (CUDA, *libraries)]
    hook = {"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook"}
    hook["args"] = ["nvidia-cdi-hook", "update-ldcache", "--folder", LIB]
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": p} for p in NODES]}}],
        "containerEdits": {"mounts": mounts, "hooks": [hook]},
    }
    root = make_host(tmp_path / "root", [*NODES, CUDA, *libraries, hook["path"]])
    report = ReportBuilder("cdi")
    answer_scan(report, scan(spec(doc)), HostFS(str(root)))
    built = report.build()
    return built["containers"], built["evidence"]["cuda"]


def test_libcuda_without_the_ptx_jit_compiler_is_not_usable_cuda(tmp_path):
    containers, evidence = cuda_answer(tmp_path)
    assert "cuda" not in containers
    assert "not libnvidia-ptxjitcompiler.so.580.82.07, which libcuda loads to JIT-compile PTX" in evidence
    assert "CUDA_ERROR_JIT_COMPILER_NOT_FOUND" in evidence and "nvidia-ctk cdi generate" in evidence


def test_a_ptx_jit_compiler_of_another_driver_version_does_not_do(tmp_path):
    containers, evidence = cuda_answer(tmp_path, f"{LIB}/libnvidia-ptxjitcompiler.so.575.57.08")
    assert "cuda" not in containers and "libnvidia-ptxjitcompiler.so.580.82.07" in evidence


def test_libcuda_with_its_ptx_jit_compiler_is_cuda(tmp_path):
    containers, evidence = cuda_answer(tmp_path, f"{LIB}/libnvidia-ptxjitcompiler.so.580.82.07")
    assert "cuda" in containers and "ptxjitcompiler" not in evidence
