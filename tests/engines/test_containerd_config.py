"""containerd's configuration as the real containerd reads it: `containerd config dump` of the unpacked 1.7 and
2.x (scripts/real_engines.py) is the oracle for cgpu's reading of every config shape below, `enable_cdi` and
`cdi_spec_dirs` compared (a config the real one refuses must be an error in cgpu's reading too).

1.7 replaces a plugin's whole table on import and reads a file without `version` as version 1 (short ids);
2.x merges imports key by key and migrates versions 1 and 2 to 3. Where a suite's containerd is not unpacked,
the tests skip with the reason.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cgpu.cdi.scan import DEFAULT_SPEC_DIRS
from cgpu.engines import containerd
from cgpu.engines.base import parse_engine_version
from tests.engines import harness

pytestmark = pytest.mark.engines

DUMP_SECONDS = 30
CRI2 = '[plugins."io.containerd.grpc.v1.cri"]'
RUNTIME3 = "[plugins.'io.containerd.cri.v1.runtime']"
NVIDIA_RUNTIME = (  # what `nvidia-ctk runtime configure --drop-in` writes: it names the CRI plugin's table
    f'version = 2\n{CRI2[:-1]}.containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'
)
MAIN_V2 = f'version = 2\nimports = ["conf.d/*.toml"]\n{CRI2}\nenable_cdi = true\ncdi_spec_dirs = ["/main"]\n'

# name -> the files (config.toml is the main one), the shapes tests write elsewhere and nvidia-ctk writes
SHAPES: dict[str, dict[str, str]] = {
    "no-version-v2-table": {"config.toml": f'{CRI2}\nenable_cdi = true\ncdi_spec_dirs = ["/opt/cdi"]\n'},
    "no-version-short-id": {"config.toml": '[plugins.cri]\nenable_cdi = true\ncdi_spec_dirs = ["/opt/v1"]\n'},
    "v2-plain": {"config.toml": f'version = 2\n{CRI2}\nenable_cdi = true\ncdi_spec_dirs = ["/opt/v2"]\n'},
    "v2-import-touching-cri": {
        "config.toml": MAIN_V2,
        "conf.d/99-nvidia.toml": NVIDIA_RUNTIME,
    },
    "v2-import-not-touching-cri": {
        "config.toml": MAIN_V2,
        "conf.d/10-opt.toml": 'version = 2\n[plugins."io.containerd.internal.v1.opt"]\npath = "/opt/containerd"\n',
    },
    "v2-spec-dirs-in-main-and-import": {
        "config.toml": f'version = 2\nimports = ["imp.toml"]\n{CRI2}\nenable_cdi = true\ncdi_spec_dirs = ["/main"]\n',
        "imp.toml": f'version = 2\n{CRI2}\ncdi_spec_dirs = ["/imp"]\n',
    },
    "v2-enable-cdi-in-import": {
        "config.toml": f'version = 2\nimports = ["imp.toml"]\n{CRI2}\ncdi_spec_dirs = ["/main"]\n',
        "imp.toml": f"version = 2\n{CRI2}\nenable_cdi = true\n",
    },
    "v2-import-of-an-import": {
        "config.toml": 'version = 2\nimports = ["a.toml"]\n',
        "a.toml": f'version = 2\nimports = ["b.toml"]\n{CRI2}\nenable_cdi = true\ncdi_spec_dirs = ["/a"]\n',
        "b.toml": f'version = 2\n{CRI2}\ncdi_spec_dirs = ["/b"]\n',
    },
    "no-version-main-v2-import": {
        "config.toml": 'imports = ["imp.toml"]\n',
        "imp.toml": f'version = 2\n{CRI2}\nenable_cdi = true\ncdi_spec_dirs = ["/imp"]\n',
    },
    "v2-main-short-id-import": {
        "config.toml": 'version = 2\nimports = ["imp.toml"]\n',
        "imp.toml": '[plugins.cri]\nenable_cdi = false\ncdi_spec_dirs = ["/imp"]\n',
    },
    "v3": {"config.toml": f"version = 3\n{RUNTIME3}\nenable_cdi = false\ncdi_spec_dirs = ['/v3']\n"},
    "v3-main-v2-import": {
        "config.toml": f"version = 3\nimports = ['imp.toml']\n{RUNTIME3}\ncdi_spec_dirs = ['/main']\n",
        "imp.toml": f'version = 2\n{CRI2}\nenable_cdi = false\ncdi_spec_dirs = ["/imp"]\n',
    },
    "v3-import-off": {
        "config.toml": f"version = 3\nimports = ['imp.toml']\n{RUNTIME3}\ncdi_spec_dirs = ['/main']\n",
        "imp.toml": f"version = 3\n{RUNTIME3}\nenable_cdi = false\n",
    },
}


def _containerd(suite: str) -> tuple[str, tuple[int, ...]]:
    """The suite's unpacked containerd and its release; skips with the reason where there is none."""
    found, reason = harness.manifest()
    if found is None:
        pytest.skip(reason)
    binary = found.get("suites", {}).get(suite, {}).get("binaries", {}).get("containerd")
    if binary is None or not os.access(binary, os.X_OK):
        pytest.skip(f"suite {suite}'s containerd is not unpacked here (run scripts/real_engines.py)")
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=DUMP_SECONDS)
    match = re.search(r"\s(\d+\.\d+\.\d+)", containerd.ENGINE.version_text(done.stdout))
    assert match, done.stdout
    return binary, parse_engine_version(match.group(1))


def _dump(binary: str, config: Path) -> dict[str, Any] | None:
    """The real containerd's `enable_cdi` and `cdi_spec_dirs`; None where it refuses the config."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's tomllib reads the dump")
    done = subprocess.run(
        [binary, "--config", str(config), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=DUMP_SECONDS,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        return None
    plugins = tomllib.loads(done.stdout)["plugins"]
    for name in (containerd.CRI_RUNTIME, containerd.CRI_V2):  # the dump is version 3 (2.x) or 2 (1.7)
        if "enable_cdi" in plugins.get(name, {}):
            return {"enable_cdi": plugins[name]["enable_cdi"], "cdi_spec_dirs": plugins[name]["cdi_spec_dirs"]}
    raise AssertionError(f"no CRI table with enable_cdi in the dump:\n{done.stdout}")


def _cgpus_reading(config: Path, release: tuple[int, ...]) -> tuple[dict[str, Any] | None, Any]:
    def read(path: str) -> tuple[str | None, str | None, str]:
        return (Path(path).read_text(), None, path) if Path(path).is_file() else (None, None, path)

    def listdir(path: str) -> list[str]:
        return os.listdir(path) if os.path.isdir(path) else []

    found = containerd.read_config(read, listdir, str(config), release)
    if any(severity == "error" for severity, _, _ in found.problems):
        return None, found
    enabled = found.enabled if found.enabled is not None else release >= containerd.ENGINE.on_by_default_from
    dirs = found.spec_dirs if found.spec_dirs is not None else list(DEFAULT_SPEC_DIRS)
    return {"enable_cdi": enabled, "cdi_spec_dirs": dirs}, found


@pytest.mark.parametrize("suite", ["trixie", "sid"])  # containerd 1.7.24, 2.1.9
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_cgpu_reads_the_config_as_the_real_containerd_dumps_it(tmp_path: Path, suite: str, shape: str):
    binary, release = _containerd(suite)
    for name, text in SHAPES[shape].items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    config = tmp_path / "config.toml"
    real = _dump(binary, config)
    ours, read = _cgpus_reading(config, release)
    assert ours == real, f"containerd {release}: cgpu {ours}, containerd config dump {real}: {read.problems}"
    if ours is not None:  # every file read, in containerd's order; a setting no file sets is the default
        assert read.files[0] == str(config) and len(read.files) == len(SHAPES[shape])
        defaults = {"enable_cdi": release >= (2,), "cdi_spec_dirs": list(DEFAULT_SPEC_DIRS)}
        assert all(real[key] == defaults[key] for key in read.defaulted), read.defaulted
        assert set(read.defaulted) <= set(defaults) and len(set(read.defaulted)) == len(read.defaulted)
