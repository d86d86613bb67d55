"""The krunkit backend through a podman machine: `podman machine list/inspect` from a stand-in,
the probe image run through the real podman engine (its API socket, as a machine's is)."""

from __future__ import annotations

import json
import subprocess

import pytest

from cgpu.backends import run_backend
from cgpu.backends.krunkit import machine as machine_module
from tests.conftest import validate_report
from tests.krunkit.conftest import FORGED_VENUS, REAL_PODMAN

# Device entries as cgpu/gpu_probe/standalone.py writes them.
VENUS = {
    "name": "Virtio-GPU Venus (Apple M2 Pro)",
    "type": 1,
    "type_name": "INTEGRATED_GPU",
    "vendor_id": "0x106b",
    "device_id": "0xe0303ef",
    "api_version": "1.2.0",
    "driver_id": 22,
    "driver_id_name": "MESA_VENUS",
    "driver_name": "venus",
    "driver_info": "Mesa 25.3.6",
    "allocated": True,
    "counted": True,
    "reason": "Venus (virtio-gpu) forwarding the host's GPU; a 4096-byte host-visible allocation and map worked",
}
LLVMPIPE = {
    "name": "llvmpipe (LLVM 17.0.6, 128 bits)",
    "type": 4,
    "type_name": "CPU",
    "vendor_id": "0x10005",
    "device_id": "0x0",
    "driver_id": 13,
    "driver_id_name": "MESA_LLVMPIPE",
    "driver_name": "llvmpipe",
    "counted": False,
    "reason": "lavapipe/llvmpipe, Mesa's CPU software driver",
}
VENUS_NO_ALLOCATION = {
    **VENUS,
    "allocated": False,
    "counted": False,
    "allocation_error": "vkMapMemory failed with VK_ERROR_MEMORY_MAP_FAILED (-5)",
    "reason": "Venus enumerates but cannot allocate memory",
}
VENUS_ON_CPU = {
    **VENUS,
    "name": "Virtio-GPU Venus (llvmpipe (LLVM 18.1.6, 128 bits))",
    "type": 4,
    "type_name": "CPU",
    "counted": False,
    "reason": "lavapipe/llvmpipe, Mesa's CPU software driver",
}


def probe_output(*devices: dict, error: str | None = None, library: str | None = "libvulkan.so.1") -> str:
    counted = [d for d in devices if d.get("counted")]
    vulkan = {
        "available": bool(counted),
        "summary": f"{len(counted)} device(s)",
        "library": library,
        "error": error,
        "devices": list(devices),
        "stderr": "",
    }
    return json.dumps({"probe_version": 1, "platform": "linux-aarch64", "apis": {"vulkan": vulkan}})


def krunkit_report(**options):
    progress: list[str] = []
    builder = run_backend("krunkit", options, progress=progress.append)
    report = builder.build()
    validate_report(report)
    return report, builder.could_not_run, progress


def messages(report) -> str:
    return "\n".join(f"{p['severity']} {p['source']}: {p['message']}" for p in report["problems"])


@pytest.fixture
def libkrun_machine(machines, podman_api, monkeypatch):
    """A running libkrun machine whose API is the real podman service; its VM has a GPU
    (/dev/dri is mapped from /dev/null here, as this machine has none)."""
    machines({"Name": "gpu-vm", "VMType": "libkrun", "Running": True, "Default": True, "Socket": podman_api})
    monkeypatch.setattr(machine_module, "GPU_DEVICE", "/dev/null:/dev/dri/renderD128")
    return "gpu-vm"


def test_venus_that_allocates_gives_vulkan_and_is_cached(libkrun_machine, probe_images):
    image = probe_images("venus-ok", probe_output(VENUS, LLVMPIPE))
    report, failed, progress = krunkit_report(probe_image=image)
    assert not failed, messages(report)
    assert report["containers"] == ["vulkan"]
    assert "Virtio-GPU Venus (Apple M2 Pro)" in report["evidence"]["vulkan"]
    assert [d["apis"] for d in report["devices"]] == [["vulkan"], []]  # llvmpipe seen, never counted
    assert any("running the Venus probe" in p for p in progress)
    assert not any("cached" in p["message"] for p in report["problems"])

    again, failed, progress = krunkit_report(probe_image=image)
    assert not failed and again["containers"] == ["vulkan"]
    assert any("answer cached at" in p["message"] for p in again["problems"])
    assert not any("running the Venus probe" in p for p in progress)  # no container this time

    fresh, _, progress = krunkit_report(probe_image=image, refresh=True)
    assert fresh["containers"] == ["vulkan"]
    assert any("running the Venus probe" in p for p in progress)


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        pytest.param(probe_output(error="VK_ERROR_OUT_OF_HOST_MEMORY"), "stock Mesa", id="stock-mesa-oom"),
        pytest.param(probe_output(error="VK_ERROR_INITIALIZATION_FAILED"), "stock Mesa", id="stock-mesa-init"),
        pytest.param(probe_output(LLVMPIPE), "no Venus device", id="llvmpipe-only"),
        pytest.param(
            probe_output(VENUS_NO_ALLOCATION, LLVMPIPE), "cannot allocate memory", id="enumerates-no-allocation"
        ),
        pytest.param(probe_output(VENUS_ON_CPU), "software device of the host", id="venus-on-cpu"),
        pytest.param(probe_output(error="library_not_found", library=None), "no Vulkan loader", id="no-loader"),
        pytest.param(probe_output(error="VK_ERROR_INCOMPATIBLE_DRIVER"), "no Venus device", id="no-driver"),
    ],
)
def test_each_venus_failure_is_named_with_its_fix(libkrun_machine, probe_images, stdout, expected):
    image = probe_images(f"case-{abs(hash(stdout)) % 10**8}", stdout)
    report, failed, _ = krunkit_report(probe_image=image)
    assert not failed, messages(report)  # the backend ran: "no vulkan" is an answer
    assert report["containers"] == []
    assert expected in report["evidence"]["vulkan"]
    errors = [p for p in report["problems"] if p["severity"] == "error"]
    assert errors and errors[0]["source"] == f"probe image {image}"
    if expected != "software device of the host":
        assert "slp/mesa-libkrun-vulkan" in errors[0]["message"]
    else:
        assert "brew" in errors[0]["message"]


def test_vm_without_dev_dri_is_named(machines, podman_api, probe_images):
    # No mapping: the real podman refuses --device /dev/dri, as in a VM without virtio-gpu.
    machines({"Name": "gpu-vm", "VMType": "libkrun", "Running": True, "Socket": podman_api})
    report, failed, _ = krunkit_report(probe_image=probe_images("no-dri", probe_output(VENUS)))
    assert not failed and report["containers"] == []
    assert "has no /dev/dri" in report["evidence"]["vulkan"]
    assert "libkrun" in messages(report)


def test_applehv_machine_gets_no_gpu(machines, podman_api):
    machines(
        {"Name": "podman-machine-default", "VMType": "applehv", "Running": True, "Default": True, "Socket": podman_api}
    )
    report, failed, _ = krunkit_report()
    assert not failed and report["containers"] == []
    assert "applehv" in report["evidence"]["vulkan"]
    assert "CONTAINERS_MACHINE_PROVIDER=libkrun podman machine init" in messages(report)


def test_running_libkrun_machine_is_preferred(machines, podman_api, probe_images, monkeypatch):
    machines(
        {"Name": "old", "VMType": "applehv", "Running": False, "Default": True, "Socket": "/nonexistent"},
        {"Name": "gpu", "VMType": "libkrun", "Running": True, "Socket": podman_api},
    )
    monkeypatch.setattr(machine_module, "GPU_DEVICE", "/dev/null:/dev/dri/renderD128")
    report, failed, _ = krunkit_report(probe_image=probe_images("prefer", probe_output(VENUS)))
    assert not failed and report["containers"] == ["vulkan"]
    assert "podman machine gpu" in report["evidence"]["vulkan"]


def test_old_podman_without_all_providers(libkrun_machine, probe_images, monkeypatch):
    monkeypatch.setenv("FAKE_PODMAN_OLD", "1")
    report, failed, _ = krunkit_report(probe_image=probe_images("old-podman", probe_output(VENUS)))
    assert not failed and report["containers"] == ["vulkan"]


@pytest.mark.parametrize(
    ("listing", "option", "expected"),
    [
        pytest.param([], None, "no podman machine: create one", id="no-machine"),
        pytest.param(
            [{"Name": "gpu", "VMType": "libkrun", "Running": False, "Socket": "/x"}],
            None,
            "podman machine start gpu",
            id="stopped",
        ),
        pytest.param(
            [{"Name": "gpu", "VMType": "libkrun", "Running": True, "Socket": "/x"}],
            "other",
            "no podman machine named 'other' (machines: gpu (libkrun))",
            id="unknown-name",
        ),
        pytest.param(
            [{"Name": "gpu", "VMType": "libkrun", "Running": True, "Socket": "/nonexistent/api.sock"}],
            None,
            "does not answer",
            id="dead-api-socket",
        ),
    ],
)
def test_machine_problems_mean_the_backend_could_not_run(machines, listing, option, expected):
    machines(*listing)
    report, failed, _ = krunkit_report(machine=option) if option else krunkit_report()
    assert failed
    assert expected in messages(report)
    assert report["containers"] == []


def test_missing_probe_image_names_the_build(libkrun_machine):
    report, failed, _ = krunkit_report()  # the default image was never built here
    assert failed
    assert (
        "cgpu krunkit write-assets cgpu-venus-probe && "
        "podman --connection gpu-vm build -t localhost/cgpu-venus-probe:latest cgpu-venus-probe" in messages(report)
    )


def test_probe_that_prints_no_json(libkrun_machine, probe_images):
    report, failed, _ = krunkit_report(probe_image=probe_images("garbage", "Segmentation fault\n\xff", exit_code=139))
    assert failed
    assert "the probe gave no JSON (exit 139)" in messages(report)


def test_podman_missing(bin_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(bin_dir))  # only the krunkit stand-in
    report, failed, _ = krunkit_report()
    assert failed and "podman not found" in messages(report)
    monkeypatch.setenv("PATH", str(tmp_path))  # neither
    report, failed, _ = krunkit_report()
    assert failed and "brew tap slp/krun && brew trust slp/krun && brew install krunkit" in messages(report)


def test_krunkit_missing_without_a_libkrun_machine(machines, bin_dir, podman_api):
    (bin_dir / "krunkit").unlink()
    machines({"Name": "podman-machine-default", "VMType": "applehv", "Running": True, "Socket": podman_api})
    report, failed, _ = krunkit_report()
    assert failed
    assert "krunkit not found" in messages(report) and "brew install krunkit" in messages(report)
    assert "krunkit is not installed" in report["evidence"]["vulkan"]


def test_hung_probe_container_is_removed_from_the_vm(libkrun_machine, probe_images):
    image = probe_images("hangs", "", script="sleep 600")
    report, failed, _ = krunkit_report(probe_image=image, timeout=2)
    assert failed and "no answer within 2 s" in messages(report)
    left = subprocess.run(  # this run's image only: another suite on the host may be running its own probe
        [REAL_PODMAN, "ps", "-a", "--filter", f"ancestor={image}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
    )
    assert "cgpu-venus-probe-" not in left.stdout


def test_corrupt_cache_gives_a_warning_and_a_fresh_answer(libkrun_machine, probe_images, tmp_path):
    image = probe_images("corrupt-cache", probe_output(VENUS))
    krunkit_report(probe_image=image)
    (entry,) = (tmp_path / "cache" / "krunkit").glob("*.json")
    entry.write_bytes(b"{\x00 not json")
    report, failed, progress = krunkit_report(probe_image=image)
    assert not failed and report["containers"] == ["vulkan"]
    assert any(p["severity"] == "warning" and "corrupt" in p["message"] for p in report["problems"])
    assert any("running the Venus probe" in p for p in progress)
    assert json.loads(entry.read_text())["value"]["apis"]["vulkan"]["state"] == "provided"  # rewritten


def test_linux_says_what_is_missing(machines):
    report, failed, _ = krunkit_report()
    assert "krunkit exists only for macOS 14+ on Apple silicon" in messages(report)


def test_real_probe_in_a_real_container(libkrun_machine, real_probe_image):
    """cgpu's own probe with the image's python3, the real Vulkan loader, no Mesa at all: what an
    image without the libkrun Mesa build gets. Runs through the real podman engine. The image's
    entry point prints a forged "Venus works" answer: were it run, Vulkan would be provided."""
    report, failed, _ = krunkit_report(probe_image=real_probe_image)
    assert not failed, messages(report)
    assert report["containers"] == []
    assert "no Venus device" in report["evidence"]["vulkan"]
    assert "slp/mesa-libkrun-vulkan" in messages(report)
    assert FORGED_VENUS["name"] not in json.dumps(report)


def test_image_check_with_machine_runs_cgpus_probe_in_the_authors_image(libkrun_machine, real_probe_image, capsys):
    """`cgpu image check REF --machine NAME`: cgpu's probe runs inside the author's image, never
    the image's entry point (which here prints a forged "vulkan available" answer)."""
    from cgpu.cli import main

    code = main(["image", "check", real_probe_image, "--machine", libkrun_machine, "--json"])
    out = capsys.readouterr().out
    result = json.loads(out)
    assert result["status"] == "checked", result["problems"]
    assert result["verdict"] == "no" and code != 0
    assert FORGED_VENUS["name"] not in out and "forged" not in out
    found = "\n".join(p["message"] for p in result["problems"])
    assert "no Venus device in podman machine gpu-vm" in found  # what cgpu's probe saw: no driver at all


def test_probe_images_entry_point_is_never_run(libkrun_machine, probe_images):
    """The stand-in images answer through their python3; their entry point's forged answer is
    never what cgpu reads."""
    image = probe_images("entry-point", probe_output(LLVMPIPE))
    report, failed, _ = krunkit_report(probe_image=image)
    assert not failed and report["containers"] == []
    assert FORGED_VENUS["name"] not in json.dumps(report)
