"""Fixes that fix: the refresh units, Intel's generator, the release that fixes a generator bug (docs/cdi.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cgpu.backends.cdi import answer_scan
from cgpu.node.host import HostFS
from cgpu.report import ReportBuilder
from tests.cdi_backend.build import scan, spec
from tests.cdi_backend.helpers import make_host, probe
from tests.conftest import validate_report

UNITS = "/usr/lib/systemd/system"
SERVICE, PATH_UNIT = "nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"
VERSION = "580.82.07"
LIB = "/usr/lib/x86_64-linux-gnu"


def _nvidia_host(tmp_path: Path, units: tuple[str, ...] = (SERVICE, PATH_UNIT)) -> Path:
    root = make_host(
        tmp_path / "root",
        ["/dev/nvidiactl", "/dev/nvidia0", *(f"{UNITS}/{u}" for u in units)],
        nvidia_version=VERSION,
    )
    return root


def _no_spec(tmp_path: Path, root: Path) -> dict[str, Any]:
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    return probe([empty], root)


def test_no_spec_with_refresh_units_restarts_the_service(tmp_path: Path):
    root = _nvidia_host(tmp_path)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    os.symlink(f"{UNITS}/{PATH_UNIT}", wants / PATH_UNIT)
    report = _no_spec(tmp_path, root)
    assert "systemctl restart nvidia-cdi-refresh.service" in report["evidence"]["cuda"]
    assert "systemctl enable nvidia-cdi-refresh.service" in report["evidence"]["cuda"]
    warning = next(p for p in report["problems"] if p["kind"] == "no-spec" and p["severity"] == "warning")
    assert "systemctl restart nvidia-cdi-refresh.service" in warning["message"]
    assert report["cdi_refresh"] == {
        "units": [
            {"name": SERVICE, "file": f"{UNITS}/{SERVICE}", "state": "disabled"},
            {"name": PATH_UNIT, "file": f"{UNITS}/{PATH_UNIT}", "state": "enabled"},
        ],
        "output": "/var/run/cdi/nvidia.yaml",
    }


def test_masked_refresh_service_is_unmasked_first(tmp_path: Path):
    root = _nvidia_host(tmp_path)
    (root / "etc/systemd/system").mkdir(parents=True)
    os.symlink("/dev/null", root / "etc/systemd/system" / SERVICE)
    (root / "etc/nvidia-container-toolkit").mkdir(parents=True)
    (root / "etc/nvidia-container-toolkit/nvidia-cdi-refresh.env").write_text(
        "# comment\nNVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.yaml\n"
    )
    report = _no_spec(tmp_path, root)
    assert "systemctl unmask nvidia-cdi-refresh.service" in report["evidence"]["cuda"]
    assert report["cdi_refresh"]["units"][0]["state"] == "masked"
    assert report["cdi_refresh"]["output"] == "/etc/cdi/nvidia.yaml"


def test_no_refresh_units_keeps_the_generate_command(tmp_path: Path):
    report = _no_spec(tmp_path, _nvidia_host(tmp_path, units=()))
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in report["evidence"]["cuda"]
    assert report["cdi_refresh"] is None


def test_intel_gpu_without_a_spec_names_intels_generator(tmp_path: Path):
    root = make_host(tmp_path / "root", ["/sys/module/i915/version", "/dev/dri/renderD128"])
    report = _no_spec(tmp_path, root)
    assert "intel-cdi-specs-generator gpu" in report["evidence"]["vulkan"]
    assert any("intel-cdi-specs-generator" in p["message"] for p in report["problems"] if p["kind"] == "no-spec")


def _vulkan_spec(glx_folder: str) -> dict[str, Any]:
    glx = f"{glx_folder}/libGLX_nvidia.so.{VERSION}"
    mounts = [glx, "/etc/vulkan/icd.d/nvidia_icd.json"]
    return {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
        "containerEdits": {
            "deviceNodes": [{"path": "/dev/nvidiactl"}],
            "mounts": [{"hostPath": m, "containerPath": m, "options": ["ro", "bind"]} for m in mounts],
            "hooks": [
                {
                    "hookName": "createContainer",
                    "path": "/usr/bin/nvidia-cdi-hook",
                    "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", glx_folder],
                }
            ],
        },
    }


def _vulkan(tmp_path: Path, glx_folder: str, companions_on_host: bool) -> str:
    doc = _vulkan_spec(glx_folder)
    icd = json.dumps(
        {"file_format_version": "1.0.1", "ICD": {"library_path": "libGLX_nvidia.so.0", "api_version": "1.4.312"}}
    )
    paths = ["/dev/nvidiactl", "/dev/nvidia0", "/usr/bin/nvidia-cdi-hook", f"{glx_folder}/libGLX_nvidia.so.{VERSION}"]
    if companions_on_host:
        paths += [f"{LIB}/{stem}.so.{VERSION}" for stem in ("libnvidia-glcore", "libnvidia-tls", "libnvidia-glvkspirv")]
    root = make_host(tmp_path / "root", paths, files={"/etc/vulkan/icd.d/nvidia_icd.json": icd})
    report = ReportBuilder("cdi")
    answer_scan(report, scan(spec(doc)), HostFS(str(root)))
    built = report.build()
    validate_report(built)
    return str(built["evidence"]["vulkan"])


def test_libraries_the_generator_missed_name_the_release_that_finds_them(tmp_path: Path):
    """toolkit#1908: Debian's libcuda/libGLX in a sub-folder, glcore and tls in the triplet folder: the spec
    lacks them; nvidia-ctk 1.20.0 finds them."""
    evidence = _vulkan(tmp_path, f"{LIB}/nvidia/current", companions_on_host=True)
    assert "nvidia-ctk 1.20.0 or later" in evidence and "#1908" in evidence
    assert f"{LIB}/libnvidia-glcore.so.{VERSION}" in evidence


def test_libraries_the_host_lacks_keep_the_plain_regenerate(tmp_path: Path):
    evidence = _vulkan(tmp_path, f"{LIB}/nvidia/current", companions_on_host=False)
    assert "1.20.0" not in evidence and "regenerate the spec with `nvidia-ctk cdi generate`" in evidence
