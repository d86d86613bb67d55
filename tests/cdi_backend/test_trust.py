"""False grants, false denials and wrong advice found by checking the rules against the generators'
and loaders' sources (docs/cdi.md names the source of each rule). Every case starts from a spec of
the real generator's shape (the samples) on a fake host tree built like cdi-samples/hosts/."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.cdi_backend.helpers import HOSTS, NVRM_580, SAMPLES, probe

LIB = "/usr/lib/x86_64-linux-gnu"
V580 = "580.82.07"


def _sample(name: str) -> dict[str, Any]:
    (path,) = (SAMPLES / name / "spec").iterdir()
    return yaml.safe_load(path.read_text())


def _host(tmp_path: Path, sample_host: str = "nvidia-580", name: str = "root") -> Path:
    root = tmp_path / name
    shutil.copytree(HOSTS / sample_host, root, symlinks=True)
    return root


def _run(tmp_path: Path, spec: dict[str, Any], root: Path, **options: Any) -> dict[str, Any]:
    folder = tmp_path / f"specs-{len(list(tmp_path.glob('specs-*')))}"
    folder.mkdir()
    (folder / "spec.json").write_text(json.dumps(spec))
    return probe([folder], root, **options)


def _without_mount(spec: dict[str, Any], *names: str) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    edits = spec["containerEdits"]
    edits["mounts"] = [m for m in edits["mounts"] if os.path.basename(m["hostPath"]) not in names]
    return spec


def _mount(host: str, container: str | None = None) -> dict[str, Any]:
    return {"hostPath": host, "containerPath": container or host, "options": ["ro", "nosuid", "nodev", "bind"]}


def _drop_links(spec: dict[str, Any], soname: str) -> dict[str, Any]:
    """The spec without the create-symlinks link that makes `soname`."""
    spec = copy.deepcopy(spec)
    for hook in spec["containerEdits"]["hooks"]:
        args = hook["args"]
        if "create-symlinks" in args:
            kept = [args[0], "create-symlinks"]
            pairs = [args[i + 1] for i, a in enumerate(args) if a == "--link"]
            for pair in pairs:
                if not pair.endswith("/" + soname):
                    kept += ["--link", pair]
            hook["args"] = kept
    return spec


def test_the_unmodified_sample_is_the_baseline(tmp_path: Path):
    report = _run(tmp_path, _sample("nvidia-current"), _host(tmp_path))
    assert report["containers"] == ["cuda", "vulkan", "opencl"]
    assert report["apis"]["cuda"]["image_needs"] == ["glibc"]
    assert report["apis"]["vulkan"]["image_needs"] == ["glibc", "vulkan-loader"]
    assert report["apis"]["opencl"]["image_needs"] == ["glibc", "opencl-icd-loader"]


# --- false grants ---------------------------------------------------------------------------------


def test_grant1_vulkan_needs_what_libglx_nvidia_loads(tmp_path: Path):
    root = _host(tmp_path)
    for missing in ("libnvidia-glvkspirv", "libnvidia-glcore", "libnvidia-tls", "libnvidia-gpucomp"):
        report = _run(tmp_path, _without_mount(_sample("nvidia-current"), f"{missing}.so.{V580}"), root)
        assert "vulkan" not in report["containers"], missing
        assert f"{missing}.so.{V580}" in report["evidence"]["vulkan"]
    # A driver that ships no gpucomp (older branches): the spec cannot mount it and need not.
    os.unlink(root / f"usr/lib/x86_64-linux-gnu/libnvidia-gpucomp.so.{V580}")
    report = _run(tmp_path, _without_mount(_sample("nvidia-current"), f"libnvidia-gpucomp.so.{V580}"), root)
    assert "vulkan" in report["containers"]


def test_grant2_usr_local_etc_is_no_vulkan_search_dir(tmp_path: Path):
    spec = _sample("nvidia-current")
    for mount in spec["containerEdits"]["mounts"]:
        if mount["containerPath"] == "/etc/vulkan/icd.d/nvidia_icd.json":
            mount["containerPath"] = "/usr/local/etc/vulkan/icd.d/nvidia_icd.json"
    report = _run(tmp_path, spec, _host(tmp_path))
    assert "vulkan" not in report["containers"]
    assert "no Vulkan ICD manifest" in report["evidence"]["vulkan"]


def test_grant3_ocl_icd_filenames_works_only_with_the_khronos_loader(tmp_path: Path):
    spec = _without_mount(_sample("nvidia-current"), "nvidia.icd")
    spec["containerEdits"]["env"].append("OCL_ICD_FILENAMES=libnvidia-opencl.so.1")
    report = _run(tmp_path, spec, _host(tmp_path))
    assert "opencl" in report["containers"]
    assert report["apis"]["opencl"]["image_needs"] == ["glibc", "khronos-opencl-loader"]
    assert "ocl-icd" in report["evidence"]["opencl"]


def test_grant4_an_icd_file_whose_first_line_is_blank_names_nothing(tmp_path: Path):
    root = _host(tmp_path)
    (root / "etc/OpenCL/vendors/nvidia.icd").write_text("\nlibnvidia-opencl.so.1\n")
    report = _run(tmp_path, _sample("nvidia-current"), root)
    assert "opencl" not in report["containers"]
    (root / "etc/OpenCL/vendors/nvidia.icd").write_text("libnvidia-opencl.so.1\n# a comment\n")
    report = _run(tmp_path, _sample("nvidia-current"), root)  # ocl-icd reads the first line; Khronos the whole file
    assert report["apis"]["opencl"]["image_needs"] == ["glibc", "ocl-icd-loader"]


def test_grant5_wsl_cuda_needs_dxcore_and_the_driver_store_loaders(tmp_path: Path):
    root = _host(tmp_path, "wsl")
    assert _run(tmp_path, _sample("nvidia-wsl"), root)["containers"] == ["cuda"]
    for missing in ("libdxcore.so", "libcuda_loader.so", "libnvdxgdmal.so.1"):
        report = _run(tmp_path, _without_mount(_sample("nvidia-wsl"), missing), root)
        assert report["containers"] == [], missing
        assert missing in report["evidence"]["cuda"]


def test_grant6_directml_needs_d3d12core_and_the_vendors_user_mode_driver(tmp_path: Path):
    root = _host(tmp_path, "wsl")
    for name in ("libd3d12.so", "libd3d12core.so"):
        (root / "usr/lib/wsl/lib" / name).touch()
    spec = _sample("nvidia-wsl")
    spec["containerEdits"]["mounts"] += [_mount("/usr/lib/wsl/lib/libd3d12.so")]
    report = _run(tmp_path, spec, root)
    assert "directml" not in report["containers"]
    assert "libd3d12core.so" in report["evidence"]["directml"] and "libnvwgf2umx.so" in report["evidence"]["directml"]


def test_grant7_a_soname_link_in_lib64_needs_a_libc_that_searches_it(tmp_path: Path):
    spec = _drop_links(_sample("nvidia-current"), "libcuda.so.1")
    spec["containerEdits"]["hooks"] = [h for h in spec["containerEdits"]["hooks"] if "update-ldcache" not in h["args"]]
    spec["containerEdits"]["hooks"].append(
        {
            "hookName": "createContainer",
            "path": "/usr/bin/nvidia-cdi-hook",
            "args": [
                "nvidia-cdi-hook",
                "create-symlinks",
                "--link",
                f"{LIB}/libcuda.so.{V580}::/usr/lib64/libcuda.so.1",
            ],
        }
    )
    report = _run(tmp_path, spec, _host(tmp_path))
    assert "cuda" in report["containers"]
    assert report["apis"]["cuda"]["image_needs"] == ["glibc", "lib64-search"]
    for hook in spec["containerEdits"]["hooks"]:  # the same link where no libc looks: not loadable at all
        hook["args"] = [a.replace("/usr/lib64/", "/opt/nvidia/") for a in hook["args"]]
    assert "cuda" not in _run(tmp_path, spec, _host(tmp_path, name="opt"))["containers"]


def test_grant8_kernel_module_and_user_space_driver_must_agree(tmp_path: Path):
    root = _host(tmp_path)
    (root / "proc/driver/nvidia/version").write_text(NVRM_580.replace(V580, "575.64.03"))
    report = _run(tmp_path, _sample("nvidia-current"), root)
    assert report["containers"] == []
    [mismatch] = [p for p in report["problems"] if "mismatch" in p["message"]]
    assert mismatch["severity"] == "error"
    assert V580 in mismatch["message"] and "575.64.03" in mismatch["message"] and "reboot" in mismatch["message"]
    assert "regenerate" not in mismatch["message"]  # the files are current: the module is what is old


def test_grant9_on_the_real_root_a_device_node_must_be_a_device(tmp_path: Path):
    fake = tmp_path / "nvidia0"
    fake.touch()
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "example.com/gpu",
        "devices": [
            {"name": "fake", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": str(fake)}]}},
            {"name": "null", "containerEdits": {"deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/null"}]}},
        ],
    }
    report = _run(tmp_path, spec, "/")
    statuses = {d["name"]: d["status"] for d in report["devices"]}
    assert statuses["example.com/gpu=fake"] == "blocked" and statuses["example.com/gpu=null"] != "blocked"
    assert any("is not a device file on the host" in p["message"] for p in report["problems"])
    # Under --root the trees hold stand-in files: existence is what counts there (documented).
    root = tmp_path / "root"
    (root / str(fake).lstrip("/")).parent.mkdir(parents=True)
    (root / str(fake).lstrip("/")).touch()
    (root / "dev").mkdir()
    (root / "dev/null").touch()
    assert all(d["status"] != "blocked" for d in _run(tmp_path, spec, root)["devices"])


# --- false denials --------------------------------------------------------------------------------


def test_denial1_jetson_csv_spec_gives_cuda_and_vulkan(tmp_path: Path):
    report = probe([SAMPLES / "jetson-xavier/spec"], HOSTS / "jetson-xavier")
    assert report["containers"] == ["cuda", "vulkan"]
    assert "/dev/nvmap" in report["evidence"]["cuda"] and "libcuda.so.1.1" in report["evidence"]["cuda"]
    assert not report["problems"]


def test_denial2_venus_and_nouveau_render_nodes_give_vulkan_from_the_images_mesa(tmp_path: Path):
    venus = probe([SAMPLES / "docker-desktop-venus/spec"], HOSTS / "docker-desktop")
    assert venus["containers"] == ["vulkan"]
    assert venus["apis"]["vulkan"]["image_needs"] == ["mesa-venus", "vulkan-loader"]
    root = _host(tmp_path, "intel")
    (root / "sys/class/drm/renderD128/device/vendor").write_text("0x10de\n")
    drivers = root / "sys/bus/pci/drivers/nouveau"
    drivers.mkdir(parents=True)
    (root / "sys/class/drm/renderD128/device/driver").symlink_to(drivers)
    nvk = _run(tmp_path, _sample("intel"), root)
    assert nvk["containers"] == ["vulkan"]
    assert nvk["apis"]["vulkan"]["image_needs"] == ["mesa-nvk", "vulkan-loader"]


def test_denial3_an_icd_reached_through_the_specs_own_env(tmp_path: Path):
    root = _host(tmp_path)
    for env, target in (
        ("XDG_DATA_DIRS=/opt/share", "/opt/share/vulkan/icd.d/nvidia_icd.json"),
        ("XDG_CONFIG_DIRS=/opt/config", "/opt/config/vulkan/icd.d/nvidia_icd.json"),
        ("VK_DRIVER_FILES=/opt/icd.json", "/opt/icd.json"),
        ("VK_ICD_FILENAMES=/opt/icd.json", "/opt/icd.json"),
        ("VK_ADD_DRIVER_FILES=/opt/icd.json", "/opt/icd.json"),
    ):
        spec = _sample("nvidia-current")
        for mount in spec["containerEdits"]["mounts"]:
            if mount["containerPath"] == "/etc/vulkan/icd.d/nvidia_icd.json":
                mount["containerPath"] = target
        spec["containerEdits"]["env"].append(env)
        report = _run(tmp_path, spec, root)
        assert "vulkan" in report["containers"], env
        assert target in report["evidence"]["vulkan"]


def test_denial4_opencl_through_ocl_icd_variables(tmp_path: Path):
    root = _host(tmp_path)
    moved = _sample("nvidia-current")
    for mount in moved["containerEdits"]["mounts"]:
        if mount["containerPath"] == "/etc/OpenCL/vendors/nvidia.icd":
            mount["containerPath"] = "/opt/vendors/nvidia.icd"
    moved["containerEdits"]["env"].append("OPENCL_VENDOR_PATH=/opt/vendors")
    report = _run(tmp_path, moved, root)
    assert "opencl" in report["containers"]
    assert report["apis"]["opencl"]["image_needs"] == ["glibc", "ocl-icd-loader"]
    named = _without_mount(_sample("nvidia-current"), "nvidia.icd")
    named["containerEdits"]["env"].append("OCL_ICD_VENDORS=libnvidia-opencl.so.1")
    report = _run(tmp_path, named, root)
    assert "opencl" in report["containers"] and "OCL_ICD_VENDORS=libnvidia-opencl.so.1" in report["evidence"]["opencl"]
    assert "nothing names" not in report["evidence"]["opencl"]


def test_denial5_libraries_inside_a_directory_mount_are_found(tmp_path: Path):
    """ramalama mounts the whole /usr/lib/wsl tree."""
    root = _host(tmp_path, "wsl")
    store = "/usr/lib/wsl/drivers/nvmdi.inf_amd64_978a3b585e321cd9"
    for name in ("lib/libd3d12.so", "lib/libd3d12core.so", f"drivers/{os.path.basename(store)}/libnvwgf2umx.so"):
        (root / "usr/lib/wsl" / name).touch()
    spec = {
        "cdiVersion": "0.3.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/dxg"}]}}],
        "containerEdits": {
            "mounts": [_mount("/usr/lib/wsl")],
            "hooks": [
                {
                    "hookName": "createContainer",
                    "path": "/usr/bin/nvidia-cdi-hook",
                    "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", store, "--folder", "/usr/lib/wsl/lib"],
                }
            ],
        },
    }
    report = _run(tmp_path, spec, root)
    assert report["containers"] == ["cuda", "directml"]
    assert "mount /usr/lib/wsl/lib" not in json.dumps(report)


# --- advice ---------------------------------------------------------------------------------------


def test_advice_kfd_listed_but_missing_on_the_host_is_the_driver(tmp_path: Path):
    root = _host(tmp_path, "amd")
    os.unlink(root / "dev/kfd")
    spec = _sample("amd")
    for device in spec["devices"]:  # a node with type and major: the engine creates it, the container starts
        for node in device["containerEdits"]["deviceNodes"]:
            if node["path"] == "/dev/kfd":
                node.update(type="c", major=235, minor=0)
    for entry in spec.get("containerEdits", {}).get("deviceNodes", []):
        if entry["path"] == "/dev/kfd":
            entry.update(type="c", major=235, minor=0)
    report = _run(tmp_path, spec, root)
    assert "rocm" not in report["containers"]
    assert "add /dev/kfd to the device" not in report["evidence"]["rocm"]
    assert "the host has none" in report["evidence"]["rocm"]


def test_advice_a_driver_without_a_spec_gets_the_generate_command(tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    report = probe([empty], _host(tmp_path))
    command = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
    assert command in report["evidence"]["cuda"]
    assert any(command in p["message"] for p in report["problems"])
    amd = probe([empty], _host(tmp_path, "amd", name="amd"))
    assert "amd-ctk cdi generate" in amd["evidence"]["rocm"]
    wsl = probe([empty], _host(tmp_path, "wsl", name="wsl"))
    assert "nvidia-ctk cdi generate --mode=wsl" in wsl["evidence"]["cuda"]
    assert "generate" not in probe([empty], _host(tmp_path, "software", name="sw"))["evidence"]["cuda"]


def test_advice_a_spec_without_its_driver_says_so(tmp_path: Path):
    root = _host(tmp_path)  # the driver unloaded: no version files, no /dev/nvidia* nodes
    shutil.rmtree(root / "proc")
    shutil.rmtree(root / "sys/module/nvidia")
    for node in (root / "dev").glob("nvidia*"):
        if node.is_file():
            node.unlink()
    report = _run(tmp_path, _sample("nvidia-current"), root)
    messages = " ".join(p["message"] for p in report["problems"])
    assert "NVIDIA kernel driver is not loaded" in messages and "regenerating the spec does not help" in messages
    assert "regenerate it here" not in messages
