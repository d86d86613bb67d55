"""cgpu.backends.cdi.vulkan_icd against the rules read from Vulkan-Loader's source, and against the real loader
where this machine has one and a driver it can load (Debian's libvulkan1 and Mesa's lavapipe)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cgpu.backends.cdi import vulkan_icd

LAVAPIPE = Path("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json")

# Counts the physical devices the loader enumerates (0 when vkCreateInstance fails), and prints the
# loader's version; the manifests are chosen through VK_DRIVER_FILES.
COUNT_DEVICES = """
import ctypes
vk = ctypes.CDLL("libvulkan.so.1")
class App(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("name", ctypes.c_char_p), ("v", ctypes.c_uint32),
                ("engine", ctypes.c_char_p), ("ev", ctypes.c_uint32), ("api", ctypes.c_uint32)]
class Info(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("app", ctypes.POINTER(App)), ("layers", ctypes.c_uint32), ("layer_names", ctypes.c_void_p),
                ("extensions", ctypes.c_uint32), ("extension_names", ctypes.c_void_p)]
version = ctypes.c_uint32()
vk.vkEnumerateInstanceVersion(ctypes.byref(version))
app = App(0, None, b"cgpu-test", 0, b"cgpu-test", 0, 1 << 22)
instance, count = ctypes.c_void_p(), ctypes.c_uint32()
if vk.vkCreateInstance(ctypes.byref(Info(1, None, 0, ctypes.pointer(app), 0, None, 0, None)), None,
                       ctypes.byref(instance)) == 0:
    vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
    vk.vkDestroyInstance(instance, None)
print(count.value, version.value >> 22 & 0x7F, version.value >> 12 & 0x3FF, version.value & 0xFFF)
"""


def _manifest(library: str, **icd) -> dict:
    return {"file_format_version": "1.0.0", "ICD": {"library_path": library, **icd}}


def shapes(library: str) -> dict[str, str]:
    """Manifest texts naming `library`, one per rule of loader_parse_icd_manifest."""
    good = _manifest(library, api_version="1.1.230")
    return {
        "as Mesa writes it": json.dumps(good),
        "an unknown file_format_version": json.dumps({**good, "file_format_version": "1.0.2"}),
        "a number as api_version": json.dumps(_manifest(library, api_version=1.1)),
        "library_arch 64": json.dumps(_manifest(library, api_version="1.1.230", library_arch="64")),
        "four parts, variant 0": json.dumps(_manifest(library, api_version="0.1.1.230")),
        "four parts, variant 8 (falls off the 32 bits)": json.dumps(_manifest(library, api_version="8.1.1.0")),
        "no file_format_version": json.dumps({"ICD": good["ICD"]}),
        "no api_version": json.dumps(_manifest(library)),
        "variant 1": json.dumps(_manifest(library, api_version="1.1.1.230")),
        "major 128 (overflows into the variant)": json.dumps(_manifest(library, api_version="128.0.0")),
        "a portability driver": json.dumps(_manifest(library, api_version="1.1.230", is_portability_driver=True)),
        "library_arch 32": json.dumps(_manifest(library, api_version="1.1.230", library_arch="32")),
        "api_version twice, the first of variant 1": json.dumps(_manifest(library))[:-2]
        + ', "api_version": "1.1.1.230", "api_version": "1.1.230"}}',
        "file_format_version a number": json.dumps({**good, "file_format_version": 1}),
    }


TAKEN = {"as Mesa writes it", "an unknown file_format_version", "a number as api_version", "library_arch 64"}
TAKEN |= {"four parts, variant 0", "four parts, variant 8 (falls off the 32 bits)"}


@pytest.mark.parametrize("name", list(shapes("libx.so")))
def test_each_shape_is_judged_by_the_loaders_rule(name):
    document = vulkan_icd.load(shapes("libx.so")[name])
    assert vulkan_icd.library_path(document) == "libx.so"
    assert (vulkan_icd.skipped_because(document) is None) == (name in TAKEN)


def test_what_names_no_library():
    for text in ["{not json", "[]", '{"ICD": {}}', '{"ICD": {"library_path": ""}}', '{"ICD": {"library_path": 5}}']:
        document = vulkan_icd.load(text)
        assert vulkan_icd.library_path(document) is None
        assert vulkan_icd.skipped_because(document) == "it names no library (ICD.library_path)"


@pytest.mark.skipif(
    sys.platform != "linux" or not LAVAPIPE.is_file(), reason="needs Mesa's lavapipe (mesa-vulkan-drivers)"
)
def test_the_real_loader_takes_and_skips_the_same_manifests(tmp_path):
    library = json.loads(LAVAPIPE.read_text())["ICD"]["library_path"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VK_", "XDG_"))}
    env["XDG_CONFIG_DIRS"] = env["XDG_DATA_DIRS"] = str(tmp_path / "none")  # no other driver
    seen = {}
    for index, (name, text) in enumerate(shapes(library).items()):
        path = tmp_path / f"shape{index}.json"
        path.write_text(text)
        done = subprocess.run(
            [sys.executable, "-c", COUNT_DEVICES],
            env={**env, "VK_DRIVER_FILES": str(path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0 and "libvulkan.so.1" in done.stderr:
            pytest.skip("needs the Vulkan loader (libvulkan1)")
        count, *version = done.stdout.split()
        seen[name] = int(count) > 0
    loader = tuple(map(int, version))
    assert seen["as Mesa writes it"], "lavapipe does not load here at all"
    if loader < (1, 4, 304):  # older loaders read a file_format_version of any JSON type
        assert seen.pop("file_format_version a number")
    else:
        assert not seen.pop("file_format_version a number")
    assert {name for name, taken in seen.items() if taken} == TAKEN
