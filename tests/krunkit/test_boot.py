"""The krunkit backend booting its own VM (`--vm-image`) through the krunkit stand-in: ready,
hung, crashing, exiting early, too old; and nothing left running afterwards, Ctrl-C included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cgpu.backends.krunkit.vm import VMError, krunkit_argv
from tests.conftest import REPO
from tests.krunkit.conftest import FORGED_VENUS, REAL_PODMAN, marked_processes
from tests.krunkit.test_machine import LLVMPIPE, VENUS, krunkit_report, messages, probe_output
from tests.timing import asleep, assert_within, interpreter_run, timed, wait_for


@pytest.fixture
def disk(tmp_path):
    """Write the guest description the krunkit stand-in boots (its "disk image")."""

    def write(**guest) -> str:
        path = tmp_path / "probe-vm.raw"
        path.write_text(json.dumps(guest))
        return str(path)

    return write


def test_booted_vm_with_venus_gives_vulkan(bin_dir, disk, tmp_path):
    image = disk(behaviour="ready", boot_s=0.3, probe={"rc": 0, "out": probe_output(VENUS, LLVMPIPE)})
    report, failed, progress = krunkit_report(vm_image=image)
    assert not failed, messages(report)
    assert report["containers"] == ["vulkan"]
    assert "krunkit VM booted from" in report["evidence"]["vulkan"]
    assert any("VM ready after" in p for p in progress)
    (logs,) = (tmp_path / "cache" / "krunkit-vm").iterdir()
    assert "Fedora Linux 44" in (logs / "console.log").read_text()  # the VM's logs are kept
    assert any(p["source"] == str(logs) for p in report["problems"])
    request = json.loads((logs / "shared" / "request.json").read_text())
    assert request == {"probe_image": None}

    again, failed, progress = krunkit_report(vm_image=image)
    assert not failed and any("answer cached at" in p["message"] for p in again["problems"])
    assert not any("booting" in p for p in progress)
    Path(image).write_text(json.dumps({"behaviour": "ready", "probe": {"rc": 0, "out": probe_output(LLVMPIPE)}}))
    changed, _, _ = krunkit_report(vm_image=image)  # a new disk image is a new key
    assert changed["containers"] == []


@pytest.mark.skipif(REAL_PODMAN is None, reason="podman is not installed")
def test_booted_vm_runs_the_probe_image_through_real_podman(bin_dir, disk, probe_images, monkeypatch):
    # The stand-in guest does what krunkit/guest/cgpu-probe.sh does: podman run the image
    # named in request.json with the GPU (here /dev/null standing in for /dev/dri).
    monkeypatch.setenv("CGPU_KRUNKIT_EXE", str(bin_dir / "krunkit"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    ref = probe_images("boot-venus", probe_output(VENUS))
    image = disk(behaviour="ready", podman={"exe": REAL_PODMAN, "device": "/dev/null:/dev/dri/renderD128"})
    report, failed, _ = krunkit_report(vm_image=image, probe_image=ref)
    assert not failed, messages(report)
    assert report["containers"] == ["vulkan"]
    stock = probe_images("boot-stock", probe_output(error="VK_ERROR_OUT_OF_HOST_MEMORY"))
    report, failed, _ = krunkit_report(vm_image=image, probe_image=stock)
    assert not failed and report["containers"] == [] and "stock Mesa" in report["evidence"]["vulkan"]


def test_booted_vm_runs_cgpus_probe_not_the_images_entry_point(bin_dir, disk, real_probe_image, monkeypatch):
    # cgpu's probe travels in the share (probe.py) and runs with the image's python3; the
    # image's entry point, a forged "Venus works" answer, must not decide.
    monkeypatch.setenv("CGPU_KRUNKIT_EXE", str(bin_dir / "krunkit"))
    image = disk(behaviour="ready", podman={"exe": REAL_PODMAN, "device": "/dev/null:/dev/dri/renderD128"})
    report, failed, _ = krunkit_report(vm_image=image, probe_image=real_probe_image)
    assert not failed, messages(report)
    assert report["containers"] == [] and "no Venus device" in report["evidence"]["vulkan"]
    assert FORGED_VENUS["name"] not in json.dumps(report)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("guest", "timeout", "expected", "in_logs"),
    [
        pytest.param(
            {"behaviour": "hang"}, 2, "did not report ready within 2 s", "EFI stub: Booting Linux Kernel", id="hung"
        ),
        pytest.param(
            {"behaviour": "exit-early"},
            30,
            "krunkit exited with code 1 before the VM was ready",
            "Building the microVM failed",
            id="exits-early",
        ),
        pytest.param(
            {"behaviour": "crash"},
            30,
            "krunkit was killed by signal 6 before the guest wrote",
            "map_memory: err -85377021",
            id="crashes",
        ),
        pytest.param({"behaviour": "no-answer"}, 4, "wrote no probe answer", "Fedora Linux 44", id="no-answer"),
    ],
)
def test_vm_failures_are_reported_with_the_log_tail(bin_dir, disk, guest, timeout, expected, in_logs):
    (report, failed, _), seconds = timed(lambda: krunkit_report(vm_image=disk(**guest), timeout=timeout))
    # the timeout, and at most the 5 s stop grace
    assert_within(seconds, timeout + 5, interpreter_run, f"a VM {guest}, timeout {timeout}")
    assert failed
    text = messages(report)
    assert expected in text
    assert "VM log tail:" in text and in_logs in text
    assert report["containers"] == [] and "could not get the Venus probe" in report["evidence"]["vulkan"]


def test_failures_are_not_cached(bin_dir, disk):
    image = disk(behaviour="exit-early")
    krunkit_report(vm_image=image)
    report, failed, _ = krunkit_report(vm_image=image)
    assert failed and not any("cached" in p["message"] for p in report["problems"])


def test_krunkit_too_old_for_the_flags(bin_dir, disk, monkeypatch):
    monkeypatch.setenv("FAKE_KRUNKIT_UNKNOWN", "--restful-uri")
    report, failed, _ = krunkit_report(vm_image=disk(behaviour="ready"))
    assert failed
    assert "exited with code 2" in messages(report) and "brew upgrade krunkit" in messages(report)
    assert "unexpected argument '--restful-uri'" in messages(report)


def test_krunkit_missing_names_the_brew_line(disk, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    report, failed, _ = krunkit_report(vm_image=disk(behaviour="ready"))
    assert failed
    assert "brew tap slp/krun && brew trust slp/krun && brew install krunkit" in messages(report)
    assert "it exists only for macOS on Apple silicon" in messages(report)  # this is Linux
    assert "krunkit is not installed" in report["evidence"]["vulkan"]


def test_broken_krunkit_version(tmp_path, disk, monkeypatch):
    broken = tmp_path / "krunkit"
    broken.write_text("#!/bin/sh\necho 'dyld: Library not loaded: libkrun.1.dylib' >&2\nexit 134\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CGPU_KRUNKIT_EXE", str(broken))
    report, failed, _ = krunkit_report(vm_image=disk(behaviour="ready"))
    assert failed and "Library not loaded" in messages(report) and "brew" in messages(report)


def test_machine_and_vm_image_exclude_each_other(bin_dir, disk):
    report, failed, _ = krunkit_report(machine="gpu", vm_image=disk())
    assert failed and "exclude each other" in messages(report)


def test_argv_uses_real_krunkit_flags(tmp_path):
    argv = krunkit_argv(
        "krunkit", "/vm/disk.raw", run_dir=tmp_path, sock_dir=tmp_path, shared=tmp_path / "s", cpus=2, memory_mib=2048
    )
    assert argv[:5] == ["krunkit", "--cpus", "2", "--memory", "2048"]
    assert f"virtio-vsock,port=1025,socketURL={tmp_path}/ready.sock,listen" in argv
    assert f"virtio-fs,sharedDir={tmp_path}/s,mountTag=cgpu-results" in argv
    assert "--restful-uri" in argv and "--pidfile" in argv
    with pytest.raises(VMError, match="comma"):
        krunkit_argv(
            "krunkit", "/vm/a,b.raw", run_dir=tmp_path, sock_dir=tmp_path, shared=tmp_path, cpus=1, memory_mib=1
        )


def test_ctrl_c_stops_the_vm(bin_dir, disk, tmp_path, no_leftovers):
    image = disk(behaviour="hang")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu", "probe", "--backend", "krunkit", "--vm-image", image],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:

        def started() -> list[str]:
            pids = [p.read_text().strip() for p in (tmp_path / "cache").glob("krunkit-vm/*/krunkit.pid")]
            return pids if pids and pids[0] else []

        found = wait_for(started, within=60, what="the krunkit stand-in to start")
        krunkit_pid = int(found[0])
        assert len(marked_processes(no_leftovers)) >= 3  # cgpu, krunkit, krunkit's child
        # Ctrl-C once cgpu waits on the VM (on a busy host it may still be inside starting it)
        wait_for(lambda: asleep(proc.pid), within=60, what="cgpu to wait on the VM")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert b"interrupted" in stderr and b"Traceback" not in stderr
    assert not os.path.exists(f"/proc/{krunkit_pid}") or _is_zombie(krunkit_pid)


def _is_zombie(pid: int) -> bool:
    try:
        return " Z " in Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True


@pytest.mark.slow
def test_cli_json_and_exit_status(bin_dir, disk, run_cli):
    code, stdout, stderr = run_cli(
        "probe",
        "--backend",
        "krunkit",
        "--json",
        "--vm-image",
        disk(behaviour="ready", probe={"out": probe_output(VENUS)}),
    )
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["containers"] == ["vulkan"] and report["backend"] == "krunkit"
    code, stdout, stderr = run_cli(
        "probe", "--backend", "krunkit", "--json", "--refresh", "--vm-image", disk(behaviour="exit-early")
    )
    assert code == 1 and "Traceback" not in stderr
    assert "before the VM was ready" in json.dumps(json.loads(stdout)["problems"])
    code, stdout, stderr = run_cli(
        "probe",
        "--backend",
        "krunkit",
        "--vm-image",
        disk(behaviour="ready", probe={"out": probe_output(VENUS)}),
        "--refresh",
    )
    assert code == 0 and "cgpu: booting" in stderr and "VM ready after" in stderr  # progress while it boots


def test_memory_above_krunkits_limit_is_refused_before_starting(tmp_path, disk):
    from cgpu.backends.krunkit.vm import boot_and_probe

    with pytest.raises(VMError, match="above krunkit's limit of 61440 MiB"):
        boot_and_probe(
            "krunkit",
            disk(),
            run_dir=tmp_path / "run",
            probe_image=None,
            timeout=5,
            progress=lambda _: None,
            memory_mib=61441,
        )
    assert not (tmp_path / "run").exists()
