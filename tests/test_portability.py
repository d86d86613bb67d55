"""cgpu runs on Linux, Windows and macOS: every module must import where POSIX-only modules
are missing (platform-specific imports live inside the code that needs them)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO

IMPORT_ALL = """
import sys
for blocked in ("fcntl", "termios", "pwd", "grp", "resource", "msvcrt", "winreg"):
    sys.modules[blocked] = None  # `import fcntl` now raises ImportError, as on Windows
import pkgutil, importlib, cgpu
names = [m.name for m in pkgutil.walk_packages(cgpu.__path__, "cgpu.") if m.name != "cgpu.__main__"]
for name in names:
    importlib.import_module(name)
print(len(names))
"""


def test_every_module_imports_without_posix_only_modules():
    proc = subprocess.run([sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 20  # the walk really found the package's modules


def test_cli_path_imports_no_heavy_package(tmp_path):
    """The agent calls cgpu often: the CDI path must not pay for pydantic, docker or podman, nor, once
    the node's specs are in the disk cache (writing it takes tempfile), for shutil (with bz2, lzma and
    zlib: 7.5M instructions, which argparse's own help formatter would import)."""
    code = (
        "import sys; from cgpu.cli import main; main(['probe', '--backend', 'cdi', '--spec-dir', "
        "'cdi-samples/nvidia-current/spec', '--root', 'cdi-samples/hosts/nvidia-580', '--json']); "
        "heavy = [m for m in ('pydantic', 'docker', 'podman', 'requests', 'shutil') if m in sys.modules]; "
        "sys.stderr.write(repr(heavy))"
    )
    env = {**os.environ, "CGPU_CACHE_DIR": str(tmp_path / "cache")}
    # the first run on the node writes the cache (tempfile may take shutil), the next only reads it
    for allowed in (("[]", "['shutil']"), ("[]",)):
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, env=env
        )
        assert proc.returncode == 0
        assert proc.stderr.strip().endswith(allowed), proc.stderr


def test_json_nested_deeper_than_python_walks_is_garbage_not_a_crash():
    """Probe output from a container, a VM or a WSL session is untrusted: `[[[[...` is just garbage."""
    from cgpu.backends.cdi.verify import _read_probe
    from cgpu.gpu_probe.answer import read_answer, read_child_answer
    from cgpu.report import ReportBuilder

    deep = b'{"a":' + b"[" * 100_000
    assert read_child_answer(deep, "directml", source="wsl") is None
    assert read_answer(deep, source="vm").unusable
    assert isinstance(_read_probe(ReportBuilder("cdi"), "vendor.com/gpu=0", deep), str)
