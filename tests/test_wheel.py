"""What a pip user gets: the wheel carries the krunkit build context, the probe and the LICENSE."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_a_wheel_installed_with_pip_writes_the_krunkit_build_context(tmp_path):
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed: it builds the wheel")
    subprocess.run(
        [uv, "build", "--wheel", "-o", tmp_path / "dist", REPO], check=True, capture_output=True, timeout=300
    )
    (wheel,) = (tmp_path / "dist").glob("cgpu-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    subprocess.run([sys.executable, "-m", "venv", tmp_path / "venv"], check=True, timeout=120)
    python = tmp_path / "venv/bin/python"
    # --no-deps: the assets need none of cgpu's dependencies, and the test needs no index
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel], check=True, timeout=300)
    out = tmp_path / "context"
    done = subprocess.run(
        [tmp_path / "venv/bin/cgpu", "krunkit", "write-assets", out], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert (out / "Containerfile").read_text() == (REPO / "krunkit/Containerfile").read_text()
    assert "python3" in (out / "Containerfile").read_text()  # what cgpu runs its own probe with
    assert (out / "guest/cgpu-probe.sh").stat().st_mode & 0o111
    again = subprocess.run([tmp_path / "venv/bin/cgpu", "krunkit", "write-assets", out], capture_output=True, text=True)
    assert again.returncode == 1 and "already has Containerfile" in again.stderr  # nothing overwritten
