"""Images built from real packages, one layer per build step, as an image author's build makes them.

The packages are built by the real `rpmbuild` and `dpkg-deb`, and installed into a root by the
real `rpm --root` (so rpmdb.sqlite, its -wal file and the header blobs are rpm's own) and
`dpkg --root` (so /var/lib/dpkg/status is dpkg's). Their files are 64-byte ELF headers, which
is all `cgpu image check` reads of a library. After each step the changes to the root become a
layer: added and changed files, and a whiteout for each removed path.

dnf itself is not run (no network, and it is not on Debian CI machines); what its steps leave
behind that rpm does not write is written here in dnf's formats: the copr's repo file
(`tests.image.trees.copr_repo_file`), dnf5's `nevras.toml` and `versionlock.toml`.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.image.trees import AARCH64, X86_64, copr_repo_file, elf, icd, nevras_toml

RPM_ARCH = {AARCH64: "aarch64", X86_64: "x86_64"}
DEB_ARCH = {AARCH64: "arm64", X86_64: "amd64"}
RPMDB = "/usr/lib/sysimage/rpm"
FEDORA = "Fedora Project"
# rpmbuild on any host: no build-id links, debuginfo, stripping or dependency generation,
# all of which would look inside the fake ELF files
RPMBUILD_DEFINES = ("_build_id_links none", "debug_package %{nil}", "__os_install_post %{nil}")


def missing_tools() -> str:
    """Why the real-package images cannot be built here ("" when they can)."""
    for tool, package in (("rpmbuild", "rpm"), ("rpm", "rpm"), ("dpkg-deb", "dpkg"), ("dpkg", "dpkg")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {package})"
    if os.geteuid() != 0:
        return "rpm --root and dpkg --root need root"
    return ""


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")


@dataclass
class Pkg:
    """One package to build: its files (path -> content) and symlinks (path -> target)."""

    name: str
    version: str
    release: str
    vendor: str = FEDORA
    packager: str = FEDORA
    files: dict[str, bytes | str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)

    @property
    def evr(self) -> str:
        return f"{self.version}-{self.release}" if self.release else self.version


def build_rpm(pkg: Pkg, machine: int, work: Path) -> Path:
    """rpmbuild a binary rpm of this package for the machine's arch; returns the .rpm."""
    arch = RPM_ARCH[machine]
    stage = work / f"stage-{pkg.name}-{arch}"
    _stage(stage, pkg)
    header = [
        f"Name: {pkg.name}",
        f"Version: {pkg.version}",
        f"Release: {pkg.release}",
        "Summary: cgpu test package",
        "License: MIT",
        "AutoReqProv: no",
    ]
    header += [f"Vendor: {pkg.vendor}"] if pkg.vendor else []
    header += [f"Packager: {pkg.packager}"] if pkg.packager else []
    listed = sorted({*pkg.files, *pkg.links})
    spec = work / f"{pkg.name}-{arch}.spec"
    spec.write_text(
        "\n".join(header)
        + f"\n%description\ncgpu test package\n%install\ncp -a {stage}/. %{{buildroot}}/\n%files\n"
        + "\n".join(f'"{path}"' for path in listed)
        + "\n"
    )
    top = work / "rpmbuild"
    defines = [arg for define in (f"_topdir {top}", *RPMBUILD_DEFINES) for arg in ("--define", define)]
    _run("rpmbuild", "-bb", "--target", arch, *defines, str(spec))
    return top / "RPMS" / arch / f"{pkg.name}-{pkg.evr}.{arch}.rpm"


def build_deb(pkg: Pkg, machine: int, work: Path) -> Path:
    """dpkg-deb a package of this package for the machine's arch; the vendor is its Maintainer."""
    arch = DEB_ARCH[machine]
    stage = work / f"deb-{pkg.name}-{arch}"
    _stage(stage, pkg)
    (stage / "DEBIAN").mkdir()
    (stage / "DEBIAN/control").write_text(
        f"Package: {pkg.name}\nVersion: {pkg.evr}\nArchitecture: {arch}\nMaintainer: {pkg.vendor}\n"
        "Description: cgpu test package\n built by the image-check tests\n"
    )
    out = work / f"{pkg.name}_{pkg.evr}_{arch}.deb"
    _run("dpkg-deb", "--root-owner-group", "--build", str(stage), str(out))
    return out


def _stage(stage: Path, pkg: Pkg) -> None:
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    for path, content in pkg.files.items():
        target = stage / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
    for path, link in pkg.links.items():
        target = stage / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(link, target)


class LayeredRoot:
    """A root filesystem built step by step; each `with root.step():` becomes one layer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        self.layers: list[bytes] = []
        self._before = self._snapshot()

    @contextmanager
    def step(self) -> Iterator[LayeredRoot]:
        yield self
        after = self._snapshot()
        self.layers.append(self._layer(self._before, after))
        self._before = after

    # --- what build steps do ------------------------------------------------------------------
    def rpm_install(self, *rpms: Path) -> None:
        if not (self.path / RPMDB.lstrip("/")).exists():
            _run("rpm", "--root", str(self.path), "--dbpath", RPMDB, "--initdb")
        _run(
            "rpm",
            "--root",
            str(self.path),
            "--dbpath",
            RPMDB,
            "-i",
            "--nodeps",
            "--noscripts",
            "--ignorearch",
            "--ignoreos",
            *map(str, rpms),
        )

    def rpm_erase(self, name: str) -> None:
        _run("rpm", "--root", str(self.path), "--dbpath", RPMDB, "-e", "--nodeps", "--noscripts", name)

    def dpkg_install(self, *debs: Path) -> None:
        admin = self.path / "var/lib/dpkg"
        for folder in ("info", "updates"):
            (admin / folder).mkdir(parents=True, exist_ok=True)
        (admin / "status").touch()
        _run(
            "dpkg",
            f"--root={self.path}",
            "--force-architecture",
            "--force-depends",
            "--log=/dev/null",
            "-i",
            *map(str, debs),
        )

    def write(self, path: str, content: str) -> None:
        target = self.path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)

    def remove(self, path: str) -> None:
        (self.path / path.lstrip("/")).unlink()

    # --- layers ---------------------------------------------------------------------------------
    def _snapshot(self) -> dict[str, tuple[str, str]]:
        seen: dict[str, tuple[str, str]] = {}
        for folder, dirs, files in os.walk(self.path):
            for name in dirs + files:
                full = os.path.join(folder, name)
                rel = os.path.relpath(full, self.path)
                if os.path.islink(full):
                    seen[rel] = ("link", os.readlink(full))
                elif os.path.isdir(full):
                    seen[rel] = ("dir", "")
                else:
                    seen[rel] = ("file", hashlib.sha256(Path(full).read_bytes()).hexdigest())
        return seen

    def _layer(self, before: dict[str, tuple[str, str]], after: dict[str, tuple[str, str]]) -> bytes:
        """Added and changed paths (with their parent directories), and whiteouts for removed ones."""
        changed = {path for path, what in after.items() if before.get(path) != what}
        for path in list(changed):
            parent = os.path.dirname(path)
            while parent:
                changed.add(parent)
                parent = os.path.dirname(parent)
        removed = {path for path in before if path not in after}
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(changed):
                tar.add(self.path / path, arcname=path, recursive=False)
            for path in sorted(removed):
                if os.path.dirname(path) not in removed:  # the topmost removed path hides what is under it
                    info = tarfile.TarInfo(os.path.join(os.path.dirname(path), ".wh." + os.path.basename(path)))
                    tar.addfile(info)
        return out.getvalue()


# --- the packages of a Fedora 44 image and of a Debian 12 one ----------------------------------

LIBKRUN_VR = ("25.3.6", "102.fc44")  # the pin krunkit/Containerfile uses
COPR_REPO = "copr:copr.fedorainfracloud.org:slp:mesa-libkrun-vulkan"


def fedora_base(machine: int) -> list[Pkg]:
    return [
        Pkg(
            "filesystem",
            "3.18",
            "47.fc44",
            links={
                "/lib": "usr/lib",
                "/lib64": "usr/lib64",
                "/bin": "usr/bin",
                "/var/lib/rpm": "../../usr/lib/sysimage/rpm",
            },
        ),
        Pkg(
            "fedora-release-common",
            "44",
            "1",
            files={
                "/usr/lib/os-release": 'NAME="Fedora Linux"\nVERSION_ID=44\nID=fedora\n'
                'PRETTY_NAME="Fedora Linux 44 (Container Image)"\n'
            },
            links={"/etc/os-release": "../usr/lib/os-release"},
        ),
        Pkg(
            "glibc",
            "2.42",
            "5.fc44",
            files={
                f"/usr/lib/ld-linux-{'aarch64' if machine == AARCH64 else 'x86-64'}.so.1": elf(machine),
                "/usr/lib64/libc.so.6": elf(machine),
            },
        ),
        Pkg("bash", "5.3.0", "2.fc44", files={"/usr/bin/bash": elf(machine)}, links={"/usr/bin/sh": "bash"}),
        Pkg(
            "python3",
            "3.14.0",
            "1.fc44",
            files={"/usr/bin/python3.14": elf(machine)},
            links={"/usr/bin/python3": "python3.14"},
        ),
    ]


def mesa(machine: int, vendor: str, release: str, packager: str = "") -> Pkg:
    """mesa-vulkan-drivers as Fedora packages it: Venus and lavapipe, libraries and manifests."""
    arch = RPM_ARCH[machine]
    return Pkg(
        "mesa-vulkan-drivers",
        LIBKRUN_VR[0],
        release,
        vendor=vendor,
        packager=packager,
        files={
            "/usr/lib64/libvulkan_virtio.so": elf(machine),
            "/usr/lib64/libvulkan_lvp.so": elf(machine),
            f"/usr/share/vulkan/icd.d/virtio_icd.{arch}.json": icd("/usr/lib64/libvulkan_virtio.so"),
            f"/usr/share/vulkan/icd.d/lvp_icd.{arch}.json": icd("/usr/lib64/libvulkan_lvp.so"),
        },
    )


def vulkan_loader(machine: int) -> Pkg:
    return Pkg(
        "vulkan-loader",
        "1.4.313.0",
        "1.fc44",
        files={"/usr/lib64/libvulkan.so.1.4.313": elf(machine)},
        links={"/usr/lib64/libvulkan.so.1": "libvulkan.so.1.4.313"},
    )


def dnf_records(root: LayeredRoot, installed: dict[str, str], *, copr: str = "", lock: str = "") -> None:
    """What dnf5 leaves besides rpm's database: `copr enable`'s repo file, the from-repository
    records, and `versionlock add`'s lock."""
    if copr:
        name, text = copr_repo_file(copr)
        root.write(f"/etc/yum.repos.d/{name}", text)
    root.write("/usr/lib/sysimage/libdnf5/nevras.toml", nevras_toml(installed))
    if lock:
        name, _, evr = lock.partition("=")
        root.write(
            "/etc/dnf/versionlock.toml",
            f'version = "1.0"\n\n[[packages]]\nname = "{name}"\ncomment = "Added by \'versionlock add\' command"\n\n'
            f'[[packages.conditions]]\nkey = "evr"\ncomparator = "="\nvalue = "{evr}"\n',
        )
