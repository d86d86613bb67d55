"""The image rules of `probe --image` on hand-built roots and report dicts (cgpu.image.needs, cgpu.image.answer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgpu.apis import API_ORDER, IMAGE_NEEDS
from cgpu.image.answer import with_image
from cgpu.image.checks import Facts
from cgpu.image.fs import DirTree
from cgpu.image.needs import (
    TOKEN_CHECKS,
    Node,
    api_checks,
    api_verdict,
    cuda_needed,
    image_user,
    token_check,
    user_check,
)
from cgpu.image.source import OpenedImage
from cgpu.model import Report
from tests.image.trees import X86_64, elf

LIB = "usr/lib/x86_64-linux-gnu"


def put(root: Path, path: str, content: bytes | str = b"") -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content.encode() if isinstance(content, str) else content)


def glibc_root(root: Path) -> Path:
    put(root, f"{LIB}/libc.so.6", elf(X86_64))
    put(root, "etc/ld.so.conf.d/x86_64-linux-gnu.conf", f"/{LIB}\n")
    put(root, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n")
    put(root, "etc/group", "root:x:0:\nvideo:x:44:\nrender:x:993:\napp:x:1000:\n")
    return root


def facts(root: Path, env: dict[str, str] | None = None, user: str = "") -> Facts:
    config = {"architecture": "amd64", "config": {"Env": [f"{k}={v}" for k, v in (env or {}).items()], "User": user}}
    return Facts(OpenedImage(DirTree(str(root)), f"root filesystem {root}", config))


def report(
    needs: dict[str, list[str]], *, driver: dict[str, Any] | None = None, evidence: dict[str, str] | None = None
) -> dict[str, Any]:
    apis: dict[str, Any] = {api: {"state": "absent", "image_needs": []} for api in API_ORDER}
    for api, tokens in needs.items():
        apis[api] = {"state": "provided", "image_needs": tokens}
    texts = {api: f"{api}: what the node gives" for api in API_ORDER}
    texts.update(evidence or {})
    return {
        "format_version": 2,
        "containers": [api for api in API_ORDER if apis[api]["state"] == "provided"],
        "apis": apis,
        "evidence": texts,
        "backend": "cdi",
        "platform": "linux-x86_64",
        "devices": [],
        "problems": [],
        "engines": [],
        "nvidia_driver": driver,
        "cgpu_version": "0",
        "checked_at": "2026-01-01T00:00:00+00:00",
    }


def driver(version: str = "550.54.15", cuda: str = "12.4", state: str = "known") -> dict[str, Any]:
    return {
        "version": version,
        "read_from": "/proc/driver/nvidia/version",
        "cuda": cuda,
        "cuda_state": state,
        "reason": "",
    }


# --- every token has its one check --------------------------------------------------------------------


def test_every_image_needs_token_has_an_image_check():
    assert set(TOKEN_CHECKS) == set(IMAGE_NEEDS)


def test_a_token_without_a_check_is_unknown_never_a_pass(tmp_path):
    check = token_check("some-new-token", facts(glibc_root(tmp_path)), Node(report({})))
    assert check.status == "unknown" and "some-new-token" in check.evidence


# --- glibc ------------------------------------------------------------------------------------------


def test_glibc_musl_and_neither(tmp_path):
    node = Node(report({}))
    assert token_check("glibc", facts(glibc_root(tmp_path / "g")), node).status == "pass"
    put(tmp_path / "m", "lib/ld-musl-x86_64.so.1", elf(X86_64))
    musl = token_check("glibc", facts(tmp_path / "m"), node)
    assert musl.status == "fail" and "musl" in musl.evidence and musl.fix
    (tmp_path / "e").mkdir()
    assert token_check("glibc", facts(tmp_path / "e"), node).status == "unknown"


# --- CUDA ----------------------------------------------------------------------------------------


def cuda_root(root: Path, compat: str = "") -> Path:
    glibc_root(root)
    put(root, "usr/local/cuda-12.8/targets/x86_64-linux/lib/libcudart.so.12.8.90", elf(X86_64))
    (root / "usr/local/cuda").symlink_to("cuda-12.8")
    if compat:
        put(root, f"usr/local/cuda-12.8/compat/libcuda.so.{compat}", elf(X86_64))
    return root


@pytest.mark.parametrize(
    ("env", "needed", "where"),
    [
        (
            {"NVIDIA_REQUIRE_CUDA": "cuda>=12.6 brand=tesla,driver>=470,driver<471", "CUDA_VERSION": "12.8.1"},
            "12.6",
            "NVIDIA_REQUIRE_CUDA",
        ),
        ({"CUDA_VERSION": "12.8.1"}, "12.8", "CUDA_VERSION"),
        ({}, "12.8", "libcudart.so.12.8.90"),
    ],
)
def test_the_cuda_an_image_needs_env_first_then_its_runtime(tmp_path, env, needed, where):
    root = cuda_root(tmp_path)
    got, said = cuda_needed(facts(root, {**env, "LD_LIBRARY_PATH": "/usr/local/cuda/targets/x86_64-linux/lib"}))
    assert got == needed and where in said


def cuda_verdict(root: Path, node_report: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    checks = api_checks("cuda", ["glibc"], None, facts(root, env or {"CUDA_VERSION": "12.8.1"}), Node(node_report))
    return {c.name: c for c in checks}["cuda-version"]


def test_an_image_newer_than_the_driver_is_absent_and_one_within_it_provided(tmp_path):
    root = cuda_root(tmp_path)
    old = cuda_verdict(root, report({"cuda": ["glibc"]}, driver=driver()))
    assert old.status == "fail" and "12.8" in old.evidence and "12.4" in old.evidence
    assert cuda_verdict(root, report({"cuda": ["glibc"]}, driver=driver("570.86.15", "12.8"))).status == "pass"
    at_least = cuda_verdict(root, report({"cuda": ["glibc"]}, driver=driver("565.57.01", "12.6", "at-least")))
    assert at_least.status == "unknown"
    assert cuda_verdict(root, report({"cuda": ["glibc"]})).status == "unknown"  # no driver figure in the report


def _with_gpu(node_report: dict[str, Any], name: str) -> dict[str, Any]:
    device = {
        "name": name,
        "api": "cuda",
        "apis": ["cuda"],
        "status": "counted",
        "counted": True,
        "reason": "",
        "source": "",
    }
    return {**node_report, "devices": [device]}


@pytest.mark.parametrize(
    ("gpu", "status"),
    [("NVIDIA H100 80GB HBM3", "pass"), ("NVIDIA GeForce RTX 4090", "fail"), (None, "unknown")],
)
def test_cuda_compat_counts_on_data_center_gpus_only(tmp_path, gpu, status):
    root = cuda_root(tmp_path, compat="570.124.06")
    node_report = report({"cuda": ["glibc"]}, driver=driver("535.104.05", "12.2"))
    if gpu:
        node_report = _with_gpu(node_report, gpu)
    assert cuda_verdict(root, node_report).status == status


def test_cuda_compat_older_than_the_need_does_not_count(tmp_path):
    root = cuda_root(tmp_path, compat="550.54.15")  # CUDA 12.4's compat cannot run a 12.8 image
    node_report = _with_gpu(report({"cuda": ["glibc"]}, driver=driver("535.104.05", "12.2")), "NVIDIA A100-SXM4-80GB")
    assert cuda_verdict(root, node_report).status == "fail"


# --- Vulkan and OpenCL ----------------------------------------------------------------------------


def vulkan_root(root: Path, drivers: tuple[str, ...] = ("radeon",), loader: bool = True) -> Path:
    glibc_root(root)
    if loader:
        put(root, f"{LIB}/libvulkan.so.1", elf(X86_64))
    for name in drivers:
        put(root, f"{LIB}/libvulkan_{name}.so", elf(X86_64))
        manifest = {"file_format_version": "1.0.0", "ICD": {"library_path": f"/{LIB}/libvulkan_{name}.so"}}
        put(root, f"usr/share/vulkan/icd.d/{name}_icd.x86_64.json", json.dumps(manifest))
    return root


def test_mesa_vulkan_for_the_node_gpu_vendor(tmp_path):
    amd = report(
        {"vulkan": ["mesa-vulkan", "vulkan-loader"]}, evidence={"vulkan": "gets /dev/dri/renderD128 of an AMD GPU"}
    )
    intel = report(
        {"vulkan": ["mesa-vulkan", "vulkan-loader"]}, evidence={"vulkan": "gets /dev/dri/renderD128 of an Intel GPU"}
    )
    radv = facts(vulkan_root(tmp_path / "radv", ("radeon",)))
    assert token_check("mesa-vulkan", radv, Node(amd)).status == "pass"
    wrong = token_check("mesa-vulkan", radv, Node(intel))
    assert wrong.status == "fail" and "ANV" in wrong.evidence
    venus = token_check("mesa-venus", facts(vulkan_root(tmp_path / "v", ("virtio",))), Node(amd))
    assert venus.status == "pass" and "Venus" in venus.evidence


def test_an_icd_whose_library_is_missing_fails(tmp_path):
    root = vulkan_root(tmp_path, ("intel",))
    (root / LIB / "libvulkan_intel.so").unlink()
    node = Node(report({}, evidence={"vulkan": "gets /dev/dri/renderD128 of an Intel GPU"}))
    check = token_check("mesa-vulkan", facts(root), node)
    assert check.status == "fail" and "not in the image" in check.evidence


def test_the_vulkan_loader_missing_makes_a_provided_vulkan_absent(tmp_path):
    root = vulkan_root(tmp_path, (), loader=False)
    node_report = report({"vulkan": ["vulkan-loader"]})
    answer = with_image(node_report, f"dir:{root}")
    assert answer["apis"]["vulkan"]["state"] == "absent" and "vulkan" not in answer["containers"]
    assert "libvulkan.so.1" in answer["evidence"]["vulkan"]
    assert answer["image"]["apis"]["vulkan"]["node"] == "provided"
    Report.model_validate(answer)


def opencl_root(root: Path, icds: dict[str, str], package: str = "ocl-icd-libopencl1") -> Path:
    glibc_root(root)
    put(root, f"{LIB}/libOpenCL.so.1", elf(X86_64))
    put(root, "var/lib/dpkg/status", f"Package: {package}\nStatus: install ok installed\nVersion: 2.3.1-1\n\n")
    for name, library in icds.items():
        put(root, f"etc/OpenCL/vendors/{name}.icd", library + "\n")
        if "/" in library:
            put(root, library.lstrip("/"), elf(X86_64))
    return root


def test_opencl_vendor_icds_and_which_loader(tmp_path):
    rocm = opencl_root(tmp_path / "r", {"amdocl64_60200": "libamdocl64.so"})
    node = Node(report({}))
    assert token_check("opencl-icd-loader", facts(rocm), node).status == "pass"
    assert token_check("ocl-icd-loader", facts(rocm), node).status == "pass"
    assert token_check("khronos-opencl-loader", facts(rocm), node).status == "fail"
    # the ICD names a library not in the image
    assert token_check("rocm-opencl", facts(rocm), node).status == "fail"
    put(rocm, f"{LIB}/libamdocl64.so", elf(X86_64))
    assert token_check("rocm-opencl", facts(rocm), node).status == "pass"
    intel = opencl_root(tmp_path / "i", {"intel": f"/{LIB}/intel-opencl/libigdrcl.so"})
    assert token_check("intel-compute-runtime", facts(intel), node).status == "pass"
    assert token_check("intel-compute-runtime", facts(rocm), node).status == "fail"


def test_libc_search_folders(tmp_path):
    debian = facts(glibc_root(tmp_path / "d"))
    node = Node(report({}))
    assert token_check("multiarch-search", debian, node).status == "pass"
    assert token_check("lib64-search", debian, node).status == "fail"
    put(tmp_path / "f", "usr/lib64/libc.so.6", elf(X86_64))
    fedora = facts(tmp_path / "f")
    assert token_check("lib64-search", fedora, node).status == "pass"
    assert token_check("multiarch-search", fedora, node).status == "fail"


# --- ROCm ----------------------------------------------------------------------------------------


def rocm_root(root: Path, version: str) -> Path:
    glibc_root(root)
    put(root, f"opt/rocm-{version}/lib/libhsa-runtime64.so.1", elf(X86_64))
    put(root, f"opt/rocm-{version}/.info/version", f"{version}-123\n")
    (root / "opt/rocm").symlink_to(f"rocm-{version}")
    return root


def rocm_report(target: str) -> dict[str, Any]:
    finding = f"gets /dev/kfd and /dev/dri/renderD128 of an AMD GPU (sysfs), target {target} (amdkfd's topology)"
    return report({"rocm": ["rocm-runtime"]}, evidence={"rocm": finding})


@pytest.mark.parametrize(
    ("version", "target", "env", "state"),
    [
        ("6.2.4", "gfx90a", {}, "provided"),
        ("6.2.4", "gfx1201", {}, "absent"),  # RDNA4: ROCm 6.4.1 on
        ("6.4.1", "gfx1201", {}, "provided"),
        ("6.2.4", "gfx1031", {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}, "provided"),
        ("5.2.3", "gfx90a", {}, "unknown"),  # older than the matrix cgpu carries
    ],
)
def test_rocm_targets_of_the_images_release_against_the_nodes_gpu(tmp_path, version, target, env, state):
    root = rocm_root(tmp_path / "root", version)
    node_report = rocm_report(target)
    checks = api_checks("rocm", ["rocm-runtime"], None, facts(root, env), Node(node_report))
    verdict, reason = api_verdict(checks)
    assert {"yes": "provided", "no": "absent", "unknown": "unknown"}[verdict] == state, reason
    if state == "absent":
        assert "6.4.1" in {c.name: c for c in checks}["rocm-targets"].fix


def test_no_rocm_userspace_is_absent(tmp_path):
    answer = with_image(rocm_report("gfx90a"), f"dir:{glibc_root(tmp_path)}")
    assert answer["apis"]["rocm"]["state"] == "absent"
    assert "libhsa-runtime64.so.1" in answer["image"]["apis"]["rocm"]["reason"]


# --- the image's user against user_needs ------------------------------------------------------------

KFD_NEED = {"node": "/dev/kfd", "gids": [993], "groups": ["render"], "why": "amdgpu's KFD is 0660 root:render"}


@pytest.mark.parametrize(
    ("user", "group_line", "status"),
    [
        ("", "render:x:993:", "pass"),  # root
        ("0", "render:x:993:", "pass"),
        ("app", "render:x:993:app", "pass"),  # a member of render
        ("app", "render:x:993:", "fail"),
        ("1000:993", "render:x:993:", "pass"),  # numeric group given
        ("app:render", "render:x:993:", "pass"),  # named group given
        ("app:app", "render:x:993:app", "fail"),  # an explicit group drops the supplementary ones
        ("4242", "render:x:993:", "fail"),  # a number not in /etc/passwd: gid 0
        ("nobody-here", "render:x:993:", "unknown"),
    ],
)
def test_the_images_user_against_a_device_nodes_groups(tmp_path, user, group_line, status):
    root = glibc_root(tmp_path)
    put(root, "etc/group", f"root:x:0:\n{group_line}\napp:x:1000:\n")
    check = user_check(image_user(facts(root, user=user)), KFD_NEED)
    assert check.status == status, check.evidence
    if status == "fail":
        assert "--group-add 993" in check.fix


def test_no_passwd_for_a_named_user_is_unknown_and_a_numeric_one_without_group_file_is_judged(tmp_path):
    (tmp_path / "e").mkdir()
    assert user_check(image_user(facts(tmp_path / "e", user="app")), KFD_NEED).status == "unknown"
    put(tmp_path / "p", "etc/passwd", "app:x:1000:993::/:/bin/sh\n")
    assert user_check(image_user(facts(tmp_path / "p", user="1000")), KFD_NEED).status == "pass"  # primary gid 993


def test_user_needs_in_the_report_decide_the_api(tmp_path):
    root = rocm_root(tmp_path, "6.2.4")
    node_report = rocm_report("gfx90a")
    node_report["apis"]["rocm"]["user_needs"] = [KFD_NEED]
    as_root = with_image(node_report, f"dir:{root}")
    assert as_root["apis"]["rocm"]["state"] == "provided"
    # a dir: reference has no config (its user is root); the image config's User decides here
    checks = api_checks("rocm", ["rocm-runtime"], [KFD_NEED], facts(root, user="app"), Node(node_report))
    failed = [c for c in checks if c.status == "fail"]
    assert [c.name for c in failed] == ["user: /dev/kfd"]


# --- the report, combined --------------------------------------------------------------------------


def test_an_api_the_node_does_not_give_stays_as_the_node_says(tmp_path):
    node_report = report({"cuda": ["glibc"]})
    node_report["apis"]["rocm"] = {"state": "unknown", "image_needs": []}
    answer = with_image(node_report, f"dir:{glibc_root(tmp_path)}")
    assert answer["apis"]["rocm"]["state"] == "unknown"
    assert answer["image"]["apis"]["rocm"]["verdict"] == "not-checked"
    assert answer["containers"] == ["cuda"]


def test_an_unreadable_image_makes_provided_apis_unknown_with_an_error(tmp_path):
    answer = with_image(report({"cuda": ["glibc"]}), f"oci-archive:{tmp_path}/missing.tar")
    assert answer["image"]["status"] == "unreadable"
    assert answer["apis"]["cuda"]["state"] == "unknown" and answer["containers"] == []
    assert answer["problems"][0]["severity"] == "error"
    Report.model_validate(answer)


def test_the_node_report_is_not_changed(tmp_path):
    node_report = report({"vulkan": ["vulkan-loader"]})
    before = json.dumps(node_report, sort_keys=True)
    with_image(node_report, f"dir:{glibc_root(tmp_path)}")
    assert json.dumps(node_report, sort_keys=True) == before


@settings(max_examples=60, deadline=None)
@given(
    user=st.text(alphabet="abc019:²", max_size=8) | st.just("9" * 5000),
    passwd=st.text(alphabet="abc019:\n,x²", max_size=60),
    group=st.text(alphabet="abc019:\n,x²", max_size=60),
)
def test_any_user_passwd_and_group_give_a_verdict_never_an_exception(tmp_path_factory, user, passwd, group):
    root = tmp_path_factory.mktemp("u")
    put(root, "etc/passwd", passwd)
    put(root, "etc/group", group)
    resolved = image_user(facts(root, user=user))
    check = user_check(resolved, KFD_NEED)
    assert check.status in ("pass", "fail", "unknown")
    if resolved.uid == 0:
        assert check.status == "pass"


# --- bad images stay bounded, as image check's do ---------------------------------------------------


def test_a_hostile_layer_makes_the_image_unreadable_not_a_crash(tmp_path):
    from tests.image.hostile import digits_pax_layer
    from tests.image.trees import oci_archive

    archive = oci_archive(tmp_path / "o.tar", [digits_pax_layer()], gzip_layers=False)
    answer = with_image(report({"cuda": ["glibc"]}), f"oci-archive:{archive}", timeout=5)
    assert answer["image"]["status"] == "unreadable" and answer["apis"]["cuda"]["state"] == "unknown"
    assert "malformed record" in answer["problems"][0]["message"]


def test_a_gzip_bomb_is_stopped_at_the_timeout(tmp_path):
    from tests.image.hostile import gzip_bomb_layer
    from tests.image.trees import oci_archive
    from tests.timing import assert_within, timed

    bomb = tmp_path / "bomb.gz"
    gzip_bomb_layer(bomb, 16)  # 16 GiB of zeros in 16 MB
    archive = oci_archive(tmp_path / "o.tar", [bomb.read_bytes()], gzip_layers=False)
    answer, seconds = timed(lambda: with_image(report({"cuda": ["glibc"]}), f"oci-archive:{archive}", timeout=2))
    assert (
        answer["image"]["status"] == "unreadable"
        and "not done within --timeout 2 s" in answer["problems"][0]["message"]
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_within(seconds, 2, lambda: timed(lambda: with_image(report({}), f"dir:{empty}"))[1], "a gzip bomb")


def test_a_huge_library_path_in_the_config_is_read_bounded(tmp_path):
    root = glibc_root(tmp_path)
    image_facts = facts(
        root,
        {
            "LD_LIBRARY_PATH": "../" * 200_000,
            "NVIDIA_REQUIRE_CUDA": "cuda>=1." + "9" * 5000,
            "CUDA_VERSION": "9" * 5000,
        },
    )
    checks = api_checks("cuda", ["glibc"], None, image_facts, Node(report({}, driver=driver())))
    assert {c.name: c.status for c in checks} == {"glibc": "pass", "cuda-version": "pass"}  # no version it can read


@given(st.text(alphabet="0123456789.:-~+", max_size=40))
def test_version_key_reads_any_text(text):
    from cgpu.image.needs import version_key

    key = version_key(text)
    assert all(0 <= part < 10**9 for part in key)


def test_no_gfx_target_in_the_report_leaves_rocm_to_the_runtime_check(tmp_path):
    node_report = report({"rocm": ["rocm-runtime"]}, evidence={"rocm": "gets /dev/kfd and renderD128 of an AMD GPU"})
    answer = with_image(node_report, f"dir:{rocm_root(tmp_path, '6.2.4')}")
    targets = {c["name"]: c for c in answer["image"]["apis"]["rocm"]["checks"]}["rocm-targets"]
    assert targets["status"] == "unknown" and not targets["required"]
    assert answer["apis"]["rocm"]["state"] == "provided"


# --- the backends whose reports name no token --------------------------------------------------------


def test_directml_on_wsl_needs_glibc_in_the_image(tmp_path):
    node_report = {**report({"directml": []}), "backend": "wsl"}
    put(tmp_path / "m", "lib/ld-musl-x86_64.so.1", elf(X86_64))
    musl = with_image(node_report, f"dir:{tmp_path / 'm'}")
    assert musl["apis"]["directml"]["state"] == "absent" and "musl" in musl["evidence"]["directml"]
    assert with_image(node_report, f"dir:{glibc_root(tmp_path / 'g')}")["apis"]["directml"]["state"] == "provided"


@pytest.mark.parametrize(("loader", "state"), [(True, "provided"), (False, "absent")])
def test_vulkan_under_krunkit_is_image_checks_venus_verdict(tmp_path, loader, state):
    from tests.image.trees import fedora_tree

    node_report = {**report({"vulkan": []}), "backend": "krunkit"}
    config = tmp_path / "root"
    answer = with_image(node_report, f"dir:{fedora_tree(config, loader=loader)}")
    checks = {c["name"]: c for c in answer["image"]["apis"]["vulkan"]["checks"]}
    assert answer["apis"]["vulkan"]["state"] == state, checks
    assert "krunkit-venus" in checks


def test_the_venus_check_applies_under_krunkit_only(tmp_path):
    from tests.image.trees import fedora_tree

    answer = with_image(report({"vulkan": []}), f"dir:{fedora_tree(tmp_path / 'root')}")
    assert [c["name"] for c in answer["image"]["apis"]["vulkan"]["checks"]] == []


# --- the CLI and the library ---------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
NVIDIA_NODE = [
    "--backend", "cdi", "--engine", "none", "--spec-dir", str(REPO / "cdi-samples/nvidia-current/spec"),
    "--root", str(REPO / "cdi-samples/hosts/nvidia-580"),
]  # fmt: skip


def cgpu_cli(*argv: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "cgpu", *argv], capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def test_probe_with_image_on_the_nvidia_sample_node(tmp_path):
    code, out, _ = cgpu_cli("probe", "--json", *NVIDIA_NODE)
    plain = json.loads(out)
    assert code == 0 and "image" not in plain and plain["containers"] == ["cuda", "vulkan", "opencl"]
    code, out, _ = cgpu_cli("probe", "--json", *NVIDIA_NODE, "--image", f"dir:{glibc_root(tmp_path)}")
    answer = json.loads(out)
    assert code == 0 and answer["containers"] == ["cuda"], answer["image"]
    assert {k: v for k, v in answer.items() if k not in ("apis", "evidence", "containers", "image", "checked_at")} == {
        k: v for k, v in plain.items() if k not in ("apis", "evidence", "containers", "checked_at")
    }
    Report.model_validate(answer)


def test_image_check_with_a_backend_and_its_exit_status(tmp_path):
    root = vulkan_root(tmp_path / "v", ())
    code, out, _ = cgpu_cli("image", "check", f"dir:{root}", "--backend", "cdi", "--json")
    answer = json.loads(out)
    assert answer["backend"] == "cdi" and answer["status"] == "read" and set(answer["apis"]) == set(API_ORDER[:-1])
    assert code in (0, 4, 5)
    code, _, err = cgpu_cli("image", "check", f"dir:{root}", "--backend", "cdi", "--machine", "m")
    assert code == 2 and "--machine" in err
    code, _, err = cgpu_cli("image", "check", "Bad::Ref", "--backend", "cdi")
    assert code == 2 and "not an image reference" in err


def test_the_library_takes_image(tmp_path):
    import cgpu

    options = {"engine": "none", "spec_dirs": NVIDIA_NODE[5:6], "root": NVIDIA_NODE[7]}
    answer = cgpu.probe("cdi", **options, image=f"dir:{glibc_root(tmp_path)}")
    assert answer.containers == ["cuda"] and answer.image is not None
    assert answer.image.apis["vulkan"].verdict == "no" and answer.image.apis["vulkan"].node == "provided"
    assert cgpu.probe("cdi", **options).image is None
    with pytest.raises(cgpu.CgpuValueError, match="not an image reference"):
        cgpu.probe("cdi", **options, image="Bad::Ref")
    with pytest.raises(cgpu.CgpuTypeError):
        cgpu.probe("cdi", **options, image=3)  # type: ignore[arg-type]
