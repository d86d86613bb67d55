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
    samples = tmp_path / "samples"  # what the README's first command runs on
    done = subprocess.run([tmp_path / "venv/bin/cgpu", "samples", samples], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _tree(samples) == _tree(REPO / "cdi-samples")


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_samples_writes_what_the_readme_runs_on(tmp_path, run_cli):
    code, out, err = run_cli("samples", str(tmp_path / "s"))
    assert code == 0 and out.startswith("wrote ") and _tree(tmp_path / "s") == _tree(REPO / "cdi-samples"), err
    first = out.split("try: ", 1)[1].split()
    done = run_cli(*first[1:], "--brief")
    assert done == (0, "cuda,vulkan,opencl\n", "")
    assert run_cli("samples", str(tmp_path / "s"))[0] == 1  # nothing overwritten
