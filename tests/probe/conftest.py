"""Fixtures for the probe tests: fake driver libraries built with gcc, and a runner for the
standalone probe file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "cgpu" / "gpu_probe" / "standalone.py"
FAKES = Path(__file__).resolve().parent / "fakes"

# Variables that steer the loaders; scrubbed so the host's settings don't leak into a test.
STEERING = (
    "VK_DRIVER_FILES",
    "VK_ICD_FILENAMES",
    "VK_ADD_DRIVER_FILES",
    "VK_LOADER_DEBUG",
    "OCL_ICD_FILENAMES",
    "OCL_ICD_VENDORS",
    "OPENCL_VENDOR_PATH",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "ROCM_PATH",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_VISIBLE_DEVICES",
)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in STEERING and not k.startswith("FAKE_")}
    env.update(extra)
    return env


def run_probe(
    *apis: str,
    env: dict[str, str] | None = None,
    timeout: float = 20,
    python: str = sys.executable,
    script: Path = PROBE,
    options: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Run the probe file as users do; returns its JSON object."""
    argv = [python, str(script), "--timeout", str(timeout), *options]
    for api in apis:
        argv += ["--api", api]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout + 30, env=env if env is not None else clean_env(), cwd="/"
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def build(tmp_path_factory) -> Callable[[str, str], Path]:
    """Compile tests/probe/fakes/SOURCE into a shared library named NAME in its own directory."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed (needed to build the fake driver libraries)")
    built: dict[tuple[str, str], Path] = {}

    def build(source: str, name: str) -> Path:
        if (source, name) not in built:
            out = tmp_path_factory.mktemp("fake") / name
            subprocess.run(
                [gcc, "-shared", "-fPIC", "-O1", "-o", str(out), str(FAKES / source)], check=True, timeout=120
            )
            built[source, name] = out
        return built[source, name]

    return build


@pytest.fixture(scope="session")
def fake_cuda(build, tmp_path_factory) -> Path:
    """A directory holding a fake libcuda.so.1 and the PTX JIT compiler it loads (put it on LD_LIBRARY_PATH)."""
    folder = tmp_path_factory.mktemp("fake-cuda")
    shutil.copy(build("fake_libcuda.c", "libcuda.so.1"), folder)
    shutil.copy(build("fake_ptxjitcompiler.c", "libnvidia-ptxjitcompiler.so.1"), folder)
    return folder


@pytest.fixture(scope="session")
def fake_cuda_without_jit(build) -> Path:
    """A directory holding only the fake libcuda.so.1: its PTX JIT compiler is missing."""
    return build("fake_libcuda.c", "libcuda.so.1").parent


@pytest.fixture(scope="session")
def fake_icd_library(build) -> Path:
    return build("fake_vulkan_icd.c", "libvulkan_fake.so")


@pytest.fixture
def fake_icd(fake_icd_library, tmp_path) -> Callable[..., Path]:
    """Write a Vulkan ICD manifest for the fake driver; the file name decides how it looks (virtio_icd.*)."""

    def manifest(filename: str = "fake_icd.x86_64.json") -> Path:
        path = tmp_path / filename
        path.write_text(
            json.dumps(
                {
                    "file_format_version": "1.0.1",
                    "ICD": {"library_path": str(fake_icd_library), "api_version": "1.3.250"},
                }
            )
        )
        return path

    return manifest


def needs_vulkan_loader() -> None:
    if not any(
        Path(d, "libvulkan.so.1").exists()
        for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu", "/usr/lib")
    ):
        pytest.skip("the Vulkan loader (libvulkan1) is not installed")


def lavapipe_manifest() -> Path:
    """The lavapipe ICD manifest (skips the test where Mesa's Vulkan drivers are not installed)."""
    needs_vulkan_loader()
    found = sorted(Path("/usr/share/vulkan/icd.d").glob("lvp_icd*.json"))
    if not found:
        pytest.skip("lavapipe (mesa-vulkan-drivers) is not installed")
    return found[0]


def needs_pocl() -> None:
    if not Path("/etc/OpenCL/vendors/pocl.icd").exists():
        pytest.skip("PoCL (pocl-opencl-icd, ocl-icd-libopencl1) is not installed")


@pytest.fixture(scope="session")
def fake_hsa(build) -> Path:
    """A directory holding a fake libhsa-runtime64.so.1 (put it on LD_LIBRARY_PATH)."""
    return build("fake_hsa.c", "libhsa-runtime64.so.1").parent


def mutated_probe(folder: Path, old: str, new: str) -> Path:
    """A copy of the probe file with one piece of its check work changed (failure injection)."""
    source = PROBE.read_text()
    assert source.count(old) == 1, old
    copy = folder / "probe.py"
    copy.write_text(source.replace(old, new))
    return copy
