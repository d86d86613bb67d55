"""The krunkit package's `__init__` only re-exports, each name loaded on first use: a command that
needs one module of the backend loads that one, not the whole backend."""

from __future__ import annotations

import json
import subprocess
import sys

# Run as a user would (`python -m cgpu ...`), then list the cgpu modules the run loaded.
_COUNT = """
import json, runpy, sys
code = None
sys.argv = ["cgpu", *sys.argv[1:]]
try:
    runpy.run_module("cgpu", run_name="__main__")
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if m == "cgpu" or m.startswith("cgpu."))}))
"""

# What the CLI imports for every command (cgpu, cgpu.cli, cgpu.backends, cgpu.options,
# cgpu.report, cgpu.problem, ...) and, of the backend, the package and image_files: the whole
# backend's `__init__` made the count 18 before the option table and the Problem type, 20 after.
CLI_CORE = {"cgpu", "cgpu.apis", "cgpu.backends", "cgpu.cli", "cgpu.clock", "cgpu.errors", "cgpu.options"}
CLI_CORE |= {"cgpu.problem", "cgpu.report", "cgpu.run", "cgpu.terminal", "cgpu.version"}
CLI_CORE |= {"cgpu.engines", "cgpu.engines.registry"}  # the engines' names, for --engine's help (no engine module)


def _loaded(*argv: str) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-c", _COUNT, *argv], capture_output=True, timeout=120, check=False)
    said = json.loads(done.stdout.decode().splitlines()[-1])
    return said["code"], said["modules"]


def test_write_assets_loads_only_the_build_context(tmp_path):
    code, modules = _loaded("krunkit", "write-assets", str(tmp_path / "assets"))
    assert code in (0, None)
    assert (tmp_path / "assets" / "Containerfile").is_file()
    backend = [m for m in modules if m.startswith("cgpu.backends.krunkit.")]
    assert backend == ["cgpu.backends.krunkit.image_files"], modules
    assert "cgpu.engines.client" not in modules and "cgpu.gpu_probe" not in modules
    assert set(modules) - CLI_CORE == {"cgpu.backends.krunkit", "cgpu.backends.krunkit.image_files"}, modules


def test_the_package_still_offers_the_backend():
    from cgpu.backends import krunkit

    assert callable(krunkit.probe) and callable(krunkit.judge)
    assert krunkit.DEFAULT_PROBE_IMAGE == "localhost/cgpu-venus-probe:latest"
    assert set(krunkit.__all__) <= set(dir(krunkit))
