"""DirectML/D3D12 on WSL through fake DXCore libraries, with /dev/dxg made to exist in a private
mount namespace (root only: the probe looks at the real /dev/dxg path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.probe.conftest import PROBE, clean_env

# In a private mount namespace: a tmpfs over /dev holding null/zero/urandom (bound from the real
# /dev, kept at $1) and an empty /dev/dxg; then the probe. Nothing leaves the namespace.
WITH_DXG = """set -e
mount --rbind /dev "$1"
mount -t tmpfs tmpfs /dev
for node in null zero random urandom; do touch "/dev/$node"; mount --bind "$1/$node" "/dev/$node"; done
touch /dev/dxg
shift
exec "$@"
"""


def directml_with_dxg(tmp_path, library_dir, adapters: str = "") -> dict:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to give the probe a /dev/dxg in a private mount namespace")
    old_dev = tmp_path / "dev"
    old_dev.mkdir()
    env = clean_env(LD_LIBRARY_PATH=str(library_dir), FAKE_DXCORE_ADAPTERS=adapters)
    proc = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            WITH_DXG,
            "sh",
            str(old_dev),
            sys.executable,
            str(PROBE),
            "--api",
            "directml",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    if proc.returncode != 0 and "mount" in proc.stderr:
        pytest.skip(f"cannot make a private mount namespace here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["apis"]["directml"]


@pytest.fixture(scope="module")
def fake_wsl_libs(build, tmp_path_factory):
    """libdxcore.so and libd3d12.so side by side, as in /usr/lib/wsl/lib."""
    folder = tmp_path_factory.mktemp("wsl-lib")
    for name in ("libdxcore.so", "libd3d12.so"):
        shutil.copy(build("fake_dxcore.c", name), folder / name)
    return folder


def test_hardware_adapter_counts_and_warp_does_not(tmp_path, fake_wsl_libs):
    result = directml_with_dxg(
        tmp_path, fake_wsl_libs, "1,0x10de,0x2335,NVIDIA H200;0,0x1414,0x8c,Microsoft Basic Render Driver"
    )
    assert result["available"] is True
    assert result["library"] == str(fake_wsl_libs / "libd3d12.so")
    h200, warp = result["devices"]
    assert (h200["name"], h200["vendor_id"], h200["counted"]) == ("NVIDIA H200", "0x10de", True)
    assert (warp["counted"], warp["hardware"]) == (False, False) and "WARP" in warp["reason"]
    assert "leaked" not in result["stderr"]  # every COM reference the probe took was released


def test_only_warp_is_not_available(tmp_path, fake_wsl_libs):
    result = directml_with_dxg(tmp_path, fake_wsl_libs, "0,0x1414,0x8c,Microsoft Basic Render Driver")
    assert result["available"] is False and result["error"] is None
    assert "no hardware" in result["summary"]


def test_dxg_without_d3d12_library_names_the_mount(tmp_path, build):
    result = directml_with_dxg(tmp_path, build("fake_dxcore.c", "libdxcore.so").parent)
    assert result["error"] == "library_not_found"
    assert "libd3d12.so" in result["summary"] and "/usr/lib/wsl/lib" in result["summary"]
