"""The checks behind `cgpu image check`: would this image get `vulkan` in a krunkit VM?

Under krunkit the only GPU a container sees is virtio-gpu with Venus: Mesa's
`libvulkan_virtio.so` serialises Vulkan to the host. Stock Mesa fails there (its blobs are
not 16 KiB aligned, Venus returns VK_ERROR_OUT_OF_HOST_MEMORY and the loader then aborts
vkCreateInstance for every driver); the libkrun build from copr `slp/mesa-libkrun-vulkan`
carries the alignment patches. So the image needs: an arm64 glibc userland, the Vulkan
loader, the Venus ICD manifest and library, and that Mesa build (pinned, so a later
`dnf update` does not bring stock Mesa back).
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
from dataclasses import asdict, dataclass
from typing import Any

from cgpu.image.fs import ImageReadError, Tree
from cgpu.image.source import OpenedImage
from cgpu.node.packages import (
    COPR_HUB,
    CoprRepo,
    Package,
    copr_owner,
    lock_matches,
    parse_copr_repo_id,
    read_apk_installed,
    read_dnf5_nevras,
    read_dpkg_status,
    read_repo_file,
    read_rpmdb,
    read_versionlock_list,
    read_versionlock_toml,
)
from cgpu.problem import Problem, Severity

COPR = "slp/mesa-libkrun-vulkan"
OLD_COPR = "slp/mesa-krunkit"
COPR_OWNER = COPR.split("/")[0]
PIN_EXAMPLE = "25.3.6-102.fc44"  # the newest pin seen (ramalama v0.24.0); check the copr for yours
VENUS_LIBRARY = "libvulkan_virtio.so"
DPKG_STATUS, APK_INSTALLED = "var/lib/dpkg/status", "lib/apk/db/installed"
INSTALL_FIX = (
    f"`dnf -y install dnf-plugins-core python3-dnf-plugin-versionlock && "
    f"dnf -y copr enable {COPR} && dnf -y install mesa-vulkan-drivers-<copr build, e.g. "
    f"{PIN_EXAMPLE}> vulkan-loader && dnf versionlock add mesa-vulkan-drivers-<same>`"
)


def enable_copr(name: str) -> str:
    return f"dnf -y install dnf-plugins-core && dnf -y copr enable {name}"


REBASE_FIX = f"rebase the image on Fedora (copr {COPR} builds the libkrun Mesa for Fedora), then {INSTALL_FIX}"

LIB_DIRS = (
    "usr/lib64",
    "lib64",
    "usr/lib",
    "lib",
    "usr/lib/aarch64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "usr/lib/x86_64-linux-gnu",
    "lib/x86_64-linux-gnu",
    "usr/local/lib64",
    "usr/local/lib",
)
RPMDB_DIRS = ("usr/lib/sysimage/rpm", "var/lib/rpm")
REPO_DIR = "etc/yum.repos.d"
DNF5_NEVRAS = "usr/lib/sysimage/libdnf5/nevras.toml"  # libdnf5's system state: where each package came from
ELF_MACHINES = {183: "arm64", 62: "amd64", 3: "386", 40: "arm", 243: "riscv64", 21: "ppc64le", 22: "s390x"}
ARCH_ALIASES = {"aarch64": "arm64", "x86_64": "amd64"}
# Mesa's other Vulkan drivers, by library name: none finds a device in a krunkit VM, and the
# loader skips a driver whose vkCreateInstance fails with anything but out-of-memory.
SOFTWARE_ICDS = {"libvulkan_lvp.so": "lavapipe"}
STOCK_VENDORS = ("Fedora Project", "Red Hat", "CentOS", "Rocky", "AlmaLinux", "Amazon", "SUSE", "openSUSE", "Oracle")


@dataclass
class Check:
    name: str
    status: str  # "pass", "fail", "unknown", or "skip" (does not apply to this image)
    evidence: str
    fix: str = ""
    required: bool = True  # False: advisory, does not change the verdict


@dataclass
class Manifest:
    path: str  # as found, root-relative
    library: str = ""  # library_path as written
    library_file: str = ""  # resolved inside the image, "" when missing
    error: str = ""

    @property
    def kind(self) -> str:
        name = posixpath.basename(self.library or "")
        if name.startswith("libvulkan_virtio") or posixpath.basename(self.path).startswith("virtio_icd"):
            return "venus"
        return SOFTWARE_ICDS.get(name, "other")


class Facts:
    """What the checks read from the image, each read once."""

    def __init__(self, image: OpenedImage) -> None:
        self.image = image
        self.tree: Tree = image.tree
        self.env = image.env
        self.problems: list[Problem] = []
        self.configured_dirs: list[str] = []  # LD_LIBRARY_PATH's and ld.so.conf's, before the default ones
        self.lib_dirs = self._lib_dirs()
        self.os_name = self._os_release()
        self.packages, self.package_db = self._packages()
        self._copr_repos: dict[CoprRepo, tuple[bool, str]] | None = None
        self._nevras: dict[str, str] | None = None

    def problem(self, severity: Severity, source: str, message: str) -> None:
        self.problems.append(Problem(severity, source, message, "image"))

    def _lib_dirs(self) -> list[str]:
        dirs = [d.strip("/") for d in self.env.get("LD_LIBRARY_PATH", "").split(":") if d.strip("/")]
        for conf in ["etc/ld.so.conf"] + [
            f"etc/ld.so.conf.d/{n}" for n in self.tree.listdir("etc/ld.so.conf.d") if n.endswith(".conf")
        ]:
            try:
                text = self.tree.read(conf).decode("utf-8", "replace")
            except ImageReadError:
                continue
            for line in text.splitlines():
                line = line.split("#", 1)[0].strip()
                if line and not line.startswith("include") and line.startswith("/"):
                    dirs.append(line.strip("/"))
        self.configured_dirs = list(dict.fromkeys(dirs))
        return list(dict.fromkeys([*dirs, *LIB_DIRS]))

    def _os_release(self) -> str:
        for path in ("etc/os-release", "usr/lib/os-release"):
            try:
                text = self.tree.read(path).decode("utf-8", "replace")
            except ImageReadError:
                continue
            fields: dict[str, str] = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', text, re.M))
            return fields.get("PRETTY_NAME") or fields.get("NAME", "")
        return ""

    def _packages(self) -> tuple[list[Package], str]:
        for folder in RPMDB_DIRS:
            db = f"{folder}/rpmdb.sqlite"
            if not self.tree.is_file(db):
                continue
            try:
                wal = self.tree.read(db + "-wal", 256 * 1024**2) if self.tree.is_file(db + "-wal") else None
                packages, bad = read_rpmdb(
                    self.tree.read(db, 1024**3), wal, files_with=VENUS_LIBRARY.encode(), deadline=self.tree.deadline
                )
            except ImageReadError as exc:
                self.problem("warning", f"/{db}", str(exc))
                return [], f"/{db} (unreadable)"
            for message in bad[:5]:
                self.problem("warning", f"/{db}", message)
            if len(bad) > 5:
                self.problem("warning", f"/{db}", f"{len(bad) - 5} more unreadable package headers")
            return packages, f"/{db}"
        for folder in RPMDB_DIRS:
            if self.tree.exists(f"{folder}/Packages") or self.tree.exists(f"{folder}/Packages.db"):
                self.problem(
                    "info",
                    f"/{folder}",
                    "rpm database in the Berkeley DB/ndb format, which cgpu "
                    "does not read (Fedora 33+ and EL9 use sqlite)",
                )
                return [], f"/{folder} (Berkeley DB, not read)"
        for path in (DPKG_STATUS, APK_INSTALLED):
            if self.tree.is_file(path):
                try:
                    text = self.tree.read(path, 256 * 1024**2).decode("utf-8", "replace")
                    if path == DPKG_STATUS:
                        return read_dpkg_status(text, self.tree.deadline), f"/{path}"
                    # only the Venus library's owner is asked for (`owner`): no other path is kept
                    found = read_apk_installed(text, files_with=VENUS_LIBRARY, deadline=self.tree.deadline)
                    return found, f"/{path}"
                except ImageReadError as exc:
                    self.problem("warning", f"/{path}", str(exc))
                    return [], f"/{path} (unreadable)"
        return [], ""

    @property
    def rpm_based(self) -> bool:
        return "/rpm" in self.package_db

    def install(self, rpm: str, deb: str, apk: str) -> str:
        """The install command for this image's package manager."""
        if "dpkg" in self.package_db:
            return f"`apt-get install -y {deb}`"
        if "apk" in self.package_db:
            return f"`apk add {apk}`"
        return f"`dnf -y install {rpm}`"

    def reinstall(self, package: Package, copr: CoprRepo | None = None) -> str:
        """The command that puts back the files of the installed build (from its copr, if it came from one)."""
        if "dpkg" in self.package_db:
            return f"`apt-get install -y --reinstall {package.name}`"
        if copr is None:
            return f"`dnf -y reinstall {package.name}`"
        # dnf reinstalls only from an enabled repository that has this very build
        enabled = self.copr_repos().get(copr, (False, ""))[0]
        enable = "" if enabled else f"{enable_copr(copr.name)} && "
        return f"`{enable}dnf -y reinstall {package.nevr}`"

    def copr_repos(self) -> dict[CoprRepo, tuple[bool, str]]:
        """The copr repositories the image's dnf knows (enabled?, the .repo file), from /etc/yum.repos.d."""
        if self._copr_repos is None:
            self._copr_repos = {}
            for name in sorted(self.tree.listdir(REPO_DIR)):
                if not name.endswith(".repo"):
                    continue
                try:
                    sections = read_repo_file(self.tree.read(f"{REPO_DIR}/{name}").decode("utf-8", "replace"))
                except ImageReadError as exc:
                    self.problem("warning", f"/{REPO_DIR}/{name}", str(exc))
                    continue
                for section, enabled in sections.items():
                    repo = parse_copr_repo_id(section)
                    if repo is not None and repo.hub == COPR_HUB:
                        self._copr_repos.setdefault(repo, (enabled, f"/{REPO_DIR}/{name}"))
        return self._copr_repos

    def from_repo(self, package: Package) -> str:
        """The repository dnf5 recorded this package as installed from, "" when it kept no record."""
        if self._nevras is None:
            self._nevras = {}
            if self.tree.is_file(DNF5_NEVRAS):
                try:
                    text = self.tree.read(DNF5_NEVRAS, 64 * 1024**2).decode("utf-8", "replace")
                    self._nevras = read_dnf5_nevras(text)
                except ImageReadError as exc:
                    self.problem("warning", f"/{DNF5_NEVRAS}", str(exc))
        return self._nevras.get(package.nevra, "")

    def mesa_fix(self) -> str:
        return INSTALL_FIX if self.rpm_based or not self.package_db else REBASE_FIX

    def package(self, name: str) -> Package | None:
        return next((p for p in self.packages if p.name == name), None)

    def owner(self, path: str) -> Package | None:
        """The package whose file list holds this path (rpm, apk), or the usual one by name."""
        full = "/" + path
        owner = next((p for p in self.packages if full in p.files), None)
        return owner or self.package("mesa-vulkan-drivers")

    def find_library(self, name: str) -> str:
        """The library as the dynamic linker would find it: its path (root-relative), or ""."""
        for folder in self.lib_dirs:
            if self.tree.is_file(f"{folder}/{name}"):
                return f"{folder}/{name}"
        return ""

    def real(self, path: str) -> str:
        return self.tree.lookup(path)[0]

    def elf_arch(self, path: str) -> str:
        head = self.tree.head(path)
        if len(head) < 20 or head[:4] != b"\x7fELF":
            return ""
        machine = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
        return ELF_MACHINES.get(machine, f"ELF machine {machine}")

    # --- Vulkan ICD manifests, found the way the loader finds them -----------------------
    def icd_dirs(self) -> list[str]:
        config = self.env.get("XDG_CONFIG_DIRS") or "/etc/xdg"
        data = self.env.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share"
        dirs = [f"{d.strip('/')}/vulkan/icd.d" for d in config.split(":") if d.strip("/")]
        dirs.append("etc/vulkan/icd.d")
        dirs += [f"{d.strip('/')}/vulkan/icd.d" for d in data.split(":") if d.strip("/")]
        return list(dict.fromkeys(dirs))

    def manifests(self) -> tuple[list[Manifest], str]:
        """Every ICD manifest the loader would read, and the env var that chose them, if any."""
        chosen = next((var for var in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES") if self.env.get(var)), "")
        paths: list[str] = []
        sources = self.env[chosen].split(":") if chosen else self.icd_dirs()
        extra = self.env.get("VK_ADD_DRIVER_FILES", "")
        for item in [*sources, *(extra.split(":") if extra else [])]:
            item = item.strip("/")
            if not item:
                continue
            if item.endswith(".json"):
                paths.append(item)
            else:
                paths += [f"{item}/{n}" for n in self.tree.listdir(item) if n.endswith(".json")]
        return [self._manifest(path) for path in dict.fromkeys(paths)], chosen

    def _manifest(self, path: str) -> Manifest:
        manifest = Manifest(path)
        try:
            document = json.loads(self.tree.read(path, 1024**2))
        except ImageReadError as exc:
            manifest.error = str(exc)
            return manifest
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            manifest.error = f"/{path} is not valid JSON ({exc})"
            return manifest
        icd = document.get("ICD") if isinstance(document, dict) else None
        library = icd.get("library_path") if isinstance(icd, dict) else None
        if not isinstance(library, str) or not library:
            manifest.error = f"/{path} has no ICD.library_path"
            return manifest
        manifest.library = library
        if "/" in library:  # absolute, or relative to the manifest's folder
            candidate = (
                library.lstrip("/")
                if library.startswith("/")
                else posixpath.join(posixpath.dirname(self.real(path)), library)
            )
            manifest.library_file = self.real(candidate) if self.tree.is_file(candidate) else ""
        else:
            found = self.find_library(library)
            manifest.library_file = self.real(found) if found else ""
        return manifest


def run_checks(image: OpenedImage) -> tuple[list[Check], list[Problem], dict[str, Any]]:
    """All checks in report order, the problems met, and facts worth showing (os, packages)."""
    facts = Facts(image)
    manifests, chosen_by = facts.manifests()
    venus = [m for m in manifests if m.kind == "venus"]
    for manifest in manifests:
        if manifest.error and manifest.kind != "venus":
            facts.problem("warning", f"/{manifest.path}", f"{manifest.error}; the Vulkan loader skips it")
    mesa, package = _mesa_build(facts, venus)
    libkrun = package if mesa.status == "pass" else None
    architecture, arch = _architecture(facts, venus)
    checks = [
        architecture,
        _libc(facts),
        _loader(facts),
        _venus_icd(facts, venus, chosen_by, libkrun),
        _other_icds(manifests),
        mesa,
        _version_lock(facts, libkrun),
        _python(facts),
    ]
    info = {
        "os": facts.os_name,
        "package_database": facts.package_db,
        "mesa_package": package.nevr if package else "",
        "architecture": arch,  # the config's, else read from the ELF files
    }
    return checks, facts.problems, info


def verdict(checks: list[Check]) -> tuple[str, str]:
    """yes / no / unknown, and why in one sentence."""
    required = [c for c in checks if c.required]
    failed = [c.name for c in required if c.status == "fail"]
    unknown = [c.name for c in required if c.status == "unknown"]
    if failed:
        return "no", f"{', '.join(failed)} failed; apply each failed check's fix"
    if unknown:
        return "unknown", (
            f"could not tell from the image: {', '.join(unknown)}; to be sure, run "
            "`vulkaninfo --summary` in it with --device /dev/dri on a krunkit VM and look for "
            "a Virtio-GPU Venus device"
        )
    return "yes", (
        "the image has the Vulkan loader and the Venus driver of Mesa's libkrun build; run with "
        "--device /dev/dri in a krunkit VM it gets vulkan"
    )


def check_dicts(checks: list[Check]) -> list[dict[str, Any]]:
    return [asdict(c) for c in checks]


# --- the checks ------------------------------------------------------------------------------


def _architecture(facts: Facts, venus: list[Manifest]) -> tuple[Check, str]:
    """The check, and the image's architecture: the config's, else the first ELF file's.
    Every ELF file looked at must be arm64 too: an arm64-tagged image with an x86-64 loader or
    Venus driver cannot run on the Mac whatever its config says."""
    declared = ARCH_ALIASES.get(facts.image.architecture or "", facts.image.architecture or "")
    probes = [m.library_file for m in venus if m.library_file] + [
        p for p in (facts.find_library("libvulkan.so.1"), facts.find_library("libc.so.6"), "bin/sh") if p
    ]
    seen = [(p, a) for p in dict.fromkeys(probes) if (a := facts.elf_arch(p))]
    arch = declared or (seen[0][1] if seen else "")
    fix = "build the image for linux/arm64 (`podman build --platform linux/arm64`)"
    if not arch:
        return Check("architecture", "unknown", "no image config and no ELF file to tell the CPU architecture", fix), ""
    where = "the image config" if declared else f"/{seen[0][0]}"
    why = "krunkit VMs run arm64 only (Apple silicon), and an emulated container gets no GPU"
    if arch != "arm64":
        return Check("architecture", "fail", f"{arch} (from {where}); {why}", fix), arch
    foreign = [(p, a) for p, a in seen if a != "arm64"]
    if foreign:
        files = ", ".join(f"/{p} is {a}" for p, a in foreign[:3])
        said = "the config says arm64" if declared else f"/{seen[0][0]} is arm64"
        return Check("architecture", "fail", f"{said} but {files}: the files decide; {why}", fix), arch
    return Check("architecture", "pass", f"arm64 (from {where}), what a krunkit VM on Apple silicon runs"), arch


def _libc(facts: Facts) -> Check:
    glibc = next(
        (
            f"{d}/{n}"
            for d in facts.lib_dirs
            for n in facts.tree.listdir(d)
            if n.startswith("ld-linux") or n == "libc.so.6"
        ),
        "",
    )
    musl = next((f"lib/{n}" for n in facts.tree.listdir("lib") if n.startswith("ld-musl-")), "")
    fix = REBASE_FIX
    if glibc:
        package = facts.package("glibc") or facts.package("libc6")
        version = f" ({package.nevr})" if package else ""
        note = f"; /{musl} is there too" if musl else ""
        return Check("libc", "pass", f"glibc: /{glibc}{version}{note}")
    if musl:
        return Check("libc", "fail", f"musl (/{musl}): the libkrun Mesa build and cgpu's probe need glibc", fix)
    return Check("libc", "unknown", "neither glibc (ld-linux*, libc.so.6) nor musl (/lib/ld-musl-*) found", fix)


def _loader(facts: Facts) -> Check:
    found = facts.find_library("libvulkan.so.1")
    fix = "install the Vulkan loader: " + facts.install("vulkan-loader", "libvulkan1", "vulkan-loader")
    if not found:
        folders = ", ".join(f"/{d}" for d in facts.lib_dirs[:4])
        return Check("vulkan-loader", "fail", f"no libvulkan.so.1 in the library path ({folders}, ...)", fix)
    real = facts.real(found)
    package = facts.package("vulkan-loader") or facts.package("libvulkan1")
    via = f" -> /{real}" if real != found else ""
    return Check("vulkan-loader", "pass", f"/{found}{via}" + (f" ({package.nevr})" if package else ""))


def _venus_icd(facts: Facts, venus: list[Manifest], chosen_by: str, libkrun: Package | None) -> Check:
    installed = libkrun or facts.package("mesa-vulkan-drivers")
    copr = _copr_origin(facts, libkrun)[0] if libkrun else None
    # with Mesa installed, `dnf install` of it does nothing: only a reinstall puts its files back
    restore = facts.reinstall(installed, copr) if installed else facts.mesa_fix()
    where = f"${chosen_by}" if chosen_by else ", ".join(f"/{d}" for d in facts.icd_dirs())
    if not venus:
        if chosen_by:
            fix = f"add the Venus manifest to {chosen_by} or unset it in the image"
        elif installed:
            fix = f"restore the files Mesa installs: {restore} (if a build step deleted the manifest, fix that step)"
        else:
            fix = restore
        return Check("venus-icd", "fail", f"no Venus ICD manifest (virtio_icd*.json) in {where}", fix)
    good = [m for m in venus if m.library_file]
    if not good:
        first = venus[0]
        searched = (
            f" (searched {', '.join('/' + d for d in facts.lib_dirs[:4])}, ...)" if "/" not in first.library else ""
        )
        why = first.error or f"/{first.path} names {first.library}, which is not in the image{searched}"
        return Check(
            "venus-icd",
            "fail",
            why,
            f"restore the files Mesa installs: {restore} (if a build step "
            f"wrote or edited /{first.path} or deleted the library, fix that step)",
        )
    manifest = good[0]
    selector = _filtered_out(facts.env, manifest.path)
    if selector:
        return Check(
            "venus-icd",
            "fail",
            f"/{manifest.path} is there but {selector} in the image's environment hides it from the loader",
            f"remove {selector.split('=')[0]} from the image",
        )
    arch = facts.elf_arch(manifest.library_file)
    if not arch:
        return Check(
            "venus-icd",
            "fail",
            f"/{manifest.path} names /{manifest.library_file}, which is not an ELF library",
            f"restore the files Mesa installs: {restore}",
        )
    via = f" -> /{manifest.library_file}" if manifest.library_file != manifest.library.lstrip("/") else ""
    return Check("venus-icd", "pass", f"/{manifest.path} names {manifest.library}{via} ({arch} ELF)")


def _filtered_out(env: dict[str, str], manifest: str) -> str:
    """The loader's VK_LOADER_DRIVERS_SELECT/DISABLE setting that drops this manifest, if any."""
    name = posixpath.basename(manifest)
    select = env.get("VK_LOADER_DRIVERS_SELECT")
    if select and not any(fnmatch.fnmatchcase(name, glob) for glob in select.split(",")):
        return f"VK_LOADER_DRIVERS_SELECT={select}"
    disable = env.get("VK_LOADER_DRIVERS_DISABLE")
    if disable and any(fnmatch.fnmatchcase(name, glob) or glob == "~all~" for glob in disable.split(",")):
        return f"VK_LOADER_DRIVERS_DISABLE={disable}"
    return ""


def _other_icds(manifests: list[Manifest]) -> Check:
    venus_libraries = {m.library_file for m in manifests if m.kind == "venus" and m.library_file}
    others = [m for m in manifests if m.kind != "venus"]
    names = ", ".join(f"/{m.path}" + (f" ({m.kind})" if m.kind != "other" else "") for m in others)
    if len(venus_libraries) > 1:
        listed = ", ".join(f"/{lib}" for lib in sorted(venus_libraries))
        return Check(
            "other-icds",
            "fail",
            f"two Venus drivers: {listed}; the loader loads both, and one without "
            "the libkrun patches makes vkCreateInstance fail for all",
            "keep only the libkrun build's libvulkan_virtio.so and its manifest",
        )
    if not others:
        return Check("other-icds", "pass", "no other Vulkan drivers")
    notes = []
    if any(m.kind == "lavapipe" for m in others):
        notes.append("lavapipe is a CPU driver: its device never counts as a GPU, so apps must pick the Venus one")
    if any(m.kind == "other" for m in others):
        notes.append("drivers for other GPUs find no device in a krunkit VM and the loader skips them")
    return Check("other-icds", "pass", f"also installed: {names}; {'; '.join(notes)}")


def _mesa_build(facts: Facts, venus: list[Manifest]) -> tuple[Check, Package | None]:
    library = next((m.library_file for m in venus if m.library_file), "")
    package = facts.owner(library) if library else facts.package("mesa-vulkan-drivers")
    fix = facts.mesa_fix()
    if package is None:
        if not facts.package_db:
            return Check(
                "mesa-build",
                "unknown",
                "no package database (rpm, dpkg, apk) in the image, so the Mesa build cannot be told",
                fix,
            ), None
        if not facts.packages:
            return Check(
                "mesa-build",
                "unknown",
                f"no package list could be read from {facts.package_db}, so the Mesa build cannot be told",
                fix,
            ), None
        if not library:
            return Check("mesa-build", "fail", f"no Mesa Vulkan drivers package in {facts.package_db}", fix), None
        return Check(
            "mesa-build",
            "unknown",
            f"/{library} belongs to no package in {facts.package_db} "
            "(built from source?), so cgpu cannot tell whether it carries the "
            "libkrun alignment patches",
            fix,
        ), None
    where = f"{package.nevr} ({facts.package_db}"
    if not facts.rpm_based:
        return Check(
            "mesa-build",
            "fail",
            f"{where}): the distribution's stock Mesa, without the 16 KiB "
            "alignment patches, so Venus fails vkCreateInstance with "
            "VK_ERROR_OUT_OF_HOST_MEMORY",
            fix,
        ), package
    vendor = package.vendor or "no vendor"
    owner = copr_owner(package.vendor)
    if owner:
        return _copr_build(facts, package, owner, f"{where}, vendor {vendor!r})", fix), package
    if any(package.vendor.startswith(v) for v in STOCK_VENDORS):
        return Check(
            "mesa-build",
            "fail",
            f"{where}, vendor {vendor!r}): stock Mesa, without the 16 KiB alignment "
            "patches, so Venus fails vkCreateInstance with "
            "VK_ERROR_OUT_OF_HOST_MEMORY under krunkit",
            fix,
        ), package
    release = re.match(r"\d+", package.release)
    hint = (
        " Its release number (100+) follows the libkrun build's numbering."
        if release and int(release.group()) >= 100
        else ""
    )
    why = f"{where}, vendor {vendor!r}): not the copr's build as far as cgpu can tell (a local rebuild?).{hint}"
    return Check("mesa-build", "unknown", why, fix), package


def _copr_build(facts: Facts, package: Package, owner: str, stamp: str, fix: str) -> Check:
    """A Fedora Copr build: the vendor names its owner; the image's dnf records name the project."""
    unsure = "cgpu cannot tell whether it has the 16 KiB alignment patches"
    if owner != COPR_OWNER:
        return Check("mesa-build", "unknown", f"{stamp}: built in a copr of {owner}, not in {COPR}; {unsure}", fix)
    repo, source = _copr_origin(facts, package)
    if repo is not None and repo.name == COPR:
        return Check("mesa-build", "pass", f"{stamp}: the libkrun build; {source}")
    if repo is not None and repo.name == OLD_COPR:
        return Check(
            "mesa-build",
            "pass",
            f"{stamp}: the libkrun build from the old copr {OLD_COPR}; {source}",
            f"move to copr {COPR}, which has current Fedora releases",
        )
    if repo is not None:
        return Check("mesa-build", "unknown", f"{stamp}: {owner}'s copr {repo.project}, not {COPR}; {unsure}", fix)
    return Check(
        "mesa-build",
        "unknown",
        f"{stamp}: built in a copr of {COPR_OWNER}, but which one could not be confirmed: {source}; "
        f"another copr of {COPR_OWNER} may lack the 16 KiB alignment patches",
        f"reinstall it from the copr, which also records where it came from: `{enable_copr(COPR)} && dnf -y reinstall "
        f"{package.nevr}` (if dnf finds no such build there, it is not the copr's)",
    )


def _copr_origin(facts: Facts, package: Package) -> tuple[CoprRepo | None, str]:
    """Which copr project this package came from, and the record that says so.

    dnf5's per-package record comes first; without one, the copr repo files: one project of the
    owner configured is taken as the source, several or none leave it open.
    """
    recorded = facts.from_repo(package)
    if recorded:
        repo = parse_copr_repo_id(recorded)
        said = f"/{DNF5_NEVRAS} records it as installed from {recorded}"
        return (repo if repo is not None and repo.hub == COPR_HUB else None), said
    mine = {repo: where for repo, (_, where) in facts.copr_repos().items() if repo.owner == COPR_OWNER}
    if len(mine) == 1:
        [(repo, where)] = mine.items()
        return repo, f"{where} is the only copr of {COPR_OWNER} the image configures (no dnf5 record for it)"
    if mine:
        listed = ", ".join(sorted(repo.name for repo in mine))
        return None, f"the image configures several coprs of {COPR_OWNER} ({listed}) and has no dnf5 record for it"
    return None, f"no dnf5 record for it in /{DNF5_NEVRAS} and no {COPR_OWNER} copr repo file in /{REPO_DIR}"


def _version_lock(facts: Facts, package: Package | None) -> Check:
    if package is None or not facts.rpm_based:
        return Check(
            "version-lock",
            "skip",
            "nothing to hold until the image has the libkrun Mesa build "
            "(see mesa-build); then hold it with `dnf versionlock add`",
            required=False,
        )
    locks, files = [], []
    for path, reader in (
        ("etc/dnf/versionlock.toml", read_versionlock_toml),
        ("etc/dnf/plugins/versionlock.list", read_versionlock_list),
    ):
        if facts.tree.is_file(path):
            try:
                locks += reader(facts.tree.read(path).decode("utf-8", "replace"))
                files.append(f"/{path}")
            except ImageReadError as exc:
                facts.problem("warning", f"/{path}", str(exc))
    held, entry = lock_matches(locks, package)
    fix = f"`dnf versionlock add {package.nevr}` so a later `dnf update` cannot bring stock Mesa back"
    if held:
        return Check("version-lock", "pass", f"{package.name} is held: {entry} ({', '.join(files)})", required=False)
    if entry:
        return Check("version-lock", "fail", f"the lock is for another build: {entry}", fix, required=False)
    where = f"not in {', '.join(files)}" if files else "no dnf versionlock file"
    return Check("version-lock", "fail", f"{package.name} is not held ({where})", fix, required=False)


def _python(facts: Facts) -> Check:
    fix = facts.install("python3", "python3", "python3") + " (only cgpu's probe needs it, not Vulkan)"
    for candidate in ("usr/bin/python3", "usr/local/bin/python3", "bin/python3"):
        real, entry = facts.tree.lookup(candidate)
        if entry is None or entry.kind != "file":
            continue
        version = re.search(r"python(3\.\d+)", real) or next(
            (
                m
                for d in ("usr/lib64", "usr/lib", "usr/local/lib")
                for n in facts.tree.listdir(d)
                if (m := re.fullmatch(r"python(3\.\d+)", n))
            ),
            None,
        )
        if version is None:
            return Check("python", "pass", f"/{candidate} (version not told by its name)", required=False)
        minor = int(version.group(1).split(".")[1])
        if minor < 8:
            return Check(
                "python",
                "fail",
                f"/{candidate} is Python {version.group(1)}; the probe needs 3.8+",
                fix,
                required=False,
            )
        return Check(
            "python", "pass", f"/{candidate} -> /{real} (Python {version.group(1)}) runs cgpu's probe", required=False
        )
    return Check(
        "python", "fail", "no python3: cgpu's in-container probe cannot run in this image", fix, required=False
    )
