"""The probe image builder: its tag follows its inputs, and a host it can't build on is told why."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from cgpu.backends.cdi import probe_image
from cgpu.backends.cdi.probe_image import ImageBuildError, image_inputs, image_ref, linked_libraries


def test_tag_is_a_hash_of_the_package_versions():
    versions = {"libvulkan1": "1.3.239.0-1", "python3.11-minimal": "3.11.2-6"}
    ref = image_ref(versions)
    assert ref.startswith("localhost/cgpu-probe:") and len(ref.rsplit(":", 1)[1]) == 12
    assert image_ref(dict(reversed(list(versions.items())))) == ref
    assert image_ref({**versions, "libvulkan1": "1.3.239.0-2"}) != ref


def test_tag_changes_with_the_image_layout(monkeypatch):
    versions = {"libvulkan1": "1.3.239.0-1"}
    before = image_ref(versions)
    monkeypatch.setattr(probe_image, "LAYOUT_VERSION", "layout-after-a-change")
    assert image_ref(versions) != before


def test_missing_required_package_names_the_fix(monkeypatch):
    if shutil.which("dpkg-query") is None:
        pytest.skip("not a Debian/Ubuntu host")
    monkeypatch.setattr(probe_image, "REQUIRED", ("cgpu-test-no-such-package",))
    with pytest.raises(ImageBuildError) as caught:
        image_inputs(timeout=10)
    message = str(caught.value)
    assert "apt-get install cgpu-test-no-such-package" in message and "--probe-image" in message


def test_host_without_dpkg_is_told_to_bring_an_image(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ImageBuildError, match="no dpkg-query here; give --probe-image REF"):
        probe_image.installed_versions(("python3-minimal",), timeout=10)


def test_linked_libraries_include_the_loader_and_libc():
    python = os.path.realpath(sys.executable)  # a real ELF file, never a shell shim found on PATH
    if shutil.which("ldd") is None:
        pytest.skip("no ldd here")
    libraries = linked_libraries([python], timeout=10)
    assert any("ld-linux" in lib for lib in libraries)
    assert any(lib.endswith("/libc.so.6") for lib in libraries)
    assert linked_libraries([], timeout=10) == []
