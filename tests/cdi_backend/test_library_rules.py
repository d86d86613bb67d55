"""Which CDI library's reading judges an engine's specs: v1.1.1's (one-character vendors and classes,
`permissions: none`, a spec dir given as a link) for the releases that link it, v1.1.0's for the older ones;
and a release newer than every row is judged by the newest row with a warning that says so."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cgpu.cdi import versions
from cgpu.engines import containerd
from tests.cdi_backend import engine_files as ef
from tests.cdi_backend.helpers import HOSTS, SAMPLES, probe

CURRENT = SAMPLES / "nvidia-current/spec/nvidia.yaml"
ALL = ["cuda", "vulkan", "opencl"]


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize(
    ("library", "rules"),
    [
        ("v1.1.1", versions.LIBRARY_MAIN),
        ("v1.2.0", versions.LIBRARY_MAIN),
        ("v1.1.0", versions.LIBRARY),
        ("v0.8.1", versions.LIBRARY),
        ("v0.7.1/v0.7.2", versions.LIBRARY),  # a row's text, no one release
        (None, versions.LIBRARY),
        # containerd main (2026-08-22): after 078b4b1 (os.ReadDir), so all three of v1.1.1's rules
        ("v1.1.1-0.20260821104259-05ae4b5bb730", versions.LIBRARY_MAIN),
        # containerd v2.4.0-beta.0: PR #321 merged, os.ReadDir not yet
        ("v1.1.1-0.20260720132747-49ac08dcf160", versions.LIBRARY),
    ],
)
def test_the_reading_of_each_library_release(library: str | None, rules: str):
    assert versions.library_rules(library) == rules


def _linked_spec_dir(tmp_path: Path) -> Path:
    """The sample host, with the NVIDIA spec in a dir reached through a link (nvidia-ctk's dir on a node where
    /var/run/cdi is a link, as Debian's /var/run is)."""
    root = tmp_path / "node"
    shutil.copytree(HOSTS / "nvidia-580", root, symlinks=True)
    real = tmp_path / "specs"
    real.mkdir()
    shutil.copy(CURRENT, real / "nvidia.yaml")
    (tmp_path / "link").symlink_to(real)
    return root


@pytest.mark.parametrize(("engine", "reads_link"), [("containerd@2.4.0", True), ("containerd@2.3.4", False)])
def test_containerd_2_4_reads_a_linked_spec_dir_as_cdi_v1_1_1_does(tmp_path: Path, engine: str, reads_link: bool):
    root = _linked_spec_dir(tmp_path)
    report = probe([tmp_path / "link"], root, engine=engine)
    assert report["containers"] == (ALL if reads_link else [])
    assert bool(report["devices"]) is reads_link


def test_an_installed_engine_is_read_by_the_library_its_build_info_names(tmp_path: Path):
    root = _linked_spec_dir(tmp_path)
    for library, reads_link in (("v1.1.1", True), ("v1.1.0", False)):
        ef.node(root, {"/usr/bin/containerd": ef.upstream_containerd("v2.4.0", library)})
        report = probe([tmp_path / "link"], root, engine="auto")
        assert report["engines"][0]["cdi_library"] == library
        assert bool(report["devices"]) is reads_link, library


def test_a_release_newer_than_every_row_is_judged_by_the_newest_row_and_said(tmp_path: Path):
    root = _linked_spec_dir(tmp_path)
    report = probe([tmp_path / "link"], root, engine="containerd@2.5.0")
    assert report["containers"] == ALL  # the 2.4 row: CDI v1.1.1's reading
    warning = next(p for p in report["problems"] if p["source"] == "containerd 2.5.0")
    assert warning["severity"] == "warning" and "ends at 2.4" in warning["message"]
    assert "v1.1.1" in warning["message"]
    checked = probe([tmp_path / "link"], root, engine="containerd@2.4.1")
    assert not any(p["source"].startswith("containerd 2.4") for p in checked["problems"])


def test_docker_after_29_7_is_judged_by_its_newest_row_and_said():
    report = probe([SAMPLES / "nvidia-current/spec"], HOSTS / "nvidia-580", engine="docker@30.0.0")
    warning = next(p for p in report["problems"] if p["source"] == "docker 30.0.0")
    assert "ends at 29.7" in warning["message"] and "v1.1.0" in warning["message"]


def test_the_rows_extend_past_2_2_1():
    assert containerd.ENGINE.row_library("2.3.4") == "v1.1.0"
    assert containerd.ENGINE.row_library("2.4.0") == "v1.1.1"
    assert containerd.ENGINE.max_cdi_version("2.4.0") == "1.1.0"
