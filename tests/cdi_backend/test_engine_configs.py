"""CRI-O's, podman's and Docker's configuration read as each release of the engine reads it (docs/cdi.md
"Engines: as installed and configured"): which files count and in which order, which settings are honoured,
the defaults, and the release rows of the old releases. The rules come from each engine's source at its tags
(cri-o `pkg/config`, containers/common `pkg/config`, podman `libpod`, moby `cmd/dockerd`); where the real
engine runs here (`dockerd --validate`), it is the oracle."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cgpu.engines import crio
from cgpu.engines.installed import Files
from cgpu.engines.registry import max_cdi_version
from tests.cdi_backend import engine_files as ef
from tests.cdi_backend.test_installed import judge, judged, nvidia_node

REAL_ENGINES = Path(os.environ.get("CGPU_REAL_ENGINES", Path.home() / ".cache/cgpu-real-engines"))


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))


def node_files(tmp_path: Path, files: dict[str, str]) -> Files:
    root = tmp_path / "node"
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    root.mkdir(exist_ok=True)
    return Files(str(root))


def shown(files: Files, *paths: str) -> list[str]:
    return [files.shown(path) for path in paths]


# --- CRI-O ------------------------------------------------------------------------------------------


def test_crio_reads_every_file_of_crio_conf_d_in_the_order_its_walk_takes_them(tmp_path: Path):
    """cri-o `UpdateFromPath` walks crio.conf.d with filepath.Walk: every file whatever its suffix (nvidia-ctk
    writes 99-nvidia.toml), names in byte order, a subfolder's files where its name sorts; crio.conf first."""
    files = node_files(
        tmp_path,
        {
            "/etc/crio/crio.conf": "[crio.runtime]\ncdi_spec_dirs = ['/main']\n",
            "/etc/crio/crio.conf.d/10-crio.conf": "[crio.runtime]\ncdi_spec_dirs = ['/ten']\n",
            "/etc/crio/crio.conf.d/50-site/gpu.conf": "[crio.runtime]\ncdi_spec_dirs = ['/site']\n",
            "/etc/crio/crio.conf.d/99-nvidia.toml": (
                '[crio.runtime]\ndefault_runtime = "nvidia"\n[crio.runtime.runtimes.nvidia]\n'
                'runtime_path = "/usr/bin/nvidia-container-runtime"\n'
            ),
            "/etc/crio/crio.conf.d/Z-last": "[crio.runtime]\ncdi_spec_dirs = ['/last']\n",
        },
    )
    (Path(files.root) / "etc/crio/crio.conf.d/60-empty").mkdir()
    config = crio.ENGINE.read_configuration(files.read_config, files.listdir, major=1, flavour="", on_host=False)
    assert config.files == shown(
        files,
        "/etc/crio/crio.conf",
        "/etc/crio/crio.conf.d/10-crio.conf",
        "/etc/crio/crio.conf.d/50-site/gpu.conf",
        "/etc/crio/crio.conf.d/99-nvidia.toml",
        "/etc/crio/crio.conf.d/Z-last",
    )
    assert config.spec_dirs == ["/last"] and config.defaulted == [] and config.problems == []
    assert config.default_runtime == "nvidia" and config.runtime_file == files.shown(
        "/etc/crio/crio.conf.d/99-nvidia.toml"
    )


def test_crio_without_cdi_spec_dirs_reads_the_defaults_and_says_so(tmp_path: Path):
    files = node_files(tmp_path, {"/etc/crio/crio.conf.d/10-crio.conf": "[crio.runtime]\nlog_level = 'info'\n"})
    config = crio.ENGINE.read_configuration(files.read_config, files.listdir, major=1, flavour="", on_host=False)
    assert config.files == shown(files, "/etc/crio/crio.conf.d/10-crio.conf")  # no crio.conf: skipped, as CRI-O does
    assert config.spec_dirs is None and config.defaulted == ["cdi_spec_dirs"] and config.enabled is True


def test_a_file_in_crio_conf_d_that_is_no_toml_stops_crio(tmp_path: Path):
    """A README left in crio.conf.d is decoded as TOML like any other file there: CRI-O does not start."""
    files = node_files(tmp_path, {"/etc/crio/crio.conf.d/README": "Drop your CRI-O settings here.\n"})
    config = crio.ENGINE.read_configuration(files.read_config, files.listdir, major=1, flavour="", on_host=False)
    assert [p.severity for p in config.problems] == ["error", "error"]
    assert config.problems[0].source == files.shown("/etc/crio/crio.conf.d/README")


def test_crio_with_nvidias_drop_in_and_its_version_from_the_package(tmp_path: Path):
    """A CRI-O whose build info names its CDI library but not its version (a source constant in CRI-O, never
    an -X flag): the version is the package's; `nvidia-ctk runtime configure --runtime=crio`'s drop-in counts."""
    root = nvidia_node(
        tmp_path,
        {
            "/usr/bin/crio": ef.elf_with_section(
                ef.blob(["mod\tgithub.com/cri-o/cri-o\t(devel)\t", f"dep\t{ef.CDI}\tv0.8.1\t"])
            ),
            "/var/lib/dpkg/status": ef.dpkg_stanza("cri-o", "1.31.4-1.1"),
            "/etc/crio/crio.conf.d/99-nvidia.toml": '[crio.runtime]\ndefault_runtime = "nvidia"\n',
        },
    )
    entry = judged(judge(root))
    assert (entry["name"], entry["version"], entry["cdi_library"]) == ("crio", "1.31.4", "v0.8.1")
    assert entry["nvidia_runtime"] is not None and entry["nvidia_runtime"]["runtime"] == "nvidia"


def test_crio_1_23_reads_no_cdi_and_1_24_is_the_first_row():
    """CRI-O's CDI support came in 1.24 (cri-o PR #5571); 1.23 vendors only podman's copy of a pre-release."""
    assert max_cdi_version("crio", "1.23.5") is None
    assert max_cdi_version("crio", "1.24.0") == "0.3.0"
