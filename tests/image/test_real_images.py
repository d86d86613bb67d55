"""`cgpu image check` on images built from real rpm and dpkg packages, read every way it reads one.

Each case is what an image author builds: a base layer, then one layer per build step (with
whiteouts when a step deletes something). The verdicts are those of the issue that asked for
these images: the build `krunkit/Containerfile` describes is "yes" with every check passing.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from cgpu.cli import ExitCode, image_exit_code
from cgpu.image import check as image_check
from cgpu.image.check import render_image_check
from tests.image.real_images import (
    COPR_REPO,
    FEDORA,
    LIBKRUN_VR,
    LayeredRoot,
    Pkg,
    build_deb,
    build_rpm,
    dnf_records,
    fedora_base,
    mesa,
    missing_tools,
    vulkan_loader,
)
from tests.image.trees import AARCH64, COPR_VENDOR, X86_64, docker_archive, elf, icd, oci_archive

pytestmark = pytest.mark.skipif(bool(missing_tools()), reason=missing_tools() or "tools present")

LIBKRUN_NEVR = f"mesa-vulkan-drivers-{LIBKRUN_VR[0]}-{LIBKRUN_VR[1]}"
VENUS_JSON = "/usr/share/vulkan/icd.d/virtio_icd.aarch64.json"
CHECKS = ["architecture", "libc", "vulkan-loader", "venus-icd", "other-icds", "mesa-build", "version-lock", "python"]


class Packages:
    """Each package built once per architecture, on first use."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.built: dict[tuple[str, str, str, int, str], Path] = {}

    def rpm(self, pkg: Pkg, machine: int = AARCH64) -> Path:
        key = (pkg.name, pkg.evr, pkg.vendor, machine, "rpm")
        if key not in self.built:
            folder = self.work / f"{len(self.built)}"
            folder.mkdir()
            self.built[key] = build_rpm(pkg, machine, folder)
        return self.built[key]

    def deb(self, pkg: Pkg, machine: int = AARCH64) -> Path:
        key = (pkg.name, pkg.evr, pkg.vendor, machine, "deb")
        if key not in self.built:
            folder = self.work / f"{len(self.built)}"
            folder.mkdir()
            self.built[key] = build_deb(pkg, machine, folder)
        return self.built[key]


@dataclass
class Image:
    root: LayeredRoot
    arch: str = "arm64"
    env: tuple[str, ...] = ()


def fedora(pkgs: Packages, path: Path, machine: int = AARCH64) -> LayeredRoot:
    """FROM quay.io/fedora/fedora:44: one layer of base packages."""
    root = LayeredRoot(path)
    with root.step():
        root.rpm_install(*(pkgs.rpm(p, machine) for p in fedora_base(machine)))
    return root


def krunkit(pkgs: Packages, path: Path, machine: int = AARCH64, *, records: str = "both") -> LayeredRoot:
    """What krunkit/Containerfile builds: the copr enabled, its Mesa build and the loader installed
    and pinned (one RUN step), then cgpu's probe copied in (a COPY step)."""
    root = fedora(pkgs, path, machine)
    build = mesa(machine, COPR_VENDOR, LIBKRUN_VR[1])  # Copr sets no packager
    loader = vulkan_loader(machine)
    arch = {AARCH64: "aarch64", X86_64: "x86_64"}[machine]
    with root.step():
        root.rpm_install(pkgs.rpm(build, machine), pkgs.rpm(loader, machine))
        if records != "none":
            dnf_records(
                root,
                {f"{LIBKRUN_NEVR}.{arch}": COPR_REPO, f"vulkan-loader-{loader.evr}.{arch}": "fedora"},
                copr=COPR_REPO,
                lock=f"mesa-vulkan-drivers={build.evr}",
            )
        if records == "repo-file-only":
            root.remove("/usr/lib/sysimage/libdnf5/nevras.toml")
    with root.step():
        root.write("/usr/local/lib/cgpu/probe.py", "# cgpu's probe\n")
    return root


def stock(pkgs: Packages, path: Path, *, copr_enabled: bool = False) -> LayeredRoot:
    root = fedora(pkgs, path)
    build, loader = mesa(AARCH64, FEDORA, "1.fc44", packager=FEDORA), vulkan_loader(AARCH64)
    with root.step():
        root.rpm_install(pkgs.rpm(build), pkgs.rpm(loader))
        dnf_records(
            root,
            {f"mesa-vulkan-drivers-{build.evr}.aarch64": "fedora", f"vulkan-loader-{loader.evr}.aarch64": "fedora"},
            copr=COPR_REPO if copr_enabled else "",
        )
    return root


def other_copr(pkgs: Packages, path: Path, vendor: str, repo: str, release: str) -> LayeredRoot:
    root = fedora(pkgs, path)
    build = mesa(AARCH64, vendor, release)
    with root.step():
        root.rpm_install(pkgs.rpm(build), pkgs.rpm(vulkan_loader(AARCH64)))
        dnf_records(root, {f"mesa-vulkan-drivers-{build.evr}.aarch64": repo}, copr=repo)
    return root


def then(root: LayeredRoot, step: Callable[[LayeredRoot], None]) -> LayeredRoot:
    """One more build step on a built root."""
    with root.step():
        step(root)
    return root


def debian(pkgs: Packages, path: Path) -> LayeredRoot:
    lib = "/usr/lib/aarch64-linux-gnu"
    debs = [
        Pkg(
            "base-files",
            "12.4+deb12u11",
            "",
            vendor="Santiago Vila <sanvila@debian.org>",
            files={"/usr/lib/os-release": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'},
            links={"/etc/os-release": "../usr/lib/os-release"},
        ),
        Pkg(
            "libc6",
            "2.36",
            "9+deb12u10",
            vendor="GNU Libc Maintainers <debian-glibc@lists.debian.org>",
            files={f"{lib}/ld-linux-aarch64.so.1": elf(), f"{lib}/libc.so.6": elf()},
        ),
        Pkg(
            "libvulkan1",
            "1.3.239.0",
            "1",
            vendor="Debian X Strike Force <debian-x@lists.debian.org>",
            files={f"{lib}/libvulkan.so.1.3.239": elf()},
            links={f"{lib}/libvulkan.so.1": "libvulkan.so.1.3.239"},
        ),
        Pkg(
            "mesa-vulkan-drivers",
            "22.3.6",
            "1+deb12u1",
            vendor="Debian X Strike Force <debian-x@lists.debian.org>",
            files={
                f"{lib}/libvulkan_virtio.so": elf(),
                "/usr/share/vulkan/icd.d/virtio_icd.aarch64.json": icd(f"{lib}/libvulkan_virtio.so"),
            },
        ),
    ]
    root = LayeredRoot(path)
    with root.step():
        root.dpkg_install(*(pkgs.deb(p) for p in debs[:2]))
    with root.step():  # RUN apt-get install -y mesa-vulkan-drivers
        root.dpkg_install(*(pkgs.deb(p) for p in debs[2:]))
    return root


def _without_records(root: LayeredRoot) -> None:  # `dnf copr remove` and a wiped dnf state
    root.remove("/etc/yum.repos.d/_copr:copr.fedorainfracloud.org:slp:mesa-libkrun-vulkan.repo")
    root.remove("/usr/lib/sysimage/libdnf5/nevras.toml")


# name: (builds the image, verdict, the check that decides, words in its evidence)
CASES: dict[str, tuple[Callable[[Packages, Path], Image], str, str, str]] = {
    "krunkit-containerfile": (
        lambda k, p: Image(krunkit(k, p)),
        "yes",
        "mesa-build",
        f"vendor 'Fedora Copr - user slp'): the libkrun build; /usr/lib/sysimage/libdnf5/nevras.toml records it "
        f"as installed from {COPR_REPO}",
    ),
    "krunkit-vk-driver-files": (
        lambda k, p: Image(krunkit(k, p), env=(f"VK_DRIVER_FILES={VENUS_JSON}",)),
        "yes",
        "venus-icd",
        f"{VENUS_JSON} names /usr/lib64/libvulkan_virtio.so (arm64 ELF)",
    ),
    "repo-file-only": (
        lambda k, p: Image(krunkit(k, p, records="repo-file-only")),
        "yes",
        "mesa-build",
        "/etc/yum.repos.d/_copr:copr.fedorainfracloud.org:slp:mesa-libkrun-vulkan.repo is the only copr of slp",
    ),
    "vendor-only": (
        lambda k, p: Image(then(krunkit(k, p), _without_records)),
        "unknown",
        "mesa-build",
        "built in a copr of slp, but which one could not be confirmed",
    ),
    "slp-other-project": (
        lambda k, p: Image(other_copr(k, p, COPR_VENDOR, "copr:copr.fedorainfracloud.org:slp:mesa-test", "1.fc44")),
        "unknown",
        "mesa-build",
        "slp's copr mesa-test, not slp/mesa-libkrun-vulkan",
    ),
    "other-copr-mesa-git": (
        lambda k, p: Image(
            other_copr(
                k,
                p,
                "Fedora Copr - group @mesa",
                "copr:copr.fedorainfracloud.org:group_mesa:mesa-git",
                "0.20260101git1a2b3c.fc44",
            )
        ),
        "unknown",
        "mesa-build",
        "built in a copr of @mesa, not in slp/mesa-libkrun-vulkan",
    ),
    "stock": (lambda k, p: Image(stock(k, p)), "no", "mesa-build", "vendor 'Fedora Project'): stock Mesa"),
    "copr-enabled-stock-installed": (
        lambda k, p: Image(stock(k, p, copr_enabled=True)),
        "no",
        "mesa-build",
        "vendor 'Fedora Project'): stock Mesa",
    ),
    "loader-removed": (
        lambda k, p: Image(then(krunkit(k, p), lambda r: r.rpm_erase("vulkan-loader"))),
        "no",
        "vulkan-loader",
        "no libvulkan.so.1 in the library path",
    ),
    "library-deleted": (
        lambda k, p: Image(then(krunkit(k, p), lambda r: r.remove("/usr/lib64/libvulkan_virtio.so"))),
        "no",
        "venus-icd",
        f"{VENUS_JSON} names /usr/lib64/libvulkan_virtio.so, which is not in the image",
    ),
    "manifest-deleted": (
        lambda k, p: Image(then(krunkit(k, p), lambda r: r.remove(VENUS_JSON))),
        "no",
        "venus-icd",
        "no Venus ICD manifest (virtio_icd*.json)",
    ),
    "x86_64": (
        lambda k, p: Image(krunkit(k, p, X86_64), arch="amd64"),
        "no",
        "architecture",
        "krunkit VMs run arm64 only",
    ),
    "lavapipe-forced": (
        lambda k, p: Image(krunkit(k, p), env=("VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.aarch64.json",)),
        "no",
        "venus-icd",
        "no Venus ICD manifest (virtio_icd*.json) in $VK_ICD_FILENAMES",
    ),
    "debian-stock": (
        lambda k, p: Image(debian(k, p)),
        "no",
        "mesa-build",
        "mesa-vulkan-drivers-22.3.6-1+deb12u1 (/var/lib/dpkg/status): the distribution's stock Mesa",
    ),
}
EXIT = {"yes": ExitCode.OK, "no": ExitCode.IMAGE_NO, "unknown": ExitCode.IMAGE_UNKNOWN}


@pytest.fixture(scope="session")
def images(tmp_path_factory) -> dict[str, tuple[Image, dict[str, str]]]:
    """Every case built once, and its refs: dir:, docker-archive:, oci-archive:, oci: (layout dir)."""
    pkgs = Packages(tmp_path_factory.mktemp("packages"))
    base = tmp_path_factory.mktemp("real-images")
    built = {}
    for name, (build, *_rest) in CASES.items():
        image = build(pkgs, base / name / "root")
        layers, config = image.root.layers, {"arch": image.arch, "env": list(image.env)}
        refs = {
            "docker-archive": f"docker-archive:{docker_archive(base / name / 'd.tar', layers, **config)}",
            "oci-archive": f"oci-archive:{oci_archive(base / name / 'o.tar', layers, **config)}",
        }
        with tarfile.open(base / name / "o.tar") as tar:
            tar.extractall(base / name / "layout", filter="data")
        refs["oci"] = f"oci:{base / name / 'layout'}"
        if not image.env:  # a root filesystem has no image config to carry the environment
            refs["dir"] = f"dir:{image.root.path}"
        built[name] = (image, refs)
    return built


def check(ref: str) -> tuple[dict, int]:
    result = image_check.check_image(ref)
    return result, image_exit_code(result)


def assert_case(name: str, result: dict, code: int) -> dict[str, dict]:
    _, verdict, decider, words = CASES[name]
    checks = {c["name"]: c for c in result["checks"]}
    assert list(checks) == CHECKS
    assert (result["verdict"], code) == (verdict, EXIT[verdict]), render_image_check(result)
    assert words in checks[decider]["evidence"], render_image_check(result)
    if verdict == "yes":
        assert all(c["status"] == "pass" for c in checks.values()), render_image_check(result)
    else:
        assert checks[decider]["status"] == ("fail" if verdict == "no" else "unknown")
        assert checks[decider]["fix"] and decider in result["reason"]
    assert not [p for p in result["problems"] if p["severity"] in ("warning", "error")], result["problems"]
    return checks


@pytest.mark.parametrize("form", ["dir", "docker-archive", "oci-archive", "oci"])
@pytest.mark.parametrize("name", CASES)
def test_real_package_images(images, name, form):
    image, refs = images[name]
    if form not in refs:
        pytest.skip("a root filesystem has no image config, so no environment")
    assert_case(name, *check(refs[form]))
    if form != "dir":
        assert len(image.root.layers) >= 2  # a base layer and build steps on it


def test_layers_hold_what_rpm_wrote_and_whiteouts(images):
    """Each step's layer has rpm's database as rpm left it; a deletion is a whiteout in the last layer."""
    image, _ = images["manifest-deleted"]
    names = [set(tarfile.open(fileobj=io.BytesIO(layer)).getnames()) for layer in image.root.layers]
    assert "usr/lib/sysimage/rpm/rpmdb.sqlite" in names[0] and "usr/lib/sysimage/rpm/rpmdb.sqlite" in names[1]
    assert "usr/share/vulkan/icd.d/.wh.virtio_icd.aarch64.json" in names[-1]


def test_rpm_itself_lists_the_copr_vendor_and_no_packager(images):
    image, _ = images["krunkit-containerfile"]
    out = subprocess.run(
        [
            "rpm",
            "--root",
            str(image.root.path),
            "--dbpath",
            "/usr/lib/sysimage/rpm",
            "-q",
            "mesa-vulkan-drivers",
            "--qf",
            "%{VENDOR}|%{PACKAGER}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout == f"{COPR_VENDOR}|(none)"


@pytest.mark.parametrize("name", ["library-deleted", "manifest-deleted"])
def test_fix_for_deleted_files_reinstalls_the_installed_build(images, name):
    """`dnf install` of a build that is installed does nothing; a reinstall puts its files back."""
    _, refs = images[name]
    result, _ = check(refs["oci-archive"])
    venus = next(c for c in result["checks"] if c["name"] == "venus-icd")
    assert f"`dnf -y reinstall {LIBKRUN_NEVR}`" in venus["fix"]  # the copr is enabled: no `copr enable` first
    assert "dnf -y install" not in venus["fix"]


def test_vendor_only_fix_reinstalls_from_the_copr(images):
    _, refs = images["vendor-only"]
    result, _ = check(refs["dir"])
    mesa_build = next(c for c in result["checks"] if c["name"] == "mesa-build")
    assert mesa_build["fix"].startswith("reinstall it from the copr")
    assert f"dnf -y copr enable slp/mesa-libkrun-vulkan && dnf -y reinstall {LIBKRUN_NEVR}`" in mesa_build["fix"]


@pytest.mark.parametrize("form", ["docker-archive", "oci-archive"])
def test_truncated_archive_is_could_not_run(images, tmp_path, form):
    _, refs = images["krunkit-containerfile"]
    data = Path(refs[form].split(":", 1)[1]).read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: len(data) // 2])
    result, code = check(f"{form}:{cut}")
    assert code == ExitCode.COULD_NOT_RUN and result["status"] == "unreadable", result


def test_truncated_layer_is_could_not_run(images, tmp_path):
    image, _ = images["krunkit-containerfile"]
    layers = list(image.root.layers)
    layers[1] = layers[1][: len(layers[1]) // 2]
    archive = docker_archive(tmp_path / "d.tar", layers)
    result, code = check(f"docker-archive:{archive}")
    assert code == ExitCode.COULD_NOT_RUN and result["status"] == "unreadable", result


@pytest.mark.podman
@pytest.mark.parametrize("name", ["krunkit-containerfile", "stock", "manifest-deleted"])
def test_loaded_into_podman(images, name, tmp_path):
    """The same layers through `podman load` and podman's own storage and `podman save`."""
    from tests.image.test_check import _podman_works

    why = _podman_works()
    if why:
        pytest.skip(why)
    image, _ = images[name]
    tag = f"localhost/cgpu-test-real-{uuid.uuid4().hex[:8]}:{name}"
    archive = docker_archive(tmp_path / "d.tar", image.root.layers, arch=image.arch, tag=tag)
    loaded = subprocess.run(["podman", "load", "-i", str(archive)], capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    try:
        result, code = check(tag)
    finally:
        subprocess.run(["podman", "rmi", "-f", tag], capture_output=True, timeout=120)
    assert result["source"] == f"podman image {tag}"
    assert_case(name, result, code)
