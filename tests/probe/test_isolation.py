"""A driver that hangs or crashes costs its own API only, and nothing is left running."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.probe.conftest import PROBE, clean_env, needs_vulkan_loader, run_probe
from tests.timing import asleep, assert_within, timed, wait_for


def processes_with(marker: str) -> list[int]:
    """PIDs whose environment holds `marker` (the probe's children inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def fake_env(fake_cuda, fake_icd, marker: str, **extra: str) -> dict[str, str]:
    needs_vulkan_loader()
    return clean_env(
        LD_LIBRARY_PATH=str(fake_cuda),
        FAKE_CUDA_COUNT="1",
        VK_DRIVER_FILES=str(fake_icd()),
        FAKE_VK_DEVICES="2,4,0x10de,0x2335,0,0,NVIDIA H200",
        CGPU_TEST_MARKER=marker,
        **extra,
    )


@pytest.mark.slow
def test_hanging_driver_times_out_alone_and_is_killed(fake_cuda, fake_icd):
    marker = uuid.uuid4().hex

    def probe(**hang: str) -> dict:
        return run_probe("cuda", "vulkan", timeout=2, env=fake_env(fake_cuda, fake_icd, marker, **hang))

    data, elapsed = timed(lambda: probe(FAKE_VK_INSTANCE="hang"))
    assert data["apis"]["cuda"]["available"] is True
    vulkan = data["apis"]["vulkan"]
    assert vulkan["available"] is False and vulkan["error"] == "timeout"
    assert "timed out after 2 s" in vulkan["summary"]
    # bounded against the same probe with a Vulkan driver that answers
    assert_within(elapsed, 2, lambda: timed(probe)[1], "the probe with a hung Vulkan driver and --timeout 2")
    assert processes_with(marker) == []


def test_crashing_driver_costs_only_its_api(fake_cuda, fake_icd):
    data = run_probe("cuda", "vulkan", env=fake_env(fake_cuda, fake_icd, "x", FAKE_VK_INSTANCE="crash"))
    vulkan = data["apis"]["vulkan"]
    assert vulkan["error"] == "crashed"
    assert "crashed with signal 11 (SIGSEGV)" in vulkan["summary"]
    assert data["apis"]["cuda"]["available"] is True


def test_crash_in_cuda_leaves_vulkan_answering(fake_cuda, fake_icd):
    data = run_probe("cuda", "vulkan", env=fake_env(fake_cuda, fake_icd, "x", FAKE_CUDA_INIT="crash"))
    assert data["apis"]["cuda"]["error"] == "crashed"
    assert data["apis"]["vulkan"]["available"] is True


def test_interrupt_kills_the_children(fake_cuda, fake_icd):
    marker = uuid.uuid4().hex
    env = fake_env(fake_cuda, fake_icd, marker, FAKE_CUDA_INIT="hang")
    proc = subprocess.Popen(
        [sys.executable, str(PROBE), "--api", "cuda", "--timeout", "60"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # the probe and its child both asleep: the child waits in cuInit, the probe on the child
        wait_for(
            lambda: len(pids := processes_with(marker)) == 2 and all(map(asleep, pids)),
            within=60,
            what="the probe's child to hang in cuInit",
        )
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    finally:
        proc.kill()
        proc.communicate()
    assert processes_with(marker) == []
