"""`cgpu image check` end to end: fabricated images through every way of reading them."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgpu.cli import ExitCode, image_exit_code
from cgpu.image import check as image_check
from cgpu.image.check import render_image_check
from tests.conftest import validate_image_check
from tests.image.trees import (
    STOCK_VENDOR,
    X86_64,
    alpine_tree,
    debian_tree,
    docker_archive,
    fedora_tree,
    icd,
    layer_tar,
    member,
    oci_archive,
)


def check_image(ref: str, **options) -> tuple[dict, ExitCode]:
    """The answer (checked against `cgpu schema image-check`) and the exit status the CLI gives it."""
    result = image_check.check_image(ref, **options)
    validate_image_check(result)
    return result, image_exit_code(result)


# name: (builds the root tree, image config arch, verdict, the check that decides, words in its evidence)
VARIANTS = {
    "good": (fedora_tree, "arm64", "yes", "mesa-build", "the libkrun build"),
    "stock": (
        lambda r: fedora_tree(r, vendor=STOCK_VENDOR, release="1.fc44", lock=False, mesa_from="fedora"),
        "arm64",
        "no",
        "mesa-build",
        "vendor 'Fedora Project'): stock Mesa",
    ),
    "no-loader": (lambda r: fedora_tree(r, loader=False), "arm64", "no", "vulkan-loader", "no libvulkan.so.1"),
    "musl": (alpine_tree, "arm64", "no", "libc", "musl (/lib/ld-musl-aarch64.so.1)"),
    "broken-manifest": (
        lambda r: fedora_tree(r, manifest='{"ICD": {"library_path": '),
        "arm64",
        "no",
        "venus-icd",
        "virtio_icd.aarch64.json is not valid JSON",
    ),
    "debian": (debian_tree, "arm64", "no", "mesa-build", "mesa-vulkan-drivers-22.3.6-1+deb12u1"),
    "amd64": (lambda r: fedora_tree(r, machine=X86_64), "amd64", "no", "architecture", "krunkit VMs run arm64 only"),
    "other-copr": (
        lambda r: fedora_tree(
            r, vendor="Fedora Copr - user someone", mesa_from="copr:copr.fedorainfracloud.org:someone:mesa-git"
        ),
        "arm64",
        "unknown",
        "mesa-build",
        "built in a copr of someone, not in slp/mesa-libkrun-vulkan",
    ),
}
EXIT = {"yes": ExitCode.OK, "no": ExitCode.IMAGE_NO, "unknown": ExitCode.IMAGE_UNKNOWN}


@pytest.fixture(scope="session")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("roots")
    return {name: build(base / name) for name, (build, *_rest) in VARIANTS.items()}


def assert_answer(result: dict, code: int, variant: str) -> None:
    _, _, verdict, check_name, words = VARIANTS[variant]
    checks = {c["name"]: c for c in result["checks"]}
    assert list(checks) == [
        "architecture",
        "libc",
        "vulkan-loader",
        "venus-icd",
        "other-icds",
        "mesa-build",
        "version-lock",
        "python",
    ]
    assert (result["verdict"], code) == (verdict, EXIT[verdict]), render_image_check(result)
    decisive = checks[check_name]
    assert words in decisive["evidence"], decisive
    if verdict != "yes":
        assert decisive["status"] == ("fail" if verdict == "no" else "unknown")
        assert decisive["fix"] and check_name in result["reason"]
    else:
        assert all(c["status"] == "pass" for c in checks.values())
    assert not [p for p in result["problems"] if p["severity"] == "error"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_rootfs_dir(roots, variant):
    assert_answer(*check_image(f"dir:{roots[variant]}"), variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_hand_made_archives(roots, variant, tmp_path):
    arch = VARIANTS[variant][1]
    layer = layer_tar(roots[variant])
    assert_answer(*check_image(f"docker-archive:{docker_archive(tmp_path / 'd.tar', [layer], arch=arch)}"), variant)
    assert_answer(*check_image(f"oci-archive:{oci_archive(tmp_path / 'o.tar', [layer], arch=arch)}"), variant)


# --- through the real engine ----------------------------------------------------------------


def _podman_works() -> str:
    if shutil.which("podman") is None:
        return "podman is not installed"
    probe = subprocess.run(["podman", "images", "-q"], capture_output=True, text=True, timeout=60)
    return "" if probe.returncode == 0 else f"podman does not work here: {probe.stderr.strip()[:200]}"


@pytest.fixture(scope="session")
def podman_images(roots, tmp_path_factory):
    why = _podman_works()
    if why:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("podman")
    repo = f"localhost/cgpu-test-image-{uuid.uuid4().hex[:8]}"
    made: dict[str, dict[str, str]] = {}
    try:
        for name, (_, arch, *_rest) in VARIANTS.items():
            tar = base / f"{name}.tar"
            tar.write_bytes(layer_tar(roots[name]))
            ref = f"{repo}:{name}"
            subprocess.run(
                ["podman", "import", "--arch", arch, str(tar), ref], check=True, capture_output=True, timeout=120
            )
            made[name] = {"engine": ref}
            for fmt in ("oci-archive", "docker-archive"):
                out = base / f"{name}.{fmt}"
                subprocess.run(
                    ["podman", "save", "--format", fmt, "-o", str(out), ref],
                    check=True,
                    capture_output=True,
                    timeout=120,
                )
                made[name][fmt] = f"{fmt}:{out}"
        yield made
    finally:
        for name in made:
            subprocess.run(["podman", "rmi", "-f", f"{repo}:{name}"], capture_output=True, timeout=120)


@pytest.mark.podman
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("way", ["engine", "oci-archive", "docker-archive"])
def test_podman_built_images(podman_images, variant, way):
    ref = podman_images[variant][way]
    result, code = check_image(ref)
    assert_answer(result, code, variant)
    if way == "engine":
        assert result["source"] == f"podman image {ref}"


@pytest.mark.podman
def test_absolute_symlinks_in_an_engine_image_stay_inside_it(tmp_path):
    why = _podman_works()
    if why:
        pytest.skip(why)
    root = fedora_tree(tmp_path / "root")
    manifest = root / "usr/share/vulkan/icd.d/virtio_icd.aarch64.json"
    manifest.unlink()
    os.symlink("/etc/passwd", manifest)  # the host has one; the image does not
    (tmp_path / "l.tar").write_bytes(layer_tar(root))
    ref = f"localhost/cgpu-test-image-{uuid.uuid4().hex[:8]}:abs-symlink"
    subprocess.run(
        ["podman", "import", "--arch", "arm64", str(tmp_path / "l.tar"), ref],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        result, code = check_image(ref)
    finally:
        subprocess.run(["podman", "rmi", "-f", ref], capture_output=True, timeout=120)
    venus = next(c for c in result["checks"] if c["name"] == "venus-icd")
    assert code == ExitCode.IMAGE_NO and venus["status"] == "fail"
    assert venus["evidence"] == (
        "/usr/share/vulkan/icd.d/virtio_icd.aarch64.json points to /etc/passwd, which does not exist in the image"
    )


@pytest.mark.podman
def test_a_missing_local_image_is_could_not_run_and_never_pulled():
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    result, code = check_image(f"localhost/cgpu-test-missing-{uuid.uuid4().hex[:8]}:none")
    assert code == ExitCode.COULD_NOT_RUN and result["verdict"] == "unknown"
    assert "podman has no such local image" in result["reason"] and "cgpu never pulls" in result["reason"]


# --- hostile and odd archives ---------------------------------------------------------------


def test_hostile_layer_gives_problems_and_writes_nothing(roots, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hostile = layer_tar(
        extra=[
            member("../../escape.json", b"{}"),
            member("/etc/motd", b"hello\n"),
            member("usr/share/vulkan/icd.d/virtio_icd.aarch64.json", kind=tarfile.SYMTYPE, link="/etc/shadow"),
            member("usr/lib64/stolen", kind=tarfile.LNKTYPE, link="../../../../etc/passwd"),
        ]
    )
    archive = docker_archive(tmp_path / "h.tar", [layer_tar(roots["good"]), hostile])
    before = set(tmp_path.parent.rglob("escape*"))
    result, code = check_image(f"docker-archive:{archive}")
    assert set(tmp_path.parent.rglob("escape*")) == before and not Path("/escape.json").exists()
    venus = next(c for c in result["checks"] if c["name"] == "venus-icd")
    assert code == ExitCode.IMAGE_NO
    assert venus["evidence"] == (
        "/usr/share/vulkan/icd.d/virtio_icd.aarch64.json points to /etc/shadow, which does not exist in the image"
    )
    messages = [p["message"] for p in result["problems"]]
    assert any("'../../escape.json' is a name that climbs out of the root" in m for m in messages)
    assert any("hardlink /usr/lib64/stolen -> '../../../../etc/passwd'" in m for m in messages)
    assert any("'/etc/motd' has an absolute name" in m for m in messages)


def test_whiteout_in_an_upper_layer_removes_the_venus_driver(roots, tmp_path):
    upper = layer_tar(extra=[member("usr/share/vulkan/icd.d/.wh.virtio_icd.aarch64.json")])
    result, code = check_image(
        f"docker-archive:{docker_archive(tmp_path / 'w.tar', [layer_tar(roots['good']), upper])}"
    )
    venus = next(c for c in result["checks"] if c["name"] == "venus-icd")
    assert code == ExitCode.IMAGE_NO and venus["status"] == "fail"
    assert venus["evidence"].startswith("no Venus ICD manifest (virtio_icd*.json) in /etc/xdg/vulkan/icd.d")


def test_icd_env_in_the_image_config_that_hides_venus(roots, tmp_path):
    archive = docker_archive(
        tmp_path / "e.tar",
        [layer_tar(roots["good"])],
        env=["VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.aarch64.json"],
    )
    result, code = check_image(f"docker-archive:{archive}")
    venus = next(c for c in result["checks"] if c["name"] == "venus-icd")
    assert code == ExitCode.IMAGE_NO
    assert venus["evidence"] == "no Venus ICD manifest (virtio_icd*.json) in $VK_ICD_FILENAMES"
    assert "VK_ICD_FILENAMES" in venus["fix"]


def test_a_second_venus_driver_is_a_failure(tmp_path):
    root = fedora_tree(tmp_path / "root")
    (root / "usr/local/lib").mkdir(parents=True)
    (root / "usr/local/lib/libvulkan_virtio.so").write_bytes((root / "usr/lib64/libvulkan_virtio.so").read_bytes())
    (root / "usr/local/share/vulkan/icd.d").mkdir(parents=True)
    (root / "usr/local/share/vulkan/icd.d/virtio_icd.json").write_text(icd("/usr/local/lib/libvulkan_virtio.so"))
    result, code = check_image(f"dir:{root}")
    other = next(c for c in result["checks"] if c["name"] == "other-icds")
    assert code == ExitCode.IMAGE_NO and other["status"] == "fail"
    assert "two Venus drivers: /usr/lib64/libvulkan_virtio.so, /usr/local/lib/libvulkan_virtio.so" in other["evidence"]


def test_unpinned_libkrun_build_is_yes_with_an_advisory_failure(tmp_path):
    result, code = check_image(f"dir:{fedora_tree(tmp_path / 'root', lock=False)}")
    lock = next(c for c in result["checks"] if c["name"] == "version-lock")
    assert code == ExitCode.OK and lock["status"] == "fail" and not lock["required"]
    assert lock["fix"].startswith("`dnf versionlock add mesa-vulkan-drivers-25.3.6-102.fc44`")


@pytest.mark.parametrize(
    "ref, words",
    [
        ("docker-archive:/nonexistent/cgpu.tar", "not a readable tar archive"),
        ("dir:/nonexistent/cgpu-root", "is not a directory"),
    ],
)
def test_unreadable_refs_are_could_not_run(ref, words):
    result, code = check_image(ref)
    assert code == ExitCode.COULD_NOT_RUN and words in result["reason"]
    assert result["problems"][-1]["severity"] == "error"


def test_archive_that_points_outside_itself(tmp_path):
    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as tar:
        for name, data in {
            "manifest.json": json.dumps([{"Config": "c.json", "Layers": ["../../../etc/passwd"]}]),
            "c.json": "{}",
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data.encode()))
    result, code = check_image(f"docker-archive:{bad}")
    assert code == ExitCode.COULD_NOT_RUN and "no file '../../../etc/passwd' in the archive" in result["reason"]
    index = tmp_path / "index.tar"
    with tarfile.open(index, "w") as tar:
        data = json.dumps({"manifests": [{"digest": "sha256:../../../../etc/passwd"}]}).encode()
        info = tarfile.TarInfo("index.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    result, code = check_image(f"oci-archive:{index}")
    assert code == ExitCode.COULD_NOT_RUN and "bad digest" in result["reason"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=3000), kind=st.sampled_from(["docker-archive", "oci-archive"]))
def test_random_archive_bytes_are_unreadable_never_a_crash(tmp_path, data, kind):
    path = tmp_path / "random.tar"
    path.write_bytes(data)
    result, code = check_image(f"{kind}:{path}")
    assert code == ExitCode.COULD_NOT_RUN, result


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=_json | st.fixed_dictionaries({"ICD": st.fixed_dictionaries({"library_path": _json})}))
def test_any_manifest_json_gives_an_answer(tmp_path, document):
    root = tmp_path / "r"
    if not root.exists():
        fedora_tree(root)
    (root / "usr/share/vulkan/icd.d/virtio_icd.aarch64.json").write_text(json.dumps(document))
    result, code = check_image(f"dir:{root}")
    venus = next(c for c in result["checks"] if c["name"] == "venus-icd")
    assert code in (ExitCode.OK, ExitCode.IMAGE_NO) and venus["status"] in ("pass", "fail")


# --- the command line -------------------------------------------------------------------------


def test_cli_json_and_exit_codes(run_cli, roots):
    code, out, err = run_cli("image", "check", "--json", f"dir:{roots['good']}")
    report = json.loads(out)
    assert code == 0 and "Traceback" not in err
    assert set(report) == {
        "image",
        "source",
        "os",
        "architecture",
        "status",
        "verdict",
        "reason",
        "checks",
        "problems",
        "cgpu_version",
        "checked_at",
    }
    assert all(set(c) == {"name", "status", "evidence", "fix", "required"} for c in report["checks"])
    assert run_cli("image", "check", f"dir:{roots['stock']}")[0] == ExitCode.IMAGE_NO
    assert run_cli("image", "check", f"dir:{roots['other-copr']}")[0] == ExitCode.IMAGE_UNKNOWN
    assert run_cli("image", "check")[0] == ExitCode.USAGE


def test_cli_human_output_names_the_fix(run_cli, roots):
    code, out, err = run_cli("image", "check", f"dir:{roots['stock']}")
    assert code == ExitCode.IMAGE_NO and "Traceback" not in err
    words = " ".join(out.split())  # wrapped to 80 columns when piped
    assert "FAIL mesa-build" in words and "dnf -y copr enable slp/mesa-libkrun-vulkan" in words
    assert out.startswith("vulkan under krunkit: NO: mesa-build failed; apply each failed check's fix")
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.podman
def test_machine_that_cannot_probe_keeps_the_file_verdict_and_exits_1(run_cli, roots):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    ref = f"localhost/cgpu-test-image-{uuid.uuid4().hex[:8]}:machine"
    (Path(roots["good"]).parent / "m.tar").write_bytes(layer_tar(roots["good"]))
    subprocess.run(
        ["podman", "import", "--arch", "arm64", str(Path(roots["good"]).parent / "m.tar"), ref],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        code, out, err = run_cli("image", "check", "--json", "--machine", "cgpu-test-no-such-vm", ref)
    finally:
        subprocess.run(["podman", "rmi", "-f", ref], capture_output=True, timeout=120)
    report = json.loads(out)
    assert code == ExitCode.COULD_NOT_RUN and report["verdict"] == "yes" and "Traceback" not in err
    assert report["problems"][-1] == {
        "severity": "error",
        "source": "--machine cgpu-test-no-such-vm",
        "message": "the probe did not run in the VM; the verdict above is from the image's files only",
        "kind": "probe",
    }


def test_machine_needs_an_image_name_not_an_archive(roots):
    result, code = check_image(f"dir:{roots['good']}", machine="vm")
    assert code == ExitCode.COULD_NOT_RUN and result["verdict"] == "yes"
    assert "give the image's name there" in result["problems"][-1]["message"]


@pytest.mark.parametrize(
    "static, probed, verdict, warned",
    [
        ("yes", True, "yes", False),
        ("yes", False, "no", True),
        ("no", True, "yes", True),
        ("unknown", False, "no", False),
    ],
)
def test_a_probe_that_ran_decides(static, probed, verdict, warned):
    from cgpu.image.check import merge_machine_probe
    from cgpu.report import ReportBuilder

    builder = ReportBuilder("krunkit")
    if probed:
        builder.provide("vulkan", "Virtio-GPU Venus (Apple M2) created an instance and allocated memory")
    else:
        builder.absent("vulkan", "vkCreateInstance failed with VK_ERROR_OUT_OF_HOST_MEMORY: stock Mesa")
    result = {"verdict": static, "reason": "files", "problems": []}
    assert merge_machine_probe(result, builder, "--machine vm")
    assert result["verdict"] == verdict and result["reason"].startswith("the probe in vm: ")
    assert any(p.severity == "warning" for p in result["problems"]) == warned


def test_stock_mesa_is_never_advised_to_be_pinned(roots):
    result, _ = check_image(f"dir:{roots['stock']}")
    lock = next(c for c in result["checks"] if c["name"] == "version-lock")
    assert lock["status"] == "skip" and "until the image has the libkrun Mesa build" in lock["evidence"]


@pytest.mark.podman
def test_docker_daemon_images_through_docker_py(podman_images, tmp_path, monkeypatch):
    """docker-py against podman's Docker-compatible API: the same calls a Docker daemon answers."""
    from cgpu.engines.client import PodmanService

    service = PodmanService.start(timeout=30)
    try:
        monkeypatch.setenv("DOCKER_HOST", service.url)
        ref = podman_images["stock"]["engine"]
        result, code = check_image(f"docker-daemon:{ref}")
        assert_answer(result, code, "stock")
        assert result["source"] == f"docker image {ref}"
        missing, code = check_image("docker-daemon:localhost/cgpu-test-missing:none")
        assert code == ExitCode.COULD_NOT_RUN and "Docker has no such local image" in missing["reason"]
    finally:
        service.stop()


def test_unreadable_rpm_database_makes_the_build_unknown(tmp_path):
    root = fedora_tree(tmp_path / "root")
    (root / "usr/lib/sysimage/rpm/rpmdb.sqlite").write_bytes(b"not a database" * 100)
    result, code = check_image(f"dir:{root}")
    mesa = next(c for c in result["checks"] if c["name"] == "mesa-build")
    assert code == ExitCode.IMAGE_UNKNOWN and mesa["status"] == "unknown"
    assert "no package list could be read from /usr/lib/sysimage/rpm/rpmdb.sqlite (unreadable)" in mesa["evidence"]
    assert any("not a readable rpm sqlite database" in p["message"] for p in result["problems"])


def test_deeply_nested_manifest_is_a_bad_manifest_not_a_crash(tmp_path):
    root = fedora_tree(tmp_path / "root", manifest="[" * 200_000 + "]" * 200_000)
    result, code = check_image(f"dir:{root}")
    venus = next(c for c in result["checks"] if c["name"] == "venus-icd")
    assert code == ExitCode.IMAGE_NO and "is not valid JSON" in venus["evidence"]


def test_oci_layout_dir_and_multi_platform_index(roots, tmp_path):
    archive = oci_archive(tmp_path / "o.tar", [layer_tar(roots["good"])])
    layout = tmp_path / "layout"
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    assert_answer(*check_image(f"oci:{layout}"), "good")
    # put an amd64 image first in the index: the arm64 one is what a krunkit VM runs, so it is chosen
    index = json.loads((layout / "index.json").read_text())
    amd64 = {**index["manifests"][0], "platform": {"os": "linux", "architecture": "amd64"}}
    index["manifests"].insert(0, amd64)
    (layout / "index.json").write_text(json.dumps(index))
    result, code = check_image(f"oci:{layout}")
    assert_answer(result, code, "good")
    assert {
        "severity": "info",
        "source": f"OCI layout {layout}",
        "message": "the index lists 2 manifests; checked linux/arm64",
        "kind": "image",
    } in result["problems"]


def test_old_copr_build_passes_and_is_reinstalled_from_its_own_copr(tmp_path):
    root = fedora_tree(tmp_path / "root", mesa_from="copr:copr.fedorainfracloud.org:slp:mesa-krunkit")
    (root / "etc/yum.repos.d/_copr:copr.fedorainfracloud.org:slp:mesa-krunkit.repo").unlink()  # `dnf copr remove`
    (root / "usr/lib64/libvulkan_virtio.so").unlink()
    result, code = check_image(f"dir:{root}")
    checks = {c["name"]: c for c in result["checks"]}
    assert code == ExitCode.IMAGE_NO and checks["mesa-build"]["status"] == "pass"
    assert "the libkrun build from the old copr slp/mesa-krunkit" in checks["mesa-build"]["evidence"]
    assert checks["venus-icd"]["fix"].startswith(
        "restore the files Mesa installs: `dnf -y install dnf-plugins-core && dnf -y copr enable slp/mesa-krunkit "
        "&& dnf -y reinstall mesa-vulkan-drivers-25.3.6-102.fc44`"
    )


def test_the_architecture_comes_from_the_elf_files_when_no_config_says(roots):
    result, code = check_image(f"dir:{roots['good']}")
    assert (result["architecture"], code) == ("arm64", ExitCode.OK)
    result, code = check_image(f"dir:{roots['amd64']}")
    assert (result["architecture"], result["verdict"], code) == ("amd64", "no", ExitCode.IMAGE_NO)


def test_an_arm64_tag_on_x86_64_files_is_no_with_the_fix(tmp_path):
    archive = oci_archive(tmp_path / "o.tar", [layer_tar(fedora_tree(tmp_path / "r", machine=X86_64))], arch="arm64")
    result, code = check_image(f"oci-archive:{archive}")
    check = next(c for c in result["checks"] if c["name"] == "architecture")
    assert (result["verdict"], code, check["status"]) == ("no", ExitCode.IMAGE_NO, "fail")
    assert check["evidence"].startswith("the config says arm64 but /usr/lib64/libvulkan_virtio.so is amd64")
    assert "--platform linux/arm64" in check["fix"] and "architecture" in result["reason"]
