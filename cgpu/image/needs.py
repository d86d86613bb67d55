"""What each API's user space needs from a container image, checked against one image's files.

A node's report says per API what the node injects and, for a provided API, what the image must
bring (`image_needs` tokens, cgpu.apis.IMAGE_NEEDS). Here each token has one image check
(`TOKEN_CHECKS`: a new token gets its check there), a few APIs have a rule of their own beside
the tokens (`API_RULES`: the CUDA the image needs against the driver's, the gfx targets of the
image's ROCm against the node's GPU), and an API whose report lists `user_needs` (the device
nodes the container's user must be able to open) has the image's user checked against them.
Each rule and its source is in docs/image-check.md.

Checks are cgpu.image.checks.Check: pass, fail (the image lacks it: the fix says what to add),
unknown (the image cannot tell) or skip.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cgpu.image.checks import Check, Facts, _loader, _mesa_build
from cgpu.image.fs import ImageReadError

# --- what the rules read of the node's report ---------------------------------------------------

_GFX = re.compile(r"\btarget (gfx[0-9a-f]{3,5})\b")
# NVIDIA's data center products, as their names read (Tesla, A100, H100, L40S, GH200, ...): the GPUs CUDA's
# forward compatibility is for. GeForce and TITAN never are; RTX and Quadro only "select NGC Server Ready SKUs".
_DATACENTER = re.compile(r"\b(?:Tesla|[ABHLTVPK]\d{1,3}[A-Z]?|G[HB]\d{3})\b")
_CONSUMER = re.compile(r"\b(?:GeForce|TITAN)\b", re.I)


class Node:
    """The node's report, as the image rules read it."""

    def __init__(self, report: dict[str, Any]) -> None:
        self.report = report

    def texts(self, api: str) -> list[str]:
        """The API's evidence and every device's finding for it."""
        found = [str(self.report.get("evidence", {}).get(api, ""))]
        for device in self.report.get("devices", []):
            checks = device.get("checks") if isinstance(device, dict) else None
            if isinstance(checks, dict) and isinstance(checks.get(api), str):
                found.append(checks[api])
        return found

    def gfx_targets(self) -> list[str]:
        """The AMD GPUs' gfx targets: the probe's devices (gfx_target), else the cdi backend's findings."""
        targets = [
            device["gfx_target"]
            for device in self.report.get("devices", [])
            if isinstance(device, dict) and isinstance(device.get("gfx_target"), str)
        ]
        for text in self.texts("rocm"):
            targets += _GFX.findall(text)
        return list(dict.fromkeys(targets))

    def driver_cuda(self) -> tuple[str | None, str, str]:
        """(the driver's highest CUDA x.y or None, known|at-least|unknown, the driver version or '')."""
        driver = self.report.get("nvidia_driver")
        if not isinstance(driver, dict):
            return None, "unknown", ""
        return driver.get("cuda"), str(driver.get("cuda_state") or "unknown"), str(driver.get("version") or "")

    def datacenter_gpu(self) -> tuple[bool | None, str]:
        """Whether the node's NVIDIA GPU is one CUDA's forward compatibility is for, and why; None: cannot tell."""
        names = [
            (str(device.get("name", "")), device.get("integrated"))
            for device in self.report.get("devices", [])
            if isinstance(device, dict) and device.get("api") == "cuda"
        ]
        for name, integrated in names:
            if integrated:
                return True, f"{name} is an integrated (Jetson) GPU"
            if _CONSUMER.search(name):
                return False, f"{name} is a GeForce/TITAN GPU"
            if _DATACENTER.search(name):
                return True, f"{name} is a data center GPU"
        if names:
            return None, f"cgpu cannot tell whether {names[0][0]} is a data center GPU"
        return None, "the report names no NVIDIA GPU model (the cdi backend reads specs, not the GPU)"

    def vendor(self, api: str) -> str:
        """AMD, Intel or '' from the API's findings (which GPU the render node belongs to)."""
        text = " ".join(self.texts(api))
        return "AMD" if "AMD GPU" in text else "Intel" if "Intel GPU" in text else ""


# --- the image's facts beyond the krunkit checks' ------------------------------------------------


def version_key(text: str) -> tuple[int, ...]:
    """'12.4.1' as (12, 4, 1); the leading dotted number of a package version ('5.2.3-8' as (5, 2, 3)); ()
    for text that does not start with one."""
    match = re.match(r"(?:\d{1,9}:)?(\d{1,9}(?:\.\d{1,9})*)(?!\d)", text)  # a longer part is no version
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def _x_y(key: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in key[:2])


def _libc(facts: Facts) -> tuple[str, str]:
    """('glibc'|'musl'|'', the file that says so)."""
    for folder in facts.lib_dirs:
        for name in facts.tree.listdir(folder):
            if name == "libc.so.6" or name.startswith("ld-linux"):
                return "glibc", f"/{folder}/{name}"
    musl = next((f"/lib/{n}" for n in facts.tree.listdir("lib") if n.startswith("ld-musl-")), "")
    return ("musl", musl) if musl else ("", "")


def _find_anywhere(facts: Facts, name: str, extra: tuple[str, ...] = ()) -> str:
    """A library in the image's library path or one of `extra` folders (root-relative), or ''."""
    found = facts.find_library(name)
    if found:
        return found
    return next((f"{d}/{name}" for d in extra if facts.tree.is_file(f"{d}/{name}")), "")


def _package_text(facts: Facts, *names: str) -> str:
    package = next((p for name in names if (p := facts.package(name)) is not None), None)
    return f" ({package.nevr})" if package else ""


# --- one check per image_needs token ---------------------------------------------------------------

TokenCheck = Callable[[Facts, Node], Check]


def _glibc(facts: Facts, node: Node) -> Check:
    libc, where = _libc(facts)
    fix = "base the image on a glibc distribution (Debian, Ubuntu, Fedora, UBI), not Alpine or another musl one"
    if libc == "glibc":
        return Check("glibc", "pass", f"glibc: {where}{_package_text(facts, 'libc6', 'glibc')}")
    if libc == "musl":
        return Check(
            "glibc", "fail", f"musl ({where}) and no glibc: the node's user-space driver libraries need glibc", fix
        )
    return Check("glibc", "unknown", "neither glibc (ld-linux*, libc.so.6) nor musl (/lib/ld-musl-*) found", fix)


def _vulkan_loader(facts: Facts, node: Node) -> Check:
    return _loader(facts)


_OCL_ICD_PACKAGES = ("ocl-icd-libopencl1", "ocl-icd")
_KHRONOS_PACKAGES = ("khronos-opencl-icd-loader", "OpenCL-ICD-Loader", "opencl-icd-loader")


def _opencl_loader_kind(facts: Facts) -> tuple[str, str]:
    """('ocl-icd'|'khronos'|'' for not found|'unknown', the library's path)."""
    found = facts.find_library("libOpenCL.so.1")
    if not found:
        return "", ""
    if any(facts.package(name) for name in _OCL_ICD_PACKAGES):
        return "ocl-icd", found
    if any(facts.package(name) for name in _KHRONOS_PACKAGES):
        return "khronos", found
    return "unknown", found


def _opencl_loader(facts: Facts, node: Node, token: str = "opencl-icd-loader", want: str = "") -> Check:
    kind, found = _opencl_loader_kind(facts)
    fix = "install an OpenCL ICD loader: " + facts.install("ocl-icd", "ocl-icd-libopencl1", "ocl-icd")
    if not kind:
        return Check(token, "fail", "no libOpenCL.so.1 in the library path", fix)
    packages = _package_text(facts, *_OCL_ICD_PACKAGES, *_KHRONOS_PACKAGES)
    names = {"ocl-icd": "ocl-icd's loader", "khronos": "the Khronos loader"}
    if not want:
        return Check(token, "pass", f"/{found}{packages}")
    if kind == "unknown":
        return Check(token, "unknown", f"/{found}: no package says whose loader it is (ocl-icd or Khronos')")
    if kind != want:
        return Check(token, "fail", f"/{found} is {names[kind]}, the node's registration needs {names[want]}", fix)
    return Check(token, "pass", f"/{found}, {names[kind]}{packages}")


def _khronos_loader(facts: Facts, node: Node) -> Check:
    return _opencl_loader(facts, node, "khronos-opencl-loader", "khronos")


def _ocl_icd_loader(facts: Facts, node: Node) -> Check:
    return _opencl_loader(facts, node, "ocl-icd-loader", "ocl-icd")


def _libc_searches(token: str, folder: str, family: str) -> TokenCheck:
    """Whether the image's libc searches `folder` (a pattern): its own libc lives there, or its
    ld.so.conf or LD_LIBRARY_PATH names such a folder."""

    def check(facts: Facts, node: Node) -> Check:
        libc, where = _libc(facts)
        shown = "/" + folder.split("|")[0]
        if not libc:
            return Check(token, "unknown", f"no C library found to tell whether it searches {shown}")
        real = facts.real(where.lstrip("/"))
        if re.fullmatch(folder, posixpath.dirname(real)):
            return Check(token, "pass", f"{where} lives in /{posixpath.dirname(real)}: a {family} libc")
        listed = [d for d in facts.configured_dirs if re.fullmatch(folder, d)]
        if listed:
            return Check(token, "pass", f"the image's ld.so.conf or LD_LIBRARY_PATH names /{listed[0]}")
        return Check(
            token,
            "fail",
            f"{where} (/{real}) is a libc that does not search {shown}, where the node mounts its libraries",
            f"add that folder to /etc/ld.so.conf.d/ in the image and run ldconfig, or use a {family} base image",
        )

    return check


# Mesa's Vulkan drivers: the library each ICD manifest names, and the driver's name
_MESA_DRIVERS = {
    "AMD": ("libvulkan_radeon.so", "RADV"),
    "Intel": ("libvulkan_intel.so", "ANV"),
    "venus": ("libvulkan_virtio.so", "Venus"),
    "nvk": ("libvulkan_nouveau.so", "NVK"),
    "dozen": ("libvulkan_dzn.so", "Dozen"),
}


def _mesa(token: str, *kinds: str) -> TokenCheck:
    def check(facts: Facts, node: Node) -> Check:
        wanted = kinds or tuple(k for k in (node.vendor("vulkan"),) if k) or ("AMD", "Intel")
        libraries = {_MESA_DRIVERS[k][0]: _MESA_DRIVERS[k][1] for k in wanted}
        names = " or ".join(f"{name} ({library})" for library, name in libraries.items())
        fix = "install Mesa's Vulkan drivers: " + facts.install(
            "mesa-vulkan-drivers", "mesa-vulkan-drivers", "mesa-vulkan-ati mesa-vulkan-intel"
        )
        manifests, _ = facts.manifests()
        mesa = _package_text(facts, "mesa-vulkan-drivers")
        for manifest in manifests:
            library = posixpath.basename(manifest.library)
            if library in libraries and manifest.library_file:
                return Check(token, "pass", f"{libraries[library]}: /{manifest.path} -> /{manifest.library_file}{mesa}")
        broken = [m for m in manifests if posixpath.basename(m.library) in libraries]
        if broken:
            return Check(
                token,
                "fail",
                f"/{broken[0].path} names {broken[0].library}, which is not in the image: the loader skips it",
                fix,
            )
        seen = ", ".join(f"/{m.path}" for m in manifests[:4]) or "none"
        return Check(token, "fail", f"no Vulkan ICD manifest for {names} (manifests found: {seen})", fix)

    return check


def _venus_libkrun(facts: Facts, node: Node) -> Check:
    manifests, _ = facts.manifests()
    check, _ = _mesa_build(facts, [m for m in manifests if m.kind == "venus"])
    return Check("mesa-venus-libkrun", check.status, check.evidence, check.fix, check.required)


_ROCM_DIRS = ("opt/rocm/lib", "opt/rocm/lib64")


def _rocm_runtime(facts: Facts, node: Node) -> Check:
    found = _find_anywhere(facts, "libhsa-runtime64.so.1", _ROCM_DIRS)
    version = rocm_version(facts)
    about = f", ROCm {version[1]} ({version[0]})" if version[1] else ""
    if found:
        return Check("rocm-runtime", "pass", f"/{found}{about}")
    return Check(
        "rocm-runtime",
        "fail",
        "no libhsa-runtime64.so.1 (ROCr) in the library path or /opt/rocm/lib",
        "use a ROCm image (rocm/dev-ubuntu-24.04) or install ROCm's runtime: "
        + facts.install("hsa-rocr", "libhsa-runtime64-1", "rocm-hip-runtime"),
    )


def _rocm_dxg(facts: Facts, node: Node) -> Check:
    found = _find_anywhere(facts, "librocdxg.so", _ROCM_DIRS)
    env = facts.env.get("HSA_ENABLE_DXG_DETECTION")
    setting = (
        "HSA_ENABLE_DXG_DETECTION=1 is set"
        if env == "1"
        else "HSA_ENABLE_DXG_DETECTION=1 is not in the config (set it at run)"
    )
    if found:
        return Check("rocm-dxg", "pass", f"/{found}; {setting}")
    return Check(
        "rocm-dxg", "unknown", f"no librocdxg.so in the image: it may be mounted from the WSL distro; {setting}"
    )


def vendor_icds(facts: Facts) -> dict[str, str]:
    """The OpenCL vendor ICDs the image registers: /etc/OpenCL/vendors/NAME.icd -> its first line (the library)."""
    folder = facts.env.get("OPENCL_VENDOR_PATH", "/etc/OpenCL/vendors").strip("/")
    found: dict[str, str] = {}
    for name in facts.tree.listdir(folder):
        if name.endswith(".icd"):
            try:
                text = facts.tree.read(f"{folder}/{name}", 64 * 1024).decode("utf-8", "replace")
            except ImageReadError:
                text = ""
            found[f"/{folder}/{name}"] = (text.strip().splitlines() or [""])[0].strip()
    return found


def _vendor_icd(token: str, pattern: str, what: str, install: tuple[str, str, str]) -> TokenCheck:
    def check(facts: Facts, node: Node) -> Check:
        icds = vendor_icds(facts)
        for icd, library in icds.items():
            if re.search(pattern, library):
                exists = (
                    facts.tree.is_file(library.lstrip("/")) if "/" in library else bool(facts.find_library(library))
                )
                if exists or not library:
                    return Check(token, "pass", f"{icd} names {library}")
                return Check(
                    token, "fail", f"{icd} names {library}, which is not in the image", _install(facts, install)
                )
        seen = ", ".join(icds) or "none"
        return Check(token, "fail", f"no OpenCL ICD for {what} (ICDs found: {seen})", _install(facts, install))

    return check


def _install(facts: Facts, packages: tuple[str, str, str]) -> str:
    return "install it: " + facts.install(*packages)


TOKEN_CHECKS: dict[str, TokenCheck] = {
    "glibc": _glibc,
    "vulkan-loader": _vulkan_loader,
    "opencl-icd-loader": _opencl_loader,
    "khronos-opencl-loader": _khronos_loader,
    "ocl-icd-loader": _ocl_icd_loader,
    "lib64-search": _libc_searches("lib64-search", r"usr/lib64|lib64", "Fedora/RHEL/SUSE"),
    "multiarch-search": _libc_searches(
        "multiarch-search", r"(?:usr/)?lib/[a-z0-9_]+-linux-gnu[a-z0-9_]*", "Debian/Ubuntu"
    ),
    "mesa-vulkan": _mesa("mesa-vulkan"),
    "mesa-venus": _mesa("mesa-venus", "venus"),
    "mesa-nvk": _mesa("mesa-nvk", "nvk"),
    "mesa-dozen": _mesa("mesa-dozen", "dozen"),
    "mesa-venus-libkrun": _venus_libkrun,
    "rocm-runtime": _rocm_runtime,
    "rocm-opencl": _vendor_icd(
        "rocm-opencl", r"amdocl", "ROCm (amdocl64)", ("rocm-opencl-runtime", "rocm-opencl-icd", "rocm-opencl")
    ),
    "intel-compute-runtime": _vendor_icd(
        "intel-compute-runtime",
        r"igdrcl|intel-opencl",
        "Intel's compute-runtime",
        ("intel-compute-runtime", "intel-opencl-icd", "intel-compute-runtime"),
    ),
    "rocm-dxg": _rocm_dxg,
}


def token_check(token: str, facts: Facts, node: Node) -> Check:
    """The image check of one `image_needs` token; a token cgpu has no check for is unknown."""
    check = TOKEN_CHECKS.get(token)
    if check is None:
        return Check(token, "unknown", f"cgpu has no image check for `{token}`; the image must bring it")
    return check(facts, node)


# --- the API rules beside the tokens ---------------------------------------------------------------

_REQUIRE = re.compile(r"(?:^|[\s,])cuda>=(\d+\.\d+)")
_CUDART = re.compile(r"^libcudart\.so\.(\d+\.\d+)(?:\.\d+)*$")
_CUDA_DIRS = (
    "usr/local/cuda/lib64",
    "usr/local/cuda/targets/x86_64-linux/lib",
    "usr/local/cuda/targets/sbsa-linux/lib",
)
COMPAT_DIR = "usr/local/cuda/compat"  # where NVIDIA's cuda-compat package puts its libcuda


def cuda_needed(facts: Facts) -> tuple[str, str]:
    """(the CUDA x.y the image needs, where that was read) or ('', '') when it declares none."""
    require = facts.env.get("NVIDIA_REQUIRE_CUDA", "")
    found = sorted((version_key(v) for v in _REQUIRE.findall(require)), reverse=True)
    if found:
        return _x_y(found[0]), "NVIDIA_REQUIRE_CUDA in the image config"
    if facts.env.get("CUDA_VERSION") and version_key(facts.env["CUDA_VERSION"]):
        return _x_y(
            version_key(facts.env["CUDA_VERSION"])
        ), f"CUDA_VERSION={facts.env['CUDA_VERSION']} in the image config"
    for folder in dict.fromkeys([*facts.lib_dirs, *_CUDA_DIRS]):
        for name in facts.tree.listdir(folder):
            match = _CUDART.match(name)
            if match:
                return match.group(1), f"/{folder}/{name}"
    return "", ""


def compat_driver(facts: Facts) -> tuple[str, str]:
    """(the driver version of the image's cuda-compat libcuda, its path) or ('', '')."""
    libs = [n for n in facts.tree.listdir(COMPAT_DIR) if re.fullmatch(r"libcuda\.so\.\d+\.\d+(?:\.\d+)?", n)]
    if len(libs) != 1:  # the toolkit's hook takes exactly one
        return "", ""
    return libs[0].removeprefix("libcuda.so."), f"/{COMPAT_DIR}/{libs[0]}"


def _cuda_version(facts: Facts, node: Node) -> Check:
    from cgpu.node.driver_cuda import cuda_for_driver

    name = "cuda-version"
    needed, where = cuda_needed(facts)
    if not needed:
        return Check(
            name,
            "pass",
            "the image declares no CUDA version (no NVIDIA_REQUIRE_CUDA, CUDA_VERSION or libcudart.so.X.Y)",
        )
    driver_cuda, state, driver = node.driver_cuda()
    need = f"the image needs CUDA {needed} ({where})"
    if driver_cuda is None:
        return Check(name, "unknown", f"{need}; the report does not say the driver's highest CUDA (nvidia_driver)")
    if version_key(driver_cuda) >= version_key(needed):
        return Check(name, "pass", f"{need}; driver {driver} supports CUDA {driver_cuda}")
    short = f"{need}; driver {driver} supports CUDA {driver_cuda}{' or more' if state == 'at-least' else ''}"
    fix = f"use an image built for CUDA {driver_cuda} or older, or update the node's driver"
    compat, compat_path = compat_driver(facts)
    if compat:
        compat_cuda, _, _ = cuda_for_driver(compat)
        if (
            compat_cuda
            and version_key(compat_cuda) >= version_key(needed)
            and version_key(compat)[:1] > version_key(driver)[:1]
        ):
            datacenter, why = node.datacenter_gpu()
            using = f"{short}; the image's cuda-compat ({compat_path}, CUDA {compat_cuda}) brings it forward"
            if datacenter:
                return Check(name, "pass", f"{using}: {why}, where forward compatibility is supported")
            if datacenter is None:
                return Check(name, "unknown", f"{using} on data center GPUs only: {why}", fix)
            return Check(name, "fail", f"{using} on data center GPUs only: {why}", fix)
    if state == "at-least":
        return Check(name, "unknown", short, fix)
    return Check(name, "fail", short + " (CUDA_ERROR_INSUFFICIENT_DRIVER)", fix)


# ROCm's GPU / LLVM targets per release (ROCm/ROCm docs/compatibility/compatibility-matrix.rst and its past
# versions), newest first: (the first release of the row, its targets). Older than the last row: not known here.
ROCM_RELEASE_TARGETS: tuple[tuple[tuple[int, ...], frozenset[str]], ...] = (
    (
        (7, 0),
        frozenset({"gfx950", "gfx1201", "gfx1200", "gfx1101", "gfx1100", "gfx1030", "gfx942", "gfx90a", "gfx908"}),
    ),
    ((6, 4, 1), frozenset({"gfx1201", "gfx1200", "gfx1101", "gfx1100", "gfx1030", "gfx942", "gfx90a", "gfx908"})),
    ((6, 0), frozenset({"gfx1100", "gfx1030", "gfx942", "gfx90a", "gfx908"})),
)


def rocm_version(facts: Facts) -> tuple[str, str]:
    """(where it was read, the image's ROCm version) or ('', '')."""
    for folder in [
        "opt/rocm",
        *sorted((f"opt/{n}" for n in facts.tree.listdir("opt") if n.startswith("rocm-")), reverse=True),
    ]:
        try:
            text = facts.tree.read(f"{folder}/.info/version", 4096).decode("utf-8", "replace").strip()
        except ImageReadError:
            continue
        if version_key(text):
            return f"/{folder}/.info/version", text.split("-")[0]
    for name in ("rocm-core", "hip-runtime-amd", "libamdhip64-6", "libamdhip64-5", "libamdhip64-7"):
        package = facts.package(name)
        if package is not None and version_key(package.version):
            return f"package {package.nevr}", package.version.split("-")[0].split("~")[0]
    return "", ""


def _rocm_targets(facts: Facts, node: Node) -> Check:
    name = "rocm-targets"
    where, version = rocm_version(facts)
    targets = node.gfx_targets()
    if not targets:
        # the node judged without one (no amdkfd topology): advisory, as the node's own answer is
        return Check(name, "unknown", "the report names no gfx target of the node's AMD GPU", required=False)
    if not version:
        return Check(
            name,
            "unknown",
            f"the node's GPU is {targets[0]}; the image's ROCm version is not found "
            "(/opt/rocm/.info/version, rocm-core)",
        )
    key = version_key(version)
    supported = next((t for floor, t in ROCM_RELEASE_TARGETS if key >= floor), None)
    override = facts.env.get("HSA_OVERRIDE_GFX_VERSION", "")
    parts = re.fullmatch(r"(\d{1,2})\.(\d{1,2})\.(\d{1,2})", override)
    as_target = f"gfx{parts[1]}{int(parts[2]):x}{int(parts[3]):x}" if parts else ""  # 10.3.0 is gfx1030
    about = f"ROCm {version} ({where})"
    if supported is None:
        return Check(
            name,
            "unknown",
            f"{about} predates the compatibility matrix cgpu carries (ROCm 6.0 on); the node's GPU is {targets[0]}",
        )
    hit = [t for t in targets if t in supported]
    if hit:
        return Check(name, "pass", f"{about} supports {hit[0]}, the node's GPU")
    if as_target in supported:
        return Check(
            name,
            "pass",
            f"{about} does not list {targets[0]}; HSA_OVERRIDE_GFX_VERSION={override} runs it as {as_target} "
            "(unsupported by AMD)",
        )
    newer = next((floor for floor, t in reversed(ROCM_RELEASE_TARGETS) if targets[0] in t), None)  # the oldest
    fix = (
        f"use ROCm {'.'.join(map(str, newer))} or newer"
        if newer
        else "set HSA_OVERRIDE_GFX_VERSION to a supported target of the GPU's family (unsupported by AMD)"
    )
    return Check(
        name,
        "fail",
        f"{about} does not support {', '.join(targets)}, the node's GPU (its targets: {', '.join(sorted(supported))})",
        fix,
    )


def _krunkit_venus(facts: Facts, node: Node) -> Check | None:
    """Under krunkit, vulkan is Venus: `image check`'s own checks, unchanged, as one check."""
    if node.report.get("backend") != "krunkit":
        return None
    from cgpu.image.checks import run_checks, verdict

    checks, problems, _ = run_checks(facts.image)
    facts.problems += problems
    answer, reason = verdict(checks)
    failed = [c for c in checks if c.required and c.status in ("fail", "unknown")]
    fix = "; ".join(f"{c.name}: {c.fix}" for c in failed if c.fix)
    return Check("krunkit-venus", {"yes": "pass", "no": "fail", "unknown": "unknown"}[answer], reason, fix)


RuleCheck = Callable[[Facts, Node], "Check | None"]  # None: the rule does not apply to this node
API_RULES: dict[str, tuple[RuleCheck, ...]] = {
    "cuda": (_cuda_version,),
    "rocm": (_rocm_targets,),
    "vulkan": (_krunkit_venus,),
}
# The tokens an API implies whatever the report lists: NVIDIA's driver libraries (cuda) and the WSL session's
# D3D12 and DXCore libraries (directml) are glibc builds; the wsl backend names no token for them.
API_TOKENS: dict[str, tuple[str, ...]] = {"cuda": ("glibc",), "directml": ("glibc",)}


# --- the image's user against `user_needs` ---------------------------------------------------------


@dataclass(frozen=True)
class ImageUser:
    """Who the container runs as: the config's User resolved in the image's /etc/passwd and /etc/group."""

    spec: str  # as the config says ('' for root)
    uid: int | None  # None: cannot tell
    gids: frozenset[int] | None  # primary and supplementary; None: cannot tell
    why: str  # how it was resolved, or why not


def _table(facts: Facts, path: str) -> list[list[str]] | None:
    try:
        text = facts.tree.read(path, 16 * 1024**2).decode("utf-8", "replace")
    except ImageReadError:
        return None
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def image_user(facts: Facts) -> ImageUser:
    """The container's user as runc and crun resolve the image's User (opencontainers/runc libcontainer/user):
    a name is looked up in /etc/passwd; a number not there runs with gid 0; without an explicit :GROUP the
    supplementary groups are those of /etc/group that list the user's name (moby/sys/user GetExecUser)."""
    settings = facts.image.config.get("config")
    spec = settings.get("User") if isinstance(settings, dict) else None
    spec = spec if isinstance(spec, str) else ""
    user, _, group = spec.partition(":")
    passwd = _table(facts, "etc/passwd")
    groups = _table(facts, "etc/group") or []
    numeric = _id(user)
    entry = next(
        (row for row in passwd or [] if len(row) >= 4 and (row[0] == user or (numeric is not None and row[2] == user))),
        None,
    )
    uid = 0 if user in ("", "root") else numeric if numeric is not None else _id(entry[2]) if entry else None
    if uid is None:
        why = "/etc/passwd is not in the image" if passwd is None else f"/etc/passwd has no user {user}"
        return ImageUser(spec, None, None, f"User {spec}: {why}, so the engine refuses to start it")
    gid = _id(group) if group else (_id(entry[3]) if entry else 0)
    if group and gid is None:
        row = next((r for r in groups if len(r) >= 3 and r[0] == group), None)
        gid = _id(row[2]) if row else None
        if gid is None:
            return ImageUser(spec, uid, None, f"User {spec}: /etc/group has no group {group}")
    gid = 0 if gid is None else gid
    name = entry[0] if entry is not None else ""
    # supplementary groups only in the implicit form (User without :GROUP), as runc's user lookup does
    members = [r for r in groups if len(r) >= 4 and name and not group and name in r[3].split(",")]
    extra = {g for r in members if (g := _id(r[2])) is not None}
    gids = frozenset({gid, *extra})
    listed = ", ".join(str(g) for g in sorted(gids))
    return ImageUser(spec, uid, gids, f"uid {uid}, groups {listed} (from the image's /etc/passwd and /etc/group)")


def _id(text: str) -> int | None:
    """A uid or gid as written in the image (at most 10 ASCII digits), else None."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else None


def user_check(user: ImageUser, need: dict[str, Any]) -> Check:
    """Can the container's user open `need['node']`: uid 0, or one of `need['gids']` among its groups?"""
    node = str(need.get("node", "?"))
    gids = [g for g in need.get("gids", []) if isinstance(g, int)]
    names = [str(g) for g in need.get("groups", [])]
    label = f"user: {node}"
    wanted = ", ".join(f"{g} ({n})" if n else str(g) for g, n in zip(gids, names + [""] * len(gids), strict=False))
    fix = (
        f"run with --group-add {gids[0]} (podman, docker), Kubernetes securityContext.supplementalGroups: "
        f"[{gids[0]}], or add the image's user to that group"
        if gids
        else "run as a user who can open it"
    )
    who = f"User {user.spec or 'root (none set)'}"
    if user.uid == 0:
        return Check(label, "pass", f"{who}: uid 0 opens {node} whatever its group")
    if user.gids is None:
        return Check(label, "unknown", f"{who}: {user.why}; {node} needs gid {wanted}", fix)
    held = sorted(user.gids & set(gids))
    if held:
        return Check(label, "pass", f"{who}: {user.why}; holds gid {held[0]}, which opens {node}")
    why = f"; {need['why']}" if need.get("why") else ""
    return Check(label, "fail", f"{who}: {user.why}; none is {wanted}, which {node} needs{why}", fix)


# --- one API's verdict -----------------------------------------------------------------------------


def api_checks(api: str, needs: list[str], user_needs: list[Any] | None, facts: Facts, node: Node) -> list[Check]:
    """Every check of the image for one provided API: its tokens, its own rules, its user's access."""
    checks = [token_check(token, facts, node) for token in dict.fromkeys([*API_TOKENS.get(api, ()), *needs])]
    checks += [check for rule in API_RULES.get(api, ()) if (check := rule(facts, node)) is not None]
    if user_needs:
        user = image_user(facts)
        checks += [user_check(user, need) for need in user_needs if isinstance(need, dict)]
    return checks


def api_verdict(checks: list[Check]) -> tuple[str, str]:
    """yes / no / unknown for the image, and the missing or unknown parts named."""
    failed = [c for c in checks if c.required and c.status == "fail"]
    unknown = [c for c in checks if c.required and c.status == "unknown"]
    if failed:
        return "no", "the image lacks " + "; ".join(f"{c.name}: {c.evidence}" for c in failed)
    if unknown:
        return "unknown", "the image cannot tell " + "; ".join(f"{c.name}: {c.evidence}" for c in unknown)
    if not checks:
        return "yes", "the image needs to bring nothing for it"
    return "yes", "the image has " + ", ".join(c.name for c in checks)
