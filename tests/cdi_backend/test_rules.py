"""The per-API rules on specs built directly, against small host trees."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cgpu.backends.cdi import answer_scan
from cgpu.backends.cdi.rules import DRM_NODE, KFD_NODE, NVIDIA_GPU_NODE
from cgpu.backends.cdi.view import hook_effects
from cgpu.cdi.model import Hook
from cgpu.node.host import HostFS
from cgpu.report import ReportBuilder
from tests.cdi_backend.build import scan, spec
from tests.cdi_backend.helpers import make_host
from tests.conftest import validate_report

LIB = "/usr/lib/x86_64-linux-gnu"
HOOK = "/usr/bin/nvidia-cdi-hook"
NODES = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"]
VK_ICD = json.dumps(
    {"file_format_version": "1.0.1", "ICD": {"library_path": "libGLX_nvidia.so.0", "api_version": "1.4.312"}}
)


def _mount(host: str, container: str | None = None) -> dict:
    return {"hostPath": host, "containerPath": container or host, "options": ["ro", "nosuid", "nodev", "bind"]}


def _hook(*args: str, path: str = HOOK) -> dict:
    return {"hookName": "createContainer", "path": path, "args": [os.path.basename(path), *args]}


def _nvidia(mounts: list[dict], hooks: list[dict] = (), env: list[str] = (), nodes: list[str] = NODES) -> dict:
    return {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": p} for p in nodes]}}],
        "containerEdits": {"mounts": list(mounts), "hooks": list(hooks), "env": list(env)},
    }


def _answer(doc: dict, root: Path) -> dict:
    report = ReportBuilder("cdi")
    answer_scan(report, scan(spec(doc)), HostFS(str(root)))
    built = report.build()
    validate_report(built)
    return built


def _host(tmp_path: Path, doc: dict, files: dict[str, str] | None = None) -> Path:
    paths = [n["path"] for d in doc["devices"] for n in d["containerEdits"].get("deviceNodes", [])]
    paths += [m["hostPath"] for m in doc["containerEdits"].get("mounts", [])]
    paths += [h["path"] for h in doc["containerEdits"].get("hooks", [])]
    return make_host(tmp_path / "root", paths, files=files)


def test_cuda_linkable_by_each_route(tmp_path: Path):
    lib = f"{LIB}/libcuda.so.580.82.07"
    routes = {
        "update-ldcache hook over": [_hook("update-ldcache", "--folder", LIB)],
        "by the create-symlinks hook": [
            _hook("create-symlinks", "--link", f"libcuda.so.580.82.07::{LIB}/libcuda.so.1")
        ],
        "linked as": [
            _hook(
                "hook",
                "create-symlinks",
                f"--link=libcuda.so.580.82.07::{LIB}/libcuda.so.1",
                path="/usr/bin/nvidia-ctk",
            )
        ],
    }
    for phrase, hooks in routes.items():
        doc = _nvidia([_mount(lib), _mount(f"{LIB}/libnvidia-ptxjitcompiler.so.580.82.07")], hooks)
        assert _answer(doc, _host(tmp_path / phrase.replace(" ", "_"), doc))["containers"] == ["cuda"], phrase
    as_soname = _nvidia([_mount(lib, f"{LIB}/libcuda.so.1")])
    report = _answer(as_soname, _host(tmp_path / "soname", as_soname))
    assert report["containers"] == ["cuda"] and "mounted as libcuda.so.1" in report["evidence"]["cuda"]
    unrelated = _nvidia(
        [_mount(lib)],
        [
            _hook("update-ldcache", "--folder", "/opt/elsewhere"),
            _hook("create-symlinks", "--link", f"libcuda.so.1::{LIB}/libcuda.so"),
        ],
    )
    report = _answer(unrelated, _host(tmp_path / "none", unrelated))
    assert report["containers"] == [] and "nothing makes libcuda.so.580.82.07 loadable" in report["evidence"]["cuda"]


def test_cuda_needs_every_nvidia_node(tmp_path: Path):
    doc = _nvidia(
        [_mount(f"{LIB}/libcuda.so.580.82.07")],
        [_hook("update-ldcache", "--folder", LIB)],
        nodes=["/dev/nvidiactl", "/dev/nvidia0"],
    )
    report = _answer(doc, _host(tmp_path, doc))
    assert report["containers"] == [] and "no /dev/nvidia-uvm" in report["evidence"]["cuda"]


def test_vulkan_icd_through_env_and_the_env_replacing_search_dirs(tmp_path: Path):
    lib = f"{LIB}/libGLX_nvidia.so.580.82.07"
    glx = [
        _mount(f"{LIB}/{stem}.so.580.82.07") for stem in ("libnvidia-glcore", "libnvidia-tls", "libnvidia-glvkspirv")
    ]
    mounts = [_mount(lib), *glx, _mount("/usr/share/vulkan/icd.d/nvidia_icd.json", "/opt/nv/icd.json")]
    hooks = [_hook("update-ldcache", "--folder", LIB)]
    files = {"/usr/share/vulkan/icd.d/nvidia_icd.json": VK_ICD}
    outside = _nvidia(mounts, hooks)
    report = _answer(outside, _host(tmp_path / "a", outside, files))
    assert "vulkan" not in report["containers"] and "no Vulkan ICD manifest" in report["evidence"]["vulkan"]
    named = _nvidia(mounts, hooks, env=["VK_DRIVER_FILES=/opt/nv/icd.json"])
    report = _answer(named, _host(tmp_path / "b", named, files))
    assert "vulkan" in report["containers"] and "/opt/nv/icd.json" in report["evidence"]["vulkan"]
    # VK_DRIVER_FILES replaces the search dirs: a manifest in /etc/vulkan/icd.d is then ignored.
    elsewhere = _nvidia(
        [_mount(lib), _mount("/usr/share/vulkan/icd.d/nvidia_icd.json", "/etc/vulkan/icd.d/nv.json")],
        hooks,
        env=["VK_DRIVER_FILES=/opt/other.json"],
    )
    report = _answer(elsewhere, _host(tmp_path / "c", elsewhere, files))
    assert "vulkan" not in report["containers"]


def test_vulkan_icd_naming_another_library_does_not_count(tmp_path: Path):
    lib = f"{LIB}/libGLX_nvidia.so.580.82.07"
    doc = _nvidia(
        [_mount(lib), _mount("/usr/share/vulkan/icd.d/nvidia_icd.json", "/etc/vulkan/icd.d/nvidia_icd.json")],
        [_hook("update-ldcache", "--folder", LIB)],
    )
    other = json.dumps({"ICD": {"library_path": "libvulkan_radeon.so"}})
    report = _answer(doc, _host(tmp_path / "a", doc, {"/usr/share/vulkan/icd.d/nvidia_icd.json": other}))
    assert "vulkan" not in report["containers"]
    broken = _answer(doc, _host(tmp_path / "b", doc, {"/usr/share/vulkan/icd.d/nvidia_icd.json": "{not json"}))
    assert "vulkan" not in broken["containers"]


def test_opencl_through_ocl_icd_filenames(tmp_path: Path):
    lib = f"{LIB}/libnvidia-opencl.so.580.82.07"
    doc = _nvidia([_mount(lib)], [_hook("update-ldcache", "--folder", LIB)], env=[f"OCL_ICD_FILENAMES={lib}"])
    report = _answer(doc, _host(tmp_path, doc))
    assert report["containers"] == ["opencl"] and f"OCL_ICD_FILENAMES={lib}" in report["evidence"]["opencl"]


def test_opencl_icd_from_a_mounted_vendors_dir(tmp_path: Path):
    lib = f"{LIB}/libnvidia-opencl.so.580.82.07"
    doc = _nvidia([_mount(lib), _mount("/etc/OpenCL/vendors")], [_hook("update-ldcache", "--folder", LIB)])
    root = make_host(
        tmp_path / "root", [*NODES, lib, HOOK], files={"/etc/OpenCL/vendors/nvidia.icd": "libnvidia-opencl.so.1\n"}
    )
    report = _answer(doc, root)
    assert report["containers"] == ["opencl"]


def test_render_nodes_by_vendor(tmp_path: Path):
    def render_only(kind: str, vendor: str | None) -> dict:
        doc = {
            "cdiVersion": "0.5.0",
            "kind": kind,
            "devices": [
                {
                    "name": "0",
                    "containerEdits": {"deviceNodes": [{"path": "/dev/dri/renderD128"}, {"path": "/dev/kfd"}]},
                }
            ],
        }
        root = make_host(
            tmp_path / f"{kind}-{vendor}",
            ["/dev/dri/renderD128", "/dev/kfd"],
            render={"renderD128": vendor} if vendor else None,
        )
        return _answer(doc, root)

    assert render_only("amd.com/gpu", None)["containers"] == ["rocm", "vulkan", "opencl"]
    assert "by the spec kind amd.com/gpu" in render_only("amd.com/gpu", None)["evidence"]["rocm"]
    assert render_only("example.com/gpu", "0x1002")["containers"] == ["rocm", "vulkan", "opencl"]
    unknown = render_only("example.com/gpu", "0x1234")
    assert unknown["containers"] == [] and "vendor 0x1234" in unknown["evidence"]["vulkan"]
    venus = render_only("example.com/gpu", "0x1af4")  # virtio-gpu: Vulkan through the image's Venus driver
    assert venus["containers"] == ["vulkan"]
    assert venus["apis"]["vulkan"]["image_needs"] == ["mesa-venus", "vulkan-loader"]
    nvidia = render_only("example.com/gpu", "0x10de")
    assert nvidia["containers"] == [] and "no NVIDIA user-space driver" in nvidia["evidence"]["vulkan"]
    # sysfs wins over the kind: an "amd.com" spec whose node is an Intel GPU
    intel = render_only("amd.com/gpu", "0x8086")
    assert intel["containers"] == ["vulkan", "opencl"] and "rocm" not in intel["containers"]


def test_directml_needs_dxg_dxcore_and_d3d12(tmp_path: Path):
    wsl = "/usr/lib/wsl/lib"
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "microsoft.com/gpu",
        "devices": [
            {"name": "dxg", "containerEdits": {"deviceNodes": [{"path": "/dev/dxg"}], "mounts": [_mount(wsl)]}}
        ],
    }
    store = "/usr/lib/wsl/drivers/nvmdi.inf_amd64_0123456789abcdef"
    libraries = [f"{wsl}/libdxcore.so", f"{wsl}/libd3d12.so", f"{wsl}/libd3d12core.so"]
    root = make_host(tmp_path / "root", ["/dev/dxg", *libraries, f"{store}/libcuda.so.1.1", f"{store}/libnvwgf2umx.so"])
    report = _answer(doc, root)  # only /usr/lib/wsl/lib: no driver store, no user-mode driver
    assert report["containers"] == [] and "driver-store folder" in report["evidence"]["directml"]
    doc["devices"][0]["containerEdits"]["mounts"].append(_mount("/usr/lib/wsl/drivers"))
    report = _answer(doc, root)
    assert report["containers"] == ["directml"]
    assert "libdxcore.so, libd3d12.so, libd3d12core.so" in report["evidence"]["directml"]


def test_software_drivers_never_count_on_the_real_host(tmp_path: Path):
    """Mesa's lavapipe and PoCL as installed on this machine, mounted through CDI."""
    icd = (
        next((p for p in Path("/usr/share/vulkan/icd.d").glob("lvp_icd*.json")), None)
        if Path("/usr/share/vulkan/icd.d").is_dir()
        else None
    )
    if icd is None or not Path("/etc/OpenCL/vendors/pocl.icd").exists():
        import pytest

        pytest.skip("needs mesa-vulkan-drivers (lavapipe) and pocl-opencl-icd installed")
    library = json.loads(icd.read_text())["ICD"]["library_path"]
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "example.com/gpu",
        "devices": [
            {
                "name": "cpu",
                "containerEdits": {
                    "mounts": [
                        _mount(str(icd), f"/etc/vulkan/icd.d/{icd.name}"),
                        _mount(library),
                        _mount("/etc/OpenCL/vendors/pocl.icd"),
                    ]
                },
            }
        ],
    }
    report = _answer(doc, Path("/"))
    assert report["containers"] == []
    assert "lavapipe" in report["evidence"]["vulkan"] and "PoCL" in report["evidence"]["opencl"]


def test_tmpfs_mount_is_not_a_host_path(tmp_path: Path):
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "vendor.com/device",
        "devices": [
            {
                "name": "x",
                "containerEdits": {"mounts": [{"hostPath": "tmpfs", "containerPath": "/scratch", "type": "tmpfs"}]},
            }
        ],
    }
    report = _answer(doc, make_host(tmp_path / "root"))
    assert report["devices"][0]["status"] == "ok" and report["problems"] == []


def test_answers_follow_host_changes_between_calls(tmp_path: Path):
    lib = f"{LIB}/libcuda.so.580.82.07"
    mounts = [_mount(lib), _mount(f"{LIB}/libnvidia-ptxjitcompiler.so.580.82.07")]
    doc = spec(_nvidia(mounts, [_hook("update-ldcache", "--folder", LIB)]))
    root = _host(tmp_path, _nvidia(mounts, [_hook("update-ldcache", "--folder", LIB)]))

    def containers() -> list[str]:
        report = ReportBuilder("cdi")
        answer_scan(report, scan(doc), HostFS(str(root)))
        return report.build()["containers"]

    assert containers() == ["cuda"]
    assert containers() == ["cuda"]  # answered from memory
    (root / lib.lstrip("/")).unlink()
    assert containers() == []
    (root / lib.lstrip("/")).touch()
    assert containers() == ["cuda"]


@given(st.lists(st.text(max_size=30), max_size=12), st.text(max_size=20))
def test_hook_arguments_never_break_the_reading(args: list[str], path: str):
    effects = hook_effects(
        (Hook("createContainer", path or "/x", tuple(args)), Hook("createContainer", HOOK, ("nvidia-cdi-hook", *args)))
    )
    assert all(link.startswith("/") for link in effects.links)
    assert all(folder.startswith("/") for folder in effects.ld_folders)


def test_engine_auto_under_a_sample_root_judges_by_that_root_not_the_host():
    """The sample hosts have no engine installed: the newest rules judge, whatever this host runs."""
    from tests.cdi_backend.helpers import HOSTS, SAMPLES, probe

    report = probe([SAMPLES / "nvidia-1.17/spec"], HOSTS / "nvidia-575", engine="auto")
    assert report["containers"] == ["cuda", "vulkan"]
    newer = probe([SAMPLES / "nvidia-current/spec"], HOSTS / "nvidia-580", engine="auto")
    assert newer["containers"] == ["cuda", "vulkan", "opencl"]
    assert newer["engines"] == []
    assert any(p["source"] == "--engine auto" and "installed under" in p["message"] for p in newer["problems"])


_PATHS = st.sampled_from(
    [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia0",
        "/dev/dri/renderD128",
        "/dev/kfd",
        "/dev/dxg",
        f"{LIB}/libcuda.so.1",
        f"{LIB}/libGLX_nvidia.so.1.2",
        "/etc/vulkan/icd.d/x.json",
        "/etc/OpenCL/vendors/x.icd",
        "relative/path",
        "/",
        "/..",
        "/a/../../b",
        "",
    ]
)


@given(
    st.fixed_dictionaries(
        {
            "deviceNodes": st.lists(
                st.fixed_dictionaries(
                    {"path": _PATHS},
                    optional={
                        "hostPath": _PATHS,
                        "type": st.sampled_from(["c", "b", "p", "u"]),
                        "major": st.integers(0, 300),
                        "permissions": st.sampled_from(["rwm", "none"]),
                    },
                ),
                max_size=4,
            ),
            "mounts": st.lists(
                st.fixed_dictionaries(
                    {"hostPath": _PATHS, "containerPath": _PATHS}, optional={"type": st.sampled_from(["bind", "tmpfs"])}
                ),
                max_size=4,
            ),
            "hooks": st.lists(
                st.fixed_dictionaries(
                    {
                        "hookName": st.just("createContainer"),
                        "path": _PATHS,
                        "args": st.lists(st.one_of(_PATHS, st.text(max_size=40)), max_size=6),
                    }
                ),
                max_size=3,
            ),
            "env": st.lists(
                st.sampled_from(
                    [
                        "VK_DRIVER_FILES=/etc/vulkan/icd.d",
                        "OCL_ICD_VENDORS=/",
                        "OCL_ICD_FILENAMES=libcuda.so.1:",
                        "LD_PRELOAD=x",
                        "A B=1",
                    ]
                ),
                max_size=3,
            ),
        }
    ),
    st.sampled_from(["nvidia.com/gpu", "amd.com/gpu", "intel.com/gpu", "example.com/gpu"]),
)
def test_any_edits_get_an_answer(edits: dict, kind: str):
    doc = {"cdiVersion": "0.5.0", "kind": kind, "devices": [{"name": "0", "containerEdits": edits}]}
    report = ReportBuilder("cdi")
    answer_scan(report, scan(spec(doc)), HostFS("/"))
    validate_report(report.build())


def _manifest(**icd) -> dict:
    return {"file_format_version": "1.0.1", "ICD": {"library_path": "libGLX_nvidia.so.0", **icd}}


# Vulkan-Loader loader/loader.c loader_parse_icd_manifest: the manifests it takes and those it skips.
MANIFESTS_TAKEN = {
    "as nvidia-ctk mounts it": json.dumps(_manifest(api_version="1.4.312")),
    "an unknown file_format_version (only logged)": json.dumps(
        {**_manifest(api_version="1.4.312"), "file_format_version": "1.0.2"}
    ),
    "a number as api_version (read as a version)": json.dumps(_manifest(api_version=1.3)),
    "library_arch 64": json.dumps(_manifest(api_version="1.4.312", library_arch="64")),
    "a four-part api_version of variant 0": json.dumps(_manifest(api_version="0.1.4.312")),
    "variant 8, which the 32-bit shift drops": json.dumps(_manifest(api_version="8.1.3.0")),
    "is_portability_driver false": json.dumps(_manifest(api_version="1.4.312", is_portability_driver=False)),
}
MANIFESTS_SKIPPED = {
    "no file_format_version": (
        json.dumps({"ICD": _manifest(api_version="1.4.312")["ICD"]}),
        "it has no file_format_version",
    ),
    "file_format_version not a string": (
        json.dumps({**_manifest(api_version="1.4.312"), "file_format_version": 1}),
        "its file_format_version is not a string",
    ),
    "no api_version": (json.dumps(_manifest()), "its ICD has no api_version"),
    "variant 1": (json.dumps(_manifest(api_version="1.1.3.0")), 'its api_version "1.1.3.0" has variant 1'),
    "a major version that overflows into the variant": (
        json.dumps(_manifest(api_version="128.0.0")),
        'its api_version "128.0.0" has variant 1',
    ),
    "a portability driver": (
        json.dumps(_manifest(api_version="1.4.312", is_portability_driver=True)),
        "it sets is_portability_driver",
    ),
    "library_arch 32": (
        json.dumps(_manifest(api_version="1.4.312", library_arch="32")),
        'its library_arch is "32", and a 64-bit process',
    ),
    "api_version given twice, the first of variant 1 (cJSON takes the first)": (
        '{"file_format_version": "1.0.1", "ICD": {"library_path": "libGLX_nvidia.so.0", '
        '"api_version": "1.1.3.0", "api_version": "1.4.312"}}',
        "has variant 1",
    ),
}


def _vulkan_doc(manifests: dict[str, str]) -> tuple[dict, dict[str, str]]:
    lib = f"{LIB}/libGLX_nvidia.so.580.82.07"
    glx = [
        _mount(f"{LIB}/{stem}.so.580.82.07") for stem in ("libnvidia-glcore", "libnvidia-tls", "libnvidia-glvkspirv")
    ]
    icds = [_mount(f"/host/{name}", f"/etc/vulkan/icd.d/{name}") for name in manifests]
    doc = _nvidia([_mount(lib), *glx, *icds], [_hook("update-ldcache", "--folder", LIB)])
    return doc, {f"/host/{name}": text for name, text in manifests.items()}


@pytest.mark.parametrize("text", MANIFESTS_TAKEN.values(), ids=MANIFESTS_TAKEN)
def test_vulkan_manifests_the_loader_takes(tmp_path: Path, text: str):
    doc, files = _vulkan_doc({"nvidia_icd.json": text})
    report = _answer(doc, _host(tmp_path, doc, files))
    assert "vulkan" in report["containers"]
    assert "/etc/vulkan/icd.d/nvidia_icd.json naming libGLX_nvidia.so.0" in report["evidence"]["vulkan"]


@pytest.mark.parametrize(("text", "why"), MANIFESTS_SKIPPED.values(), ids=MANIFESTS_SKIPPED)
def test_vulkan_manifests_the_loader_skips(tmp_path: Path, text: str, why: str):
    doc, files = _vulkan_doc({"nvidia_icd.json": text})
    report = _answer(doc, _host(tmp_path / "skipped", doc, files))
    assert "vulkan" not in report["containers"]
    evidence = report["evidence"]["vulkan"]
    assert "the Vulkan ICD /etc/vulkan/icd.d/nvidia_icd.json names it, but the loader skips that manifest" in evidence
    assert why in evidence and "mount the driver's own nvidia_icd.json" in evidence
    # a manifest the loader takes beside it registers the driver
    doc, files = _vulkan_doc({"a_skipped.json": text, "nvidia_icd.json": MANIFESTS_TAKEN["as nvidia-ctk mounts it"]})
    assert "vulkan" in _answer(doc, _host(tmp_path / "beside", doc, files))["containers"]


@pytest.mark.parametrize(
    ("version", "variant"),
    [
        ("1.4.312", 0),
        ("0.1.4.312", 0),
        ("1.1.3.0", 1),
        ("7.1.0.0", 7),
        ("8.1.0.0", 0),
        ("128.0.0", 1),
        ("1.128.0.0", 1),
        ("255.0.0", 1),
        ("65536.0.0", 0),
        ("-1.0.0", 7),
        ('"1".2', 0),
        ("", 0),
        ("x.y.z.w", 0),
    ],
)
def test_api_version_variant_as_the_loader_parses_it(version, variant):
    from cgpu.backends.cdi.vulkan_icd import api_version_variant

    assert api_version_variant(version) == variant


@given(
    st.builds(
        "".join,
        st.lists(
            st.sampled_from(["/dev/", "nvidia", "dri/", "card", "renderD", "kfd", "0", "12", "٣", "x", "-"]), max_size=6
        ),
    )
)
def test_node_paths_are_the_regexes_they_stand_for(path: str):
    assert NVIDIA_GPU_NODE.fullmatch(path) == bool(re.fullmatch(r"/dev/nvidia\d+", path))
    assert DRM_NODE.fullmatch(path) == bool(re.fullmatch(r"/dev/dri/(card|renderD)\d+", path))
    assert KFD_NODE.fullmatch(path) == (path == "/dev/kfd")
