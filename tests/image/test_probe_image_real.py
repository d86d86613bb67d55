"""`probe --image` on real images built from Debian packages by scripts/image_roots.py, read through
every reference form: the podman store (a private one: CONTAINERS_STORAGE_CONF), oci-archive:,
docker-archive:, oci: and dir:. A missing image skips with the reason the build script gave."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cgpu.image.answer import with_image
from cgpu.image.needs import Node, api_checks, vendor_icds
from cgpu.image.source import open_image
from cgpu.model import Report
from tests.image.test_needs import KFD_NEED, driver, report


def _cache() -> Path:
    env = os.environ.get("CGPU_IMAGE_ROOTS")
    return Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cgpu-image-roots"


def _manifest() -> dict[str, Any]:
    try:
        return dict(json.loads((_cache() / "images.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


MANIFEST = _manifest()


def built(name: str) -> dict[str, Any]:
    entry = MANIFEST.get("images", {}).get(name)
    if not entry:
        pytest.skip(f"image {name}: not built here (run scripts/image_roots.py)")
    if "absent" in entry:
        pytest.skip(f"image {name}: {entry['absent']}")
    return dict(entry)


@pytest.fixture
def store(monkeypatch):
    """The build script's podman store, for the engine-storage reference form."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    monkeypatch.setenv("CONTAINERS_STORAGE_CONF", MANIFEST.get("storage_conf", ""))


def ref_of(name: str, form: str) -> str:
    entry = built(name)
    if form == "store":
        return str(entry["store"])
    if form == "dir":
        if "root" not in entry:
            pytest.skip(f"image {name} has no root folder")
        return f"dir:{entry['root']}"
    if form not in entry.get("archives", {}):
        pytest.skip(f"image {name} is not saved as {form}")
    return f"{form}:{entry['archives'][form]}"


FORMS = ("store", "oci-archive", "docker-archive", "oci", "dir")
# the node: provides cuda (driver 550: CUDA 12.4), vulkan and opencl, each with the tokens the cdi backend gives
NODE = report(
    {"cuda": ["glibc"], "vulkan": ["vulkan-loader"], "opencl": ["opencl-icd-loader", "ocl-icd-loader"]},
    driver=driver("550.54.15", "12.4"),
)
EXPECTED = {
    "glibc": {"cuda": "provided", "vulkan": "absent", "opencl": "absent"},
    "vulkan-loader": {"cuda": "provided", "vulkan": "provided", "opencl": "absent"},
    "opencl-loader": {"cuda": "provided", "vulkan": "absent", "opencl": "provided"},
    "musl": {"cuda": "absent", "vulkan": "absent", "opencl": "absent"},
    "cuda-12.4": {"cuda": "provided", "vulkan": "absent", "opencl": "absent"},
}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_image_through_each_reference_form(store, name, form):
    answer = with_image(NODE, ref_of(name, form))
    assert answer["image"]["status"] == "read", answer["problems"]
    got = {api: answer["apis"][api]["state"] for api in EXPECTED[name]}
    assert got == EXPECTED[name], answer["image"]["apis"]
    Report.model_validate(answer)


def test_musl_is_named_as_what_cuda_lacks(store):
    answer = with_image(NODE, ref_of("musl", "store"))
    assert "musl" in answer["image"]["apis"]["cuda"]["reason"] and "musl" in answer["evidence"]["cuda"]


def test_the_cuda_runtime_image_against_older_and_newer_drivers(store):
    ref = ref_of("cuda-12.4", "store")
    older = report({"cuda": ["glibc"]}, driver=driver("535.104.05", "12.2"))
    answer = with_image(older, ref)
    assert answer["apis"]["cuda"]["state"] == "absent"
    assert "CUDA 12.4 (NVIDIA_REQUIRE_CUDA" in answer["image"]["apis"]["cuda"]["reason"]
    newer = report({"cuda": ["glibc"]}, driver=driver("570.86.15", "12.8"))
    assert with_image(newer, ref)["apis"]["cuda"]["state"] == "provided"


@pytest.mark.parametrize(
    ("gpu", "state"), [("NVIDIA H100 80GB HBM3", "provided"), ("NVIDIA GeForce RTX 4090", "absent"), (None, "unknown")]
)
def test_cuda_compat_in_a_real_image_on_data_center_gpus_only(store, gpu, state):
    node = report({"cuda": ["glibc"]}, driver=driver("535.104.05", "12.2"))
    if gpu:
        node["devices"] = [
            {
                "name": gpu,
                "api": "cuda",
                "apis": ["cuda"],
                "status": "counted",
                "counted": True,
                "reason": "",
                "source": "",
            }
        ]
    answer = with_image(node, ref_of("cuda-12.8-compat", "store"))
    assert answer["apis"]["cuda"]["state"] == state, answer["image"]["apis"]["cuda"]


def test_mesa_radv_and_anv_from_debian(store):
    ref = ref_of("vulkan-mesa", "store")
    for vendor in ("AMD", "Intel"):
        node = report(
            {"vulkan": ["mesa-vulkan", "vulkan-loader"]}, evidence={"vulkan": f"gets renderD128 of an {vendor} GPU"}
        )
        assert with_image(node, ref)["apis"]["vulkan"]["state"] == "provided"
    nvk = report({"vulkan": ["mesa-nvk", "vulkan-loader"]})
    lacking = with_image(nvk, ref)
    assert lacking["apis"]["vulkan"]["state"] == "absent"  # bookworm's Mesa 22.3 has no NVK
    assert "NVK" in lacking["image"]["apis"]["vulkan"]["reason"]


def test_pocl_registers_its_vendor_icd_and_is_no_rocm_opencl(store):
    ref = ref_of("opencl-pocl", "store")
    with open_image(ref) as image:
        from cgpu.image.checks import Facts

        facts = Facts(image)
        assert any("pocl" in library for library in vendor_icds(facts).values())
        node = report({"opencl": ["rocm-opencl", "opencl-icd-loader"]})
        checks = {
            c.name: c.status
            for c in api_checks("opencl", ["rocm-opencl", "opencl-icd-loader"], None, facts, Node(node))
        }
    assert checks == {"rocm-opencl": "fail", "opencl-icd-loader": "pass"}


def test_debians_rocm_runtime_is_found_and_its_release_predates_the_matrix(store):
    node = report({"rocm": ["rocm-runtime"]}, evidence={"rocm": "gets /dev/kfd of an AMD GPU, target gfx90a (kfd)"})
    answer = with_image(node, ref_of("rocm", "store"))
    checks = {c["name"]: c for c in answer["image"]["apis"]["rocm"]["checks"]}
    assert checks["rocm-runtime"]["status"] == "pass" and "5.2.3" in checks["rocm-runtime"]["evidence"]
    assert checks["rocm-targets"]["status"] == "unknown"
    assert answer["apis"]["rocm"]["state"] == "unknown"


def test_the_images_user_and_groups_from_its_config_and_files(store):
    ref = ref_of("cuda-12.4-user", "store")
    node = report({"cuda": ["glibc"]}, driver=driver("570.86.15", "12.8"))
    node["apis"]["cuda"]["user_needs"] = [
        {"node": "/dev/dri/renderD128", "gids": [44], "groups": ["video"], "why": "0660 root:video"}
    ]
    answer = with_image(node, ref)
    assert answer["image"]["user"] == "app" and answer["apis"]["cuda"]["state"] == "provided"
    node["apis"]["cuda"]["user_needs"] = [KFD_NEED]
    refused = with_image(node, ref)
    assert refused["apis"]["cuda"]["state"] == "absent"
    assert "--group-add 993" in json.dumps(refused["image"]["apis"]["cuda"]["checks"])


def test_reading_an_image_in_the_local_store_takes_under_a_second(store):
    """Measured by the image section itself (reading and checking); a busy host may double it."""
    ref = ref_of("vulkan-mesa", "store")
    with_image(NODE, ref)  # the first read warms podman's own start-up
    seconds = min(with_image(NODE, ref)["image"]["seconds"] for _ in range(3))
    assert seconds < 2.0, seconds


def test_the_cli_json_has_the_image_section_only_with_image(store, tmp_path):
    argv = [sys.executable, "-m", "cgpu", "probe", "--json", "--backend", "cdi", "--spec-dir", str(tmp_path)]
    argv += ["--engine", "none"]
    plain = json.loads(subprocess.run(argv, capture_output=True, timeout=300, check=False).stdout)
    assert "image" not in plain
    done = subprocess.run([*argv, "--image", ref_of("glibc", "store")], capture_output=True, timeout=300, check=False)
    answer = json.loads(done.stdout)
    assert answer["image"]["status"] == "read" and answer["image"]["source"].startswith("podman image ")
    Report.model_validate(answer)
    bad = subprocess.run([*argv, "--image", "Bad::Ref"], capture_output=True, timeout=300, check=False)
    assert bad.returncode == 2 and b"--image" in bad.stderr
