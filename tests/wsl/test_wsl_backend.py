"""The wsl backend end to end: the real wsl/probe.sh, run by busybox inside fabricated distros
behind the wsl.exe stand-in (tests/wsl/fake_wsl.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from cgpu.backends import run_backend
from cgpu.backends.wsl import backend
from tests.conftest import validate_report
from tests.timing import assert_within, interpreter_run, timed, wait_for
from tests.wsl.conftest import NVIDIA_SMI_TCC


def probe(**options):
    builder = run_backend("wsl", options)
    report = builder.build()
    validate_report(report)
    return builder.could_not_run, report


def messages(report, severity=None) -> str:
    return "\n".join(p["message"] for p in report["problems"] if severity in (None, p["severity"]))


LOCAL_PROBE = b"print('the local probe')\n"


@pytest.fixture
def with_local_probe(monkeypatch):
    """Send a local probe along, so a python3 in the session runs it."""
    monkeypatch.setattr(backend, "_local_probe_source", lambda report: LOCAL_PROBE)


def dxcore_adapter(name, vendor_id, device_id, hardware=True):
    reason = "a hardware D3D12 compute adapter" if hardware else "a software adapter (WARP), not a GPU"
    return {
        "name": name,
        "vendor_id": vendor_id,
        "device_id": device_id,
        "hardware": hardware,
        "counted": hardware,
        "reason": reason,
    }


def answer(available, summary, devices=(), error=None):
    """One API's answer as `probe.py --child API` prints it."""
    return {
        "available": available,
        "summary": summary,
        "library": "/usr/lib/wsl/lib/libd3d12.so",
        "error": error,
        "devices": list(devices),
        "stderr": "",
    }


def test_nvidia_gives_cuda_and_directml(fake_wsl):
    fake_wsl.distro("Ubuntu", default=True).glibc().dxg().wsl_libs().nvidia()
    failed, report = probe(distro="Ubuntu")
    assert not failed, report["problems"]
    assert report["containers"] == ["cuda", "directml"]
    assert "driver 576.88, CUDA 12.9" in report["evidence"]["cuda"]
    assert "glibc" in report["evidence"]["cuda"]
    assert "confirmed by nvidia-smi" in report["evidence"]["directml"]
    (device,) = report["devices"]
    assert device["apis"] == ["cuda", "directml"]
    assert device["libc"] == "glibc" and device["os"] == "Ubuntu 24.04.1 LTS" and device["wsl"] == "2"
    assert device["vendors"] == ["NVIDIA"] and device["adapters_enumerated"] is False


def test_default_distro_is_used_without_distro(fake_wsl):
    fake_wsl.distro("Ubuntu", default=True).glibc().dxg().wsl_libs().nvidia()
    failed, report = probe()
    assert not failed and report["containers"] == ["cuda", "directml"]


def test_distro_from_environment(fake_wsl, monkeypatch):
    fake_wsl.distro("Ubuntu", default=True).glibc()
    fake_wsl.distro("podman-machine-default").glibc().dxg().wsl_libs().intel()
    monkeypatch.setenv("CGPU_WSL_DISTRO", "podman-machine-default")
    failed, report = probe()
    assert not failed and report["containers"] == ["directml"]


@pytest.mark.parametrize("vendor", ["intel", "amd"])
def test_intel_and_amd_give_directml_only(fake_wsl, vendor):
    distro = fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().dri()
    getattr(distro, vendor)()
    failed, report = probe(distro="Ubuntu")
    assert not failed
    assert report["containers"] == ["directml"]
    name = {"intel": "Intel", "amd": "AMD"}[vendor]
    assert f"inferred from the {name} display driver" in report["evidence"]["directml"]
    assert "could not be ruled out" in report["evidence"]["directml"]
    assert "no libcuda.so.1" in report["evidence"]["cuda"]
    assert "install python3" in messages(report, "warning")
    assert "VGEM" in messages(report, "info")  # /dev/dri is noted, never counted


def test_local_probe_enumerates_adapters(fake_wsl, with_local_probe):
    adapters = [
        dxcore_adapter("NVIDIA GeForce RTX 4070", "0x10de", "0x2786"),
        dxcore_adapter("Intel(R) UHD Graphics 770", "0x8086", "0x4680"),
        dxcore_adapter("Microsoft Basic Render Driver", "0x1414", "0x008c", hardware=False),
    ]
    distro = fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().nvidia().intel()
    distro.python(
        directml=answer(True, "D3D12 (DirectML) has 2 hardware adapter(s)", adapters),
        cuda=answer(
            True,
            "CUDA 12.9 works with 1 device(s): NVIDIA GeForce RTX 4070",
            [{"name": "NVIDIA GeForce RTX 4070", "counted": True}],
        ),
    )
    failed, report = probe(distro="Ubuntu")
    assert not failed, report["problems"]
    assert report["containers"] == ["cuda", "directml"]
    assert (
        "lists 2 hardware adapter(s) (NVIDIA GeForce RTX 4070, Intel(R) UHD Graphics 770)"
        in report["evidence"]["directml"]
    )
    assert "CUDA 12.9 works with 1 device(s)" in report["evidence"]["cuda"]
    apis = {d["name"]: (d["apis"], d["status"], d["vendor_id"]) for d in report["devices"]}
    assert apis == {
        "NVIDIA GeForce RTX 4070": (["cuda", "directml"], "ok", "0x10de"),
        "Intel(R) UHD Graphics 770": (["directml"], "ok", "0x8086"),
        "Microsoft Basic Render Driver": ([], "software", "0x1414"),
    }
    # The probe went in as `python3 -I -S -c <source> --child API`: no file written in the session.
    args = (distro.root / "tmp/python-args").read_text()
    assert args == "-I\n-S\n-c\n" + LOCAL_PROBE.decode().rstrip("\n") + "\n--child\ncuda\n"


def test_a_local_probe_that_timed_out_is_no_answer_not_absent(fake_wsl, with_local_probe):
    """A crashed or hung CUDA check in the session cannot tell: nvidia-smi decides, not "absent"."""
    distro = fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().nvidia()
    distro.python(
        directml=answer(
            True, "D3D12 (DirectML) has 1 hardware adapter(s)", [dxcore_adapter("NVIDIA RTX", "0x10de", "0x2786")]
        ),
        cuda=answer(False, "the cuda probe timed out after 5 s: a driver call hung", error="timeout"),
    )
    failed, report = probe(distro="Ubuntu")
    assert not failed, report["problems"]
    assert report["containers"] == ["cuda", "directml"]
    assert "nvidia-smi works" in report["evidence"]["cuda"]
    assert "the local probe's cuda check gave no answer (the cuda probe timed out" in messages(report, "warning")


def test_only_warp_gives_nothing(fake_wsl, with_local_probe):
    warp = [dxcore_adapter("Microsoft Basic Render Driver", "0x1414", "0x008c", hardware=False)]
    fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().intel().python(
        directml=answer(False, "D3D12 sees no hardware compute adapter, only: Microsoft Basic Render Driver", warp)
    )
    failed, report = probe(distro="Ubuntu")
    assert not failed
    assert report["containers"] == []
    assert "found no hardware adapter (D3D12 sees no hardware compute adapter" in report["evidence"]["directml"]
    assert [(d["name"], d["apis"], d["status"]) for d in report["devices"]] == [
        ("Microsoft Basic Render Driver", [], "software")
    ]


def test_dxcore_failure_in_a_glibc_session_withholds(fake_wsl, with_local_probe):
    fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().amd().python(
        directml=answer(
            False,
            "/dev/dxg and the D3D12 libraries are here but DXCore could not list adapters: "
            "DXCoreCreateAdapterFactory returned 0xd0000001",
            error="DXCORE_ENUM_FAILED",
        )
    )
    failed, report = probe(distro="Ubuntu")
    assert not failed and report["containers"] == []
    assert "0xd0000001" in report["evidence"]["directml"]


def test_unusable_local_probe_answer_falls_back(fake_wsl, with_local_probe):
    fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().intel().python(directml="Traceback (most recent call last):")
    failed, report = probe(distro="Ubuntu")
    assert not failed
    assert report["containers"] == ["directml"]
    assert "inferred" in report["evidence"]["directml"]
    assert "the local probe's directml check gave no answer (its output was not a probe answer)" in messages(
        report, "warning"
    )
    assert "the local probe's cuda check gave no answer (exit 1)" in messages(report, "warning")


def test_tcc_mode_gpu_gives_no_cuda(fake_wsl):
    fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().nvidia(smi_output=NVIDIA_SMI_TCC, smi_exit=9)
    failed, report = probe(distro="Ubuntu")
    assert not failed
    assert "cuda" not in report["containers"]
    assert "GPU access blocked by the operating system" in report["evidence"]["cuda"]
    # the NVIDIA driver package is still there, so DirectML is inferred from it
    assert report["containers"] == ["directml"]


@pytest.mark.parametrize("mount_point", [True, False])
def test_gpu_disabled_in_wsl_conf(fake_wsl, mount_point):
    distro = fake_wsl.distro("Ubuntu").glibc().dxg()
    if mount_point:
        distro.folder("usr/lib/wsl/lib")
    distro.file("etc/wsl.conf", "[boot]\nsystemd=true\n\n[gpu]\nenabled = false  # no GPU here\n")
    failed, report = probe(distro="Ubuntu")
    assert not failed
    assert report["containers"] == []
    assert "[gpu] enabled=false" in report["evidence"]["directml"]
    assert ("is empty" if mount_point else "is missing") in report["evidence"]["directml"]
    assert report["devices"] == []


def test_gpu_disabled_in_wslconfig(fake_wsl, tmp_path, monkeypatch):
    fake_wsl.distro("Ubuntu").glibc()
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / ".wslconfig").write_bytes("[wsl2]\r\nmemory=8GB\r\ngpuSupport=false\r\n".encode("utf-16"))
    monkeypatch.setenv("USERPROFILE", str(profile))
    failed, report = probe(distro="Ubuntu")
    assert not failed
    assert report["containers"] == []
    assert "gpuSupport=false" in report["evidence"]["cuda"]


def test_vgem_without_dxg_gives_nothing(fake_wsl):
    fake_wsl.distro("Ubuntu").glibc().dri().wsl_libs().nvidia()
    failed, report = probe(distro="Ubuntu")
    assert not failed
    assert report["containers"] == []
    assert "no /dev/dxg" in report["evidence"]["directml"]


def test_wsl1_distro(fake_wsl):
    distro = fake_wsl.distro("Legacy", version=1).glibc()
    distro.file("proc/sys/kernel/osrelease", "4.4.0-19041-Microsoft\n")
    failed, report = probe(distro="Legacy")
    assert not failed and report["containers"] == []
    assert "WSL 1" in report["evidence"]["cuda"] and "--set-version" in report["evidence"]["cuda"]


def test_musl_session(fake_wsl, with_local_probe):
    # Alpine's python3 cannot load the glibc D3D12/CUDA libraries: its "nothing" proves nothing.
    distro = (
        fake_wsl.distro("Alpine").musl().dxg().wsl_libs().nvidia(smi_output="sh: nvidia-smi: not found\n", smi_exit=127)
    )
    distro.python(
        directml=answer(False, "/dev/dxg is here but libdxcore.so and libd3d12.so is not", error="library_not_found"),
        cuda=answer(False, "libcuda.so.1: Error loading shared library", error="library_not_found"),
    )
    failed, report = probe(distro="Alpine")
    assert not failed
    assert report["containers"] == ["cuda", "directml"]
    assert "musl session cannot load it" in report["evidence"]["cuda"]
    assert "musl images such as Alpine cannot load" in report["evidence"]["cuda"]
    assert "libc is musl" in messages(report, "warning")
    assert report["devices"][0]["libc"] == "musl"


def test_missing_d3d12_libraries(fake_wsl):
    fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs("libdxcore.so").intel()
    failed, report = probe(distro="Ubuntu")
    assert not failed and report["containers"] == []
    assert "libd3d12.so missing" in report["evidence"]["directml"]


def test_odd_file_names_do_not_break_the_format(fake_wsl):
    distro = fake_wsl.distro("Ubuntu").glibc().dxg().wsl_libs().intel()
    distro.file("usr/lib/wsl/lib/evil\nlibcuda.so.1=x", b"")
    distro.file(b"usr/lib/wsl/lib/\xff\xfe odd".decode("utf-8", "surrogateescape"), b"")
    failed, report = probe(distro="Ubuntu")
    assert not failed
    assert report["containers"] == ["directml"]  # the odd name is not libcuda.so.1


def test_missing_distro(fake_wsl):
    fake_wsl.distro("Ubuntu", default=True).glibc()
    failed, report = probe(distro="Debian")
    assert failed
    (problem,) = report["problems"]
    assert problem["message"].startswith("Wsl/Service/WSL_E_DISTRO_NOT_FOUND: there is no WSL distro named Debian")
    assert report["containers"] == []
    assert report["evidence"]["cuda"] == "unknown: cgpu could not probe the WSL session (see problems)"
    assert {api: entry["state"] for api, entry in report["apis"].items()} == {
        **dict.fromkeys(["cuda", "rocm", "vulkan", "opencl", "directml"], "unknown"),
        "metal": "absent",
    }


def test_missing_distro_utf16_message_when_wsl_utf8_is_ignored(fake_wsl):
    fake_wsl.state["ignores_wsl_utf8"] = True  # old inbox wsl.exe (Windows 10)
    fake_wsl.save()
    failed, report = probe(distro="Debian")
    assert failed and "WSL_E_DISTRO_NOT_FOUND" in messages(report)


def test_no_default_distro(fake_wsl):
    failed, report = probe()
    assert failed
    assert "without an error code" in messages(report)
    assert "no installed distributions" in messages(report)


def test_wsl_not_installed(fake_wsl):
    fake_wsl.state["installed"] = False
    fake_wsl.save()
    failed, report = probe(distro="Ubuntu")
    assert failed
    assert "WSL_E_WSL_OPTIONAL_COMPONENT_REQUIRED" in messages(report)
    assert "wsl.exe --install --no-distribution" in messages(report)


def test_no_wsl_exe(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CGPU_WSL_EXE", raising=False)
    failed, report = probe()
    assert failed
    assert "wsl.exe is not on PATH" in messages(report)
    if sys.platform == "win32":
        assert "wsl.exe --install" in messages(report)
    else:  # WSL is installed on Windows: advice to install it here would mislead
        assert "a WSL session on Windows" in messages(report) and "--install" not in messages(report)


def test_cgpu_wsl_exe_names_the_executable(fake_wsl, monkeypatch, tmp_path):
    fake_wsl.distro("Ubuntu", default=True).glibc().dxg().wsl_libs().intel()
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CGPU_WSL_EXE", str(fake_wsl.exe))
    failed, report = probe()
    assert not failed and report["containers"] == ["directml"]
    monkeypatch.setenv("CGPU_WSL_EXE", str(tmp_path / "nowhere" / "wsl.exe"))
    failed, report = probe()
    assert failed and "does not exist" in messages(report)


@pytest.mark.parametrize("name", ["--help", "Ubuntu 24.04", "a;b", "-d"])
def test_bad_distro_names_are_refused(fake_wsl, name):
    failed, report = probe(distro=name)
    assert failed and "is not a WSL distro name" in messages(report)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_hung_wsl_is_killed_at_the_timeout(fake_wsl):
    distro = fake_wsl.distro("Ubuntu")
    # A session that never answers, with a child of its own that must not outlive the call.
    distro.script("bin/sh", "/bin/busybox sleep 600 &\necho $! > /tmp/child\nwait\n")
    (failed, report), seconds = timed(lambda: probe(distro="Ubuntu", timeout=2))
    assert failed and "within 2 s and was stopped" in messages(report)
    assert_within(seconds, 2, interpreter_run, "a hung WSL session with timeout 2")
    child = int((distro.root / "tmp/child").read_text())
    wait_for(lambda: not _alive(child), within=30, what="the session's child to end")


def test_garbage_output(fake_wsl):
    distro = fake_wsl.distro("Ubuntu")
    distro.script("bin/sh", "printf '\\377\\376g\\000a\\200rbage\\n'\nexit 0\n")
    failed, report = probe(distro="Ubuntu")
    assert failed
    assert "the probe did not answer (exit 0)" in messages(report)


def test_corrupted_probe_output(fake_wsl):
    distro = fake_wsl.distro("Ubuntu").glibc().dxg()
    distro.script("bin/tr", "echo 'not hex \\377'\n")  # a broken tr inside the session
    failed, report = probe(distro="Ubuntu")
    assert failed
    assert "the probe's output was not understood: line 2 is not key=hex" in messages(report)


def test_cli_json_and_exit_status(fake_wsl, run_cli):
    fake_wsl.distro("Ubuntu", default=True).glibc().dxg().wsl_libs().nvidia()
    env = {"PATH": os.environ["PATH"], "FAKE_WSL_STATE": str(fake_wsl.state_file)}
    code, out, err = run_cli("probe", "--backend", "wsl", "--distro", "Ubuntu", "--json", env=env)
    assert code == 0, err
    report = json.loads(out)
    validate_report(report)
    assert report["backend"] == "wsl" and report["containers"] == ["cuda", "directml"]
    code, out, _ = run_cli("probe", "--backend", "wsl", "--distro", "Nope", "--json", env=env)
    assert code == 1 and "WSL_E_DISTRO_NOT_FOUND" in out
    code, _, err = run_cli("probe", "--backend", "wsl", "--verify", env=env)
    assert code == 2 and "--verify" in err


def test_distro_without_sh(fake_wsl):
    (fake_wsl.distro("Scratch").root / "bin/sh").unlink()
    failed, report = probe(distro="Scratch")
    assert failed
    assert "the probe did not answer (exit 1)" in messages(report) and "execvpe(sh) failed" in messages(report)


def test_a_probe_too_big_for_one_argument_is_not_sent(monkeypatch):
    from cgpu.report import ReportBuilder

    monkeypatch.setattr(backend, "MAX_LOCAL_PROBE", 10)
    report = ReportBuilder("wsl")
    assert backend._local_probe_source(report) is None
    [warning] = report.problems
    assert warning.source.endswith("standalone.py") and "too big" in warning.message
