"""The per-API rules of the CDI backend (docs/cdi.md "The answers"): what one device's container gets.

Each rule returns a `Finding`: provided, partial (something aimed at the API is there, but not
all of it) or absent, with a sentence fragment that follows the device's name in the evidence
("gets ..." / "mounts ... but ...: fix"). Everything that must come from the host is checked
against the container view; what an ordinary image brings (loaders, Mesa, ROCm) is named.
"""

from __future__ import annotations

import posixpath

from cgpu.backends.cdi import vulkan_icd
from cgpu.backends.cdi.device_identity import WrongNode, consequence, identity_fix, wrong_nodes
from cgpu.backends.cdi.spec_fixes import missed_libraries_fix, on_host_beside
from cgpu.backends.cdi.view import ContainerView, NodePaths

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import cast
else:

    def cast(_type: object, value: object) -> object:  # typing.cast at run time
        return value


PROVIDED, PARTIAL, ABSENT = "provided", "partial", "absent"
UNKNOWN = "unknown"  # the host cannot tell: a GPU ROCm may run only with an override
_RANK = {PROVIDED: 2, PARTIAL: 1, ABSENT: 0}

NVIDIA_GPU_NODE = NodePaths("/dev/nvidia")
RENDER_NODE = NodePaths("/dev/dri/renderD")
MIG_CAP_NODE = NodePaths("/dev/nvidia-caps/nvidia-cap")
DRM_NODE = NodePaths("/dev/dri/card", "/dev/dri/renderD")
CTL, UVM, DXG, KFD = "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/dxg", "/dev/kfd"
KFD_NODE = NodePaths(KFD, numbered=False)
# Jetson (Tegra, CSV mode): the integrated GPU is reached through nvmap and nvgpu/nvhost nodes;
# there is no /dev/nvidia-uvm (nvidia-container-toolkit's lib-csv test data: Xavier, Orin).
NVMAP = "/dev/nvmap"
TEGRA_GPU_NODES = ("/dev/nvhost-ctrl-gpu", "/dev/nvgpu/igpu0/ctrl")

VENDOR_NAMES = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel", "0x1af4": "virtio-gpu"}
KIND_VENDOR_IDS = {"nvidia.com": "0x10de", "amd.com": "0x1002", "intel.com": "0x8086"}

# The Vulkan loader's manifest search (loader.c, Linux): $XDG_CONFIG_DIRS (default /etc/xdg), then
# SYSCONFDIR (/etc in distribution builds), then $XDG_DATA_DIRS (default /usr/local/share:/usr/share),
# each + /vulkan/icd.d. /usr/local/etc is searched only by a loader built with a /usr/local prefix.
XDG_CONFIG_DIRS_DEFAULT = "/etc/xdg"
XDG_DATA_DIRS_DEFAULT = "/usr/local/share:/usr/share"
OPENCL_VENDORS_DIR = "/etc/OpenCL/vendors"
OCL_ICD, KHRONOS = "ocl-icd", "khronos"  # the two OpenCL ICD loaders images ship as libOpenCL.so.1
# What libGLX_nvidia.so loads itself (libnvidia-container's nvc_info.c lists them as its
# dependencies); the loader skips an ICD whose library fails to load. gpucomp: drivers that ship it.
GLX_COMPANIONS = ("libnvidia-glcore", "libnvidia-tls", "libnvidia-glvkspirv")
GLX_OPTIONAL_COMPANION = "libnvidia-gpucomp"
# libcuda loads this to JIT-compile PTX (libnvidia-container's nvc_info.c compute_libs: "PTX-SASS JIT
# compiler (used by libcuda)"); without it a kernel shipped as PTX fails with CUDA_ERROR_JIT_COMPILER_NOT_FOUND.
PTX_JIT_COMPILER = "libnvidia-ptxjitcompiler"
# WSL: nvidia-container-toolkit's WSL discoverer mounts these from the driver store with libcuda.so.1.1.
WSL_CUDA_COMPANIONS = ("libcuda_loader.so", "libnvdxgdmal.so.1")
NVIDIA_D3D12_UMD = "libnvwgf2umx.so"  # NVIDIA's D3D12 user-mode driver in its WSL driver-store folder

# Software drivers never count (docs/cdi.md "The answers"); matched on the library file name an ICD names.
SOFTWARE_DRIVERS = (
    (("lvp", "llvmpipe"), "lavapipe (llvmpipe)"),
    (("swiftshader",), "SwiftShader"),
    (("pocl",), "PoCL"),
)

NVIDIA_REGENERATE = "regenerate the spec with `nvidia-ctk cdi generate`"


class Finding:
    __slots__ = ("needs", "state", "text")

    def __init__(self, state: str, text: str, needs: tuple[str, ...] | list[str] = ()) -> None:
        self.state = state  # PROVIDED, PARTIAL or ABSENT
        self.text = text  # follows the device name: "gets ...", "mounts ... but ...: fix"
        self.needs = tuple(dict.fromkeys(needs))  # IMAGE_NEEDS tokens, when PROVIDED

    def __repr__(self) -> str:
        return f"Finding({self.state!r}, {self.text!r}, {self.needs!r})"


class RenderNode:
    __slots__ = ("driver", "path", "source", "vendor")

    def __init__(self, path: str, vendor: str | None, source: str) -> None:
        self.path = path  # in the container
        self.vendor = vendor  # PCI vendor id
        self.source = source  # how the vendor is known
        self.driver: str | None = None  # the kernel driver bound to it (sysfs), when known

    @property
    def vendor_name(self) -> str:
        return VENDOR_NAMES.get(self.vendor or "", f"vendor {self.vendor or 'unknown'}")


def judge(view: ContainerView, kind: str) -> dict[str, Finding]:
    """cuda, rocm, vulkan, opencl, directml for one device (metal never reaches a container)."""
    findings = _judge(view, kind)
    wrong = wrong_nodes(view.nodes, view.host)
    return _wrong_numbers(findings, view, kind, wrong) if wrong else findings


def _wrong_numbers(
    findings: dict[str, Finding], view: ContainerView, kind: str, wrong: list[WrongNode]
) -> dict[str, Finding]:
    """A node whose numbers reach no device of the host's is no node: each API that needs it is absent,
    with the numbers and the fix (docs/cdi.md "Device identity"). Judged again without each one (rare)."""
    without = {
        w.path: _judge(
            view.without_nodes([p for p, n in view.nodes.items() if (n.host_path or n.path) == w.path]), kind
        )
        for w in wrong
    }
    result = dict(findings)
    for api, finding in findings.items():
        if finding.state == ABSENT:
            continue
        causes = [w for w in wrong if without[w.path][api].state != finding.state]
        if not causes:
            continue
        clauses = " and ".join(w.clause() for w in causes)
        result[api] = Finding(
            ABSENT,
            f"would give {api}, but {clauses}, so {consequence(causes)}: {identity_fix(kind)}",
        )
    return result


def _judge(view: ContainerView, kind: str) -> dict[str, Finding]:
    renders = render_nodes(view, kind)
    nvidia_like = bool(view.usable_nodes(NVIDIA_GPU_NODE)) or kind.startswith("nvidia.com/")
    mismatch = driver_mismatch(view)
    return {
        "cuda": _mismatched(_cuda(view), mismatch),
        "rocm": _rocm(view, renders),
        "vulkan": _best(
            _mismatched(_nvidia_vulkan(view), mismatch),
            _render_graphics(view, renders, "vulkan"),
            nvidia_like,
            _software_note(view, "vulkan"),
        ),
        "opencl": _best(
            _mismatched(_nvidia_opencl(view), mismatch),
            _render_graphics(view, renders, "opencl"),
            nvidia_like,
            _software_note(view, "opencl"),
        ),
        "directml": _directml(view),
    }


def driver_mismatch(view: ContainerView) -> tuple[str, str, str] | None:
    """(user-space version the container gets, kernel module version, file it was read from) when
    they differ: NVML then fails with "driver/library version mismatch" and CUDA with error 803."""
    if "mismatch" not in view.file_memo:
        view.file_memo["mismatch"] = _driver_mismatch(view)
    return view.file_memo["mismatch"]  # type: ignore[return-value]


def driver_version_suffix(library: str) -> str | None:
    """The driver version a library's name ends in (`libcuda.so.580.65.06`): the regex
    `\\.so\\.(\\d{2,3}\\.\\d+(?:\\.\\d+)?)$` searched, as string work (on every run)."""
    start = library.find(".so.")
    while start != -1:
        rest = library[start + 4 :]
        rest = rest[:-1] if rest.endswith("\n") else rest  # `$` matches before a last newline too
        parts = rest.split(".")
        if 2 <= len(parts) <= 3 and 2 <= len(parts[0]) <= 3 and all(part.isdecimal() for part in parts):
            return rest
        start = library.find(".so.", start + 1)
    return None


def _driver_mismatch(view: ContainerView) -> tuple[str, str, str] | None:
    user = None
    for stem in ("libcuda", "libnvidia-ml", "libGLX_nvidia", "libnvidia-opencl"):
        for library in view.libraries(stem):
            version = driver_version_suffix(library)
            host_path = view.host_path(library) if version else None
            if version and host_path is not None and view.host.exists(host_path):  # missing files: a stale spec
                user = version
                break
        if user:
            break
    if user is None:
        return None
    kernel, source = view.host.nvidia_driver_version()
    if kernel is None or source is None or kernel == user:
        return None
    return user, kernel, source


def mismatch_fix(user: str, kernel: str) -> str:
    """Reboot (or reload the module) when the files are newer; regenerate when they are what is old."""
    if _version_key(user) > _version_key(kernel):
        return (
            f"the driver files were upgraded to {user} but the running kernel module is still {kernel}: "
            f"reboot the host (or unload and reload the nvidia kernel modules)"
        )
    return f"the spec mounts the older driver files {user} while the kernel module is {kernel}: {NVIDIA_REGENERATE}"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _mismatched(finding: Finding, mismatch: tuple[str, str, str] | None) -> Finding:
    if mismatch is None or finding.state == ABSENT:
        return finding
    user, kernel, source = mismatch
    return Finding(
        ABSENT,
        f"mounts NVIDIA's user-space driver {user} but the host's kernel module is {kernel} ({source}), so "
        f"every call fails (NVML: driver/library version mismatch; CUDA error 803): {mismatch_fix(user, kernel)}",
    )


def render_nodes(view: ContainerView, kind: str) -> list[RenderNode]:
    found = []
    for path in view.usable_nodes(RENDER_NODE):
        node = view.nodes[path]
        name = posixpath.basename(node.host_path or node.path)
        vendor = view.host.render_node_vendor(name)
        if vendor is not None:
            source = f"vendor {vendor} in /sys/class/drm/{name}/device/vendor"
        else:
            vendor = KIND_VENDOR_IDS.get(kind.split("/", 1)[0])
            source = (
                f"{VENDOR_NAMES[vendor]} by the spec kind {kind}, as sysfs has no vendor for {name}"
                if vendor
                else f"sysfs has no vendor for {name}"
            )
        render = RenderNode(path, vendor, source)
        render.driver = view.host.render_node_driver(name)
        found.append(render)
    return found


def _best(nvidia: Finding, render: Finding, nvidia_like: bool, software: str | None) -> Finding:
    if _RANK[nvidia.state] != _RANK[render.state]:
        best = nvidia if _RANK[nvidia.state] > _RANK[render.state] else render
    else:
        best = nvidia if nvidia_like else render
    if software and best.state != PROVIDED:
        best = Finding(best.state, f"{best.text}, and {software}", best.needs)
    return best


# --- NVIDIA --------------------------------------------------------------------------------------


def _nodes_text(paths: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return paths[0] if len(paths) == 1 else f"{', '.join(paths[:-1])} and {paths[-1]}"


def is_tegra(view: ContainerView) -> bool:
    """A Jetson (CSV-mode) spec whose GPU is the integrated one behind nvmap and the nvgpu/nvhost
    nodes (Xavier, Orin). Thor (JetPack 7) has /dev/nvidia-uvm and the usual nodes: not this."""
    return UVM not in view.nodes and any(path in view.nodes for path in TEGRA_GPU_NODES)


def _nvidia_nodes(view: ContainerView, *, uvm: bool) -> tuple[list[str], list[str]]:
    """(NVIDIA nodes the container gets, those it lacks) for a native (non-WSL) driver."""
    have: list[str] = []
    lack: list[str] = []
    if is_tegra(view):
        (have if view.usable_node(NVMAP) else lack).append(NVMAP)
        gpu = [p for p in TEGRA_GPU_NODES if view.usable_node(p)]
        have.extend(gpu[:1]) if gpu else lack.append(" or ".join(TEGRA_GPU_NODES))
        return have, lack
    for path in (CTL, UVM) if uvm else (CTL,):
        (have if view.usable_node(path) else lack).append(path)
    gpus = view.usable_nodes(NVIDIA_GPU_NODE)
    if gpus:
        have.extend(gpus)
    else:
        lack.append("/dev/nvidiaN")
    return have, lack


Route = tuple[str, tuple[str, ...]]  # how a library is loadable by its SONAME, what the image's libc must search


def _library(view: ContainerView, stem: str, soname: str) -> tuple[str | None, Route | None]:
    """(library, how it is linkable) — a linkable one first, one needing nothing of the image before
    one that does; (None, None) when none is mounted."""
    key = ("library", stem, soname)
    found = view.file_memo.get(key)
    if found is None:
        found = view.file_memo[key] = _find_library(view, stem, soname)
    return found  # type: ignore[return-value]


def _find_library(view: ContainerView, stem: str, soname: str) -> tuple[str | None, Route | None]:
    libraries = view.libraries(stem)
    best: tuple[str | None, Route | None] = (libraries[0], None) if libraries else (None, None)
    for library in libraries:
        route = view.soname_route(library, soname)
        if route is not None and (best[1] is None or len(route[1]) < len(best[1][1])):
            best = (library, route)
            if not route[1]:
                break  # loadable whatever the image's libc: nothing better to find
    return best


def _nvidia_api(
    view: ContainerView,
    library: str | None,
    route: Route | None,
    soname: str,
    *,
    have: list[str],
    lack: list[str],
    registration: str | None,
    unregistered: str | None,
    brings: str,
    needs: tuple[str, ...],
    also_missing: str | None = None,
    regenerate: str = NVIDIA_REGENERATE,
) -> Finding:
    """The verdict once the pieces are known: all there, or what falls short and how to fix it."""
    name = posixpath.basename(library) if library else None
    short, fixes = [], []
    if lack:
        short.append(f"no {_nodes_text(lack)}")
    if name and not route:
        short.append(
            f"nothing makes {name} loadable as {soname} (no update-ldcache hook over "
            f"{posixpath.dirname(library or '')}, no create-symlinks link in a folder the image's libc searches)"
        )
    if also_missing:
        short.append(also_missing)
    if short:
        fixes.append(regenerate + ("" if route or not name else " without `--disable-hook all`"))
    if name and unregistered:
        short.append(unregistered.split(": ", 1)[0])
        fixes.append(unregistered.split(": ", 1)[1])
    if not short and name and route:
        how, libc_needs = route
        got = ", ".join([*have, f"{name} ({how})"])
        search = f"; the image's libc must search {posixpath.dirname(library or '')}" if libc_needs else ""
        return Finding(
            PROVIDED,
            f"gets {got}{' and ' + registration if registration else ''}; {brings}{search}",
            ("glibc", *needs, *libc_needs),
        )
    got = _nodes_text([*have, name]) if name else (_nodes_text(have) if have else "nothing of it")
    return Finding(PARTIAL, f"gets {got} but {' and '.join(short)}: {', and '.join(fixes)}")


def _cuda(view: ContainerView) -> Finding:
    library, route = _library(view, "libcuda", "libcuda.so.1")
    wsl = view.usable_node(DXG)
    if wsl:  # WSL mode: the driver store's libcuda.so.1.1 behind /dev/dxg
        have, lack = [DXG], list[str]()
    else:
        have, lack = _nvidia_nodes(view, uvm=True)
    if library is None:
        if not have:
            return Finding(
                ABSENT,
                "has no NVIDIA device node (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidiaN, "
                "or /dev/dxg on WSL) and no libcuda",
            )
        return Finding(
            PARTIAL,
            f"gets {_nodes_text(have)} but no libcuda.so.<driver version> is mounted (device "
            f"nodes only, no user-space driver): {NVIDIA_REGENERATE}",
        )
    also_missing = None if wsl else _ptx_jit_absent(view, library)
    if wsl:
        names = view.index.names
        wanted = ["libdxcore.so"]
        if posixpath.basename(library) == "libcuda.so.1.1":
            wanted += WSL_CUDA_COMPANIONS
        absent = [n for n in wanted if n not in names]
        if absent:
            also_missing = f"not {' or '.join(absent)}, which WSL's libcuda.so.1.1 needs beside it"
    return _nvidia_api(
        view,
        library,
        route,
        "libcuda.so.1",
        have=have,
        lack=lack,
        registration=None,
        unregistered=None,
        brings="the image brings the CUDA runtime if the application needs it",
        needs=(),
        also_missing=also_missing,
    )


def _ptx_jit_absent(view: ContainerView, library: str) -> str | None:
    """What falls short when libcuda.so.<version> comes without the PTX JIT compiler of its version;
    None when it is there, or the version is not in the name (Jetson's libcuda.so.1.1)."""
    version = driver_version_suffix(library)
    if version is None:
        return None
    if any(f.endswith(f".so.{version}") for f in view.libraries(PTX_JIT_COMPILER)):
        return None
    return (
        f"not {PTX_JIT_COMPILER}.so.{version}, which libcuda loads to JIT-compile PTX (a kernel shipped as PTX "
        "fails with CUDA_ERROR_JIT_COMPILER_NOT_FOUND)"
    )


def _nvidia_vulkan(view: ContainerView) -> Finding:
    library, route = _library(view, "libGLX_nvidia", "libGLX_nvidia.so.0")
    if library is None:
        return Finding(
            ABSENT,
            "mounts no libGLX_nvidia.so.<driver version>, NVIDIA's Vulkan driver (a spec from "
            "`nvidia-ctk cdi generate` on a host with the full driver has it)",
        )
    if view.usable_nodes(MIG_CAP_NODE) and not view.usable_nodes(DRM_NODE):
        return Finding(
            ABSENT,
            "is a MIG instance without graphics (nvidia-ctk adds DRM nodes only for MIG profiles "
            "with graphics), so NVIDIA's Vulkan driver has no device to use",
        )
    have, lack = _nvidia_nodes(view, uvm=False)
    icd = _registration(view, library, "libGLX_nvidia.so.0", "vulkan")
    dirs = vulkan_search_dirs(view)
    absent = _glx_companions_absent(view, library)
    missed = on_host_beside(view.host, absent, view.host_path(library)) if absent else []
    skipped = None if icd else _skipped_manifest(view, library, "libGLX_nvidia.so.0")
    return _nvidia_api(
        view,
        library,
        route,
        "libGLX_nvidia.so.0",
        have=have,
        lack=lack,
        registration=f"the Vulkan ICD {icd[0]}" if icd else None,
        unregistered=None
        if icd
        else (
            f"{skipped}: mount the driver's own nvidia_icd.json (`nvidia-ctk cdi generate` does) or fix that one"
            if skipped
            else f"no Vulkan ICD manifest naming it reaches a loader search dir ({dirs[0]}, "
            f"{dirs[-1]}) or VK_DRIVER_FILES: mount the host's nvidia_icd.json at /etc/vulkan/icd.d/ "
            f"(`nvidia-ctk cdi generate` does where the host has it; RPM drivers name it nvidia_icd.x86_64.json, "
            f"picked up since toolkit 1.18.0)"
        ),
        brings="the image brings the Vulkan loader (libvulkan.so.1)",
        needs=("vulkan-loader",),
        also_missing=(
            f"not {' or '.join(absent)}, which {posixpath.basename(library)} loads (the loader skips an ICD "
            f"whose library fails to load)"
            if absent
            else None
        ),
        regenerate=missed_libraries_fix(missed) if missed else NVIDIA_REGENERATE,
    )


def _glx_companions_absent(view: ContainerView, library: str) -> list[str]:
    """The libraries libGLX_nvidia loads that the container does not get, in its driver version."""
    version = driver_version_suffix(library)
    if version is None:  # Jetson's libGLX_nvidia.so.0: the version of the libraries beside it
        version = next((driver_version_suffix(f) for f in view.libraries(GLX_COMPANIONS[0])), None)
    stems = list(GLX_COMPANIONS)
    host_library = view.host_path(library)
    if version and host_library is not None:
        gpucomp = posixpath.join(posixpath.dirname(host_library), f"{GLX_OPTIONAL_COMPANION}.so.{version}")
        if view.host.exists(gpucomp):
            stems.append(GLX_OPTIONAL_COMPANION)  # this driver ships it: libGLX_nvidia needs it
    absent = []
    for stem in stems:
        found_files = view.libraries(stem)
        if not any(version is None or f.endswith(f".so.{version}") for f in found_files):
            absent.append(f"{stem}.so.{version}" if version else f"{stem}.so")
    return absent


def _nvidia_opencl(view: ContainerView) -> Finding:
    library, route = _library(view, "libnvidia-opencl", "libnvidia-opencl.so.1")
    if library is None:
        return Finding(ABSENT, "mounts no libnvidia-opencl.so.<driver version>, NVIDIA's OpenCL driver")
    have, lack = _nvidia_nodes(view, uvm=not is_tegra(view))
    icd = _registration(view, library, "libnvidia-opencl.so.1", "opencl")
    loaders = icd[1] if icd else frozenset()
    return _nvidia_api(
        view,
        library,
        route,
        "libnvidia-opencl.so.1",
        have=have,
        lack=lack,
        registration=icd[0] if icd else None,
        unregistered=None
        if icd
        else (
            f"no {OPENCL_VENDORS_DIR}/*.icd file whose one line names it, nor OCL_ICD_VENDORS, OPENCL_VENDOR_PATH "
            f"or OCL_ICD_FILENAMES, so the OpenCL loader finds no platform: mount the host's "
            f"{OPENCL_VENDORS_DIR}/nvidia.icd (nvidia-ctk 1.20.0 and later do) or ship it in the image"
        ),
        brings=_OPENCL_LOADER_WORDS[loaders],
        needs=(_OPENCL_LOADER_NEED[loaders],) if icd else (),
    )


_OPENCL_LOADER_NEED = {
    frozenset({OCL_ICD, KHRONOS}): "opencl-icd-loader",
    frozenset({KHRONOS}): "khronos-opencl-loader",
    frozenset({OCL_ICD}): "ocl-icd-loader",
}
_OPENCL_LOADER_WORDS = {
    frozenset({OCL_ICD, KHRONOS}): "the image brings an OpenCL ICD loader (libOpenCL.so.1)",
    frozenset({KHRONOS}): "the image must bring the Khronos OpenCL ICD loader: ocl-icd (Debian's and Ubuntu's "
    "libOpenCL.so.1) does not read that registration",
    frozenset({OCL_ICD}): "the image must bring ocl-icd's OpenCL loader (Debian's and Ubuntu's libOpenCL.so.1): "
    "the Khronos loader does not read that registration",
    frozenset(): "",
}


# --- loader registrations (Vulkan ICD manifests, OpenCL .icd files) -------------------------------


def vulkan_search_dirs(view: ContainerView) -> list[str]:
    """The folders the Vulkan loader reads manifests from, with the container's XDG variables."""
    config = view.env.get("XDG_CONFIG_DIRS") or XDG_CONFIG_DIRS_DEFAULT
    data = view.env.get("XDG_DATA_DIRS") or XDG_DATA_DIRS_DEFAULT
    dirs = [posixpath.join(d, "vulkan/icd.d") for d in config.split(":") if d.startswith("/")]
    dirs.append("/etc/vulkan/icd.d")
    dirs += [posixpath.join(d, "vulkan/icd.d") for d in data.split(":") if d.startswith("/")]
    return list(dict.fromkeys(posixpath.normpath(d) for d in dirs))


def _vulkan_manifests(view: ContainerView) -> list[str]:
    """Container paths of the Vulkan ICD manifests the loader reads (VK_DRIVER_FILES replaces the dirs)."""
    chosen = view.env.get("VK_DRIVER_FILES") or view.env.get("VK_ICD_FILENAMES")
    entries = chosen.split(":") if chosen else []
    entries += (view.env.get("VK_ADD_DRIVER_FILES") or "").split(":")
    manifests: list[str] = []
    for entry in filter(None, entries):
        listed = view.files_in(entry)
        manifests.extend(p for p in listed if p.endswith(".json")) if listed else manifests.append(entry)
    if not chosen:
        for folder in vulkan_search_dirs(view):
            manifests.extend(p for p in view.files_in(folder) if p.endswith(".json"))
    return manifests


def _opencl_entries(view: ContainerView) -> list[tuple[str, str | None, frozenset[str]]]:
    """(where, the library it names, which loaders read it) for every OpenCL registration.

    ocl-icd (ocl_icd_loader.c): OCL_ICD_VENDORS is a folder, an .icd file or a library; else the
    folder OPENCL_VENDOR_PATH or /etc/OpenCL/vendors; an .icd file's first line (fgets). The Khronos
    loader (icd_linux.c, icd.c): the folder OCL_ICD_VENDORS or /etc/OpenCL/vendors, the whole .icd
    file less one final newline; and OCL_ICD_FILENAMES."""
    env = view.env
    vendors = env.get("OCL_ICD_VENDORS") or ""
    vendor_path = env.get("OPENCL_VENDOR_PATH") or OPENCL_VENDORS_DIR
    khronos_dir = vendors or OPENCL_VENDORS_DIR
    entries: list[tuple[str, str | None, frozenset[str]]] = []
    ocl_dir: str | None = vendor_path
    if vendors and view.files_in(vendors):
        ocl_dir = vendors
    elif vendors:
        ocl_dir = None
        if vendors.endswith(".icd"):
            path = vendors if "/" in vendors else posixpath.join(vendor_path, vendors)
            line, _ = _icd_file(view, path)
            entries.append((f"OCL_ICD_VENDORS={vendors}", line, frozenset({OCL_ICD})))
        else:
            entries.append((f"OCL_ICD_VENDORS={vendors}", vendors, frozenset({OCL_ICD})))
    for folder in dict.fromkeys(f for f in (ocl_dir, khronos_dir) if f):
        for path in view.files_in(folder):
            if not path.endswith(".icd"):
                continue
            line, one_line = _icd_file(view, path)
            loaders = set()
            if folder == ocl_dir:
                loaders.add(OCL_ICD)
            if folder == khronos_dir and one_line:
                loaders.add(KHRONOS)
            if loaders:
                entries.append((path, line, frozenset(loaders)))
    for value in filter(None, (env.get("OCL_ICD_FILENAMES") or "").split(":")):
        entries.append((f"OCL_ICD_FILENAMES={value}", value, frozenset({KHRONOS})))
    return entries


def _icd_file(view: ContainerView, path: str) -> tuple[str | None, bool]:
    """(the first line, as ocl-icd reads it; whether the file is that one line, as the Khronos loader needs)."""
    host_path = view.host_path(path)
    text, _ = view.host.read_small(host_path) if host_path else (None, None)
    if text is None:
        return None, False
    line, _, rest = text.partition("\n")
    return line, not rest


def _vulkan_manifest(view: ContainerView, path: str) -> tuple[str | None, str | None]:
    """(the library a Vulkan ICD manifest names, why the loader skips the manifest or None), read
    from the host file as the Vulkan loader reads it (cgpu.backends.cdi.vulkan_icd)."""
    host_path = view.host_path(path)
    text, _ = view.host.read_small(host_path) if host_path else (None, None)
    document = vulkan_icd.load(text) if text is not None else None
    library = vulkan_icd.library_path(document)
    return library, (vulkan_icd.skipped_because(document) if library else None)


def _loader_entries(view: ContainerView, api: str) -> list[tuple[str, str | None, frozenset[str]]]:
    """(file, the library it names, the loaders that read it) for each Vulkan ICD manifest or OpenCL
    registration the loaders take; the Vulkan manifests the loader skips are kept for _skipped_manifest."""
    key = ("loader entries", api)
    found = view.file_memo.get(key)
    if found is None:
        if api == "vulkan":
            taken: list[tuple[str, str | None, frozenset[str]]] = []
            skipped: list[tuple[str, str, str]] = []
            for path in _vulkan_manifests(view):
                library, why = _vulkan_manifest(view, path)
                if why is None:
                    taken.append((path, library, frozenset({"vulkan"})))
                elif library is not None:
                    skipped.append((path, library, why))
            view.file_memo[("skipped manifests", api)] = skipped
            found = taken
        else:
            found = _opencl_entries(view)
        view.file_memo[key] = found
    return found  # type: ignore[return-value]


def _skipped_manifest(view: ContainerView, library: str, soname: str) -> str | None:
    """A Vulkan ICD manifest that names `library` but that the loader skips, and why, in words."""
    _loader_entries(view, "vulkan")
    skipped = cast("list[tuple[str, str, str]]", view.file_memo[("skipped manifests", "vulkan")])
    for path, value, why in skipped:
        if view.names_library(value, path, library, soname):
            return f"the Vulkan ICD {path} names it, but the loader skips that manifest: {why}"
    return None


def _registration(view: ContainerView, library: str, soname: str, api: str) -> tuple[str, frozenset[str]] | None:
    """Which registrations make a loader load `library`, described, and which loaders read them."""
    found: list[str] = []
    loaders: set[str] = set()
    for path, value, readers in _loader_entries(view, api):
        if api == "opencl" and value is not None and value != value.strip():
            continue  # the loaders dlopen the line as it is: a stray space or \r names no file
        if value and view.names_library(value, path, library, soname):
            found.append(path if path.startswith(("OCL_ICD_", "OPENCL_")) else f"{path} naming {value}")
            loaders |= readers
    if not found:
        return None
    return found[0], frozenset(loaders)


def _software_note(view: ContainerView, api: str) -> str | None:
    for path, value, _ in _loader_entries(view, api):
        if not value:
            continue
        file_name = posixpath.basename(value).lower()
        for parts, name in SOFTWARE_DRIVERS:
            if any(part in file_name for part in parts):
                kind = "Vulkan ICD" if api == "vulkan" else "OpenCL ICD"
                return f"the {kind} {path} it mounts names {value}, {name}, a software driver that never counts"
    return None


# --- render nodes: AMD, Intel, virtio-gpu (Venus), nouveau (NVK) ---------------------------------


def _kfd_advice(view: ContainerView) -> str:
    """How to get /dev/kfd: the spec lists it but the host lacks it (amdgpu's KFD is not up), or add it."""
    if KFD in view.nodes and not view.usable_node(KFD):
        return (
            f"the spec lists {KFD} but the host has none: load the amdgpu kernel driver with KFD support "
            f"(ROCm's DKMS module or a kernel with CONFIG_HSA_AMD)"
        )
    return f"add {KFD} to the device (`amd-ctk cdi generate` does)"


# The GPU / LLVM targets of ROCm's compatibility matrix (ROCm/ROCm docs/compatibility/compatibility-matrix.rst,
# the ROCm 7.x columns); ROCm supports none below gfx9.
ROCM_TARGETS = frozenset(
    {"gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201"}
)
ROCM_FLOOR_MAJOR = 9


def gfx_name(version: int) -> str:
    """amdkfd's gfx_target_version (major * 10000 + minor * 100 + stepping) as ROCm names it: 90010 is gfx90a."""
    major, minor, stepping = version // 10000, version // 100 % 100, version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def _override(version: int) -> str:
    """HSA_OVERRIDE_GFX_VERSION's value that makes ROCm treat an RDNA GPU as a supported target of its own
    major.minor (gfx1031 as gfx1030), or '' where there is none."""
    major, minor = version // 10000, version // 100 % 100
    same = sorted(t for t in ROCM_TARGETS if t.startswith(f"gfx{major}{minor:x}") and len(t) == len(gfx_name(version)))
    if major < 10 or not same:
        return ""
    stepping = int(same[0][-1], 16)
    return f"{major}.{minor}.{stepping}"


def _rocm_target(view: ContainerView, amd: list[RenderNode]) -> Finding | None:
    """ROCm's verdict on the AMD GPUs' gfx targets (amdkfd's topology under the root); None where the
    topology names none of them."""
    targets = view.host.kfd_gfx_targets()
    known: list[tuple[RenderNode, int]] = []
    for render in amd:
        name = posixpath.basename(view.nodes[render.path].host_path or render.path)
        minor = name.removeprefix("renderD")
        if minor.isascii() and minor.isdigit() and int(minor) in targets:
            known.append((render, targets[int(minor)]))
    if not known:
        return None
    where = "amdkfd's topology in /sys/class/kfd"
    for render, version in known:
        if gfx_name(version) in ROCM_TARGETS:
            return Finding(
                PROVIDED,
                f"gets {KFD} and {render.path} of an AMD GPU ({render.source}), target {gfx_name(version)} ({where}), "
                f"on ROCm's compatibility matrix; the image brings the ROCm runtime (HIP, ROCr)",
                ("rocm-runtime",),
            )
    near = [(render, version) for render, version in known if version // 10000 >= ROCM_FLOOR_MAJOR]
    if near:
        render, version = near[0]
        value = _override(version)
        override = (
            f"HSA_OVERRIDE_GFX_VERSION={value} in the container makes ROCm treat it as gfx{value.replace('.', '')}"
            if value
            else "HSA_OVERRIDE_GFX_VERSION set to a supported target of its family may make ROCm run it"
        )
        return Finding(
            UNKNOWN,
            f"gets {KFD} and {render.path} of an AMD GPU whose target {gfx_name(version)} ({where}) is not on ROCm's "
            f"compatibility matrix, so the ROCm runtime may not use it: {override} (unsupported by AMD)",
        )
    render, version = known[0]
    return Finding(
        ABSENT,
        f"gets {KFD} and {render.path} of an AMD GPU whose target {gfx_name(version)} ({where}) is below ROCm's "
        f"floor (gfx9: no ROCm release supports an older target), so the ROCm runtime does not use it: its Vulkan "
        f"(Mesa RADV) is judged apart and is what a container can use instead",
    )


def _rocm(view: ContainerView, renders: list[RenderNode]) -> Finding:
    amd = [r for r in renders if r.vendor == "0x1002"]
    kfd = view.usable_node(KFD)
    if amd and kfd:
        return _rocm_target(view, amd) or Finding(
            PROVIDED,
            f"gets {KFD} and {amd[0].path} of an AMD GPU ({amd[0].source}); "
            f"the image brings the ROCm runtime (HIP, ROCr)",
            ("rocm-runtime",),
        )
    if amd:
        return Finding(
            PARTIAL, f"gets {amd[0].path} of an AMD GPU but no {KFD}, ROCm's compute interface: {_kfd_advice(view)}"
        )
    if kfd:
        return Finding(
            PARTIAL,
            f"gets {KFD} but no render node of an AMD GPU: add the GPU's /dev/dri/renderD* "
            f"node (`amd-ctk cdi generate` does)",
        )
    return Finding(ABSENT, f"has no {KFD} and no AMD render node{_not_on_host(view)}")


def _render_graphics(view: ContainerView, renders: list[RenderNode], api: str) -> Finding:
    kfd = view.usable_node(KFD)
    for render in renders:
        if render.vendor == "0x1002":
            if api == "vulkan":
                return Finding(
                    PROVIDED,
                    f"gets {render.path} of an AMD GPU ({render.source}); "
                    f"the image brings Mesa RADV and the Vulkan loader",
                    ("mesa-vulkan", "vulkan-loader"),
                )
            if kfd:
                return Finding(
                    PROVIDED,
                    f"gets {KFD} and {render.path} of an AMD GPU ({render.source}); "
                    f"the image brings ROCm's OpenCL runtime and its ICD",
                    ("rocm-opencl", "opencl-icd-loader"),
                )
            return Finding(
                PARTIAL,
                f"gets {render.path} of an AMD GPU but no {KFD}, which ROCm's OpenCL needs: {_kfd_advice(view)}",
            )
        if render.vendor == "0x8086":
            if api == "vulkan":
                return Finding(
                    PROVIDED,
                    f"gets {render.path} of an Intel GPU ({render.source}); the image brings Mesa ANV and the "
                    f"Vulkan loader",
                    ("mesa-vulkan", "vulkan-loader"),
                )
            return Finding(
                PROVIDED,
                f"gets {render.path} of an Intel GPU ({render.source}); the image brings Intel's compute-runtime "
                f"and its ICD",
                ("intel-compute-runtime", "opencl-icd-loader"),
            )
        if render.vendor == "0x1af4" and api == "vulkan":
            return Finding(
                PROVIDED,
                f"gets {render.path} of a virtio-gpu ({render.source}), whose Vulkan is carried to the host's GPU; "
                f"the image brings Mesa's Venus driver and the Vulkan loader",
                ("mesa-venus", "vulkan-loader"),
            )
        if render.vendor == "0x10de" and render.driver == "nouveau" and api == "vulkan":
            return Finding(
                PROVIDED,
                f"gets {render.path} of an NVIDIA GPU driven by nouveau (sysfs); the image brings Mesa's NVK "
                f"driver and the Vulkan loader",
                ("mesa-nvk", "vulkan-loader"),
            )
    if renders:
        render = renders[0]
        if render.vendor == "0x10de":
            return Finding(ABSENT, f"gets {render.path} of an NVIDIA GPU but no NVIDIA user-space driver for {api}")
        if render.vendor == "0x1af4":
            return Finding(ABSENT, f"gets {render.path} of a virtio-gpu, which carries Vulkan only (Venus), not {api}")
        return Finding(
            ABSENT, f"gets {render.path} of {render.vendor_name} ({render.source}), a GPU cgpu claims nothing for"
        )
    return Finding(ABSENT, f"has no GPU render node (/dev/dri/renderD*){_not_on_host(view)}")


def _not_on_host(view: ContainerView) -> str:
    listed = view.absent_nodes(RENDER_NODE) + view.absent_nodes(KFD_NODE)
    if not listed:
        return ""
    return (
        f" on this host: it lists {_nodes_text(listed)}, which the host does not have, so no GPU is behind "
        f"{'them' if len(listed) > 1 else 'it'}"
    )


# --- WSL -----------------------------------------------------------------------------------------


def _directml(view: ContainerView) -> Finding:
    """D3D12 on WSL: libdxcore and libd3d12 (which loads libd3d12core) from /usr/lib/wsl/lib, and the
    adapter vendor's user-mode driver from its driver-store folder under /usr/lib/wsl/drivers."""
    if not view.usable_node(DXG):
        return Finding(ABSENT, f"has no {DXG}, WSL's GPU paravirtualization device")
    names = view.index.names
    needed = ["libdxcore.so", "libd3d12.so", "libd3d12core.so"]
    have = [n for n in needed if n in names]
    lack = [n for n in needed if n not in names]
    store = [p for p in view.index.paths if p.startswith("/usr/lib/wsl/drivers/")]
    nvidia_store = any("/libcuda.so.1.1" in p or "/nvidia-smi" in p for p in store)
    if nvidia_store and not any(p.endswith("/" + NVIDIA_D3D12_UMD) for p in store):
        lack.append(f"NVIDIA's D3D12 user-mode driver {NVIDIA_D3D12_UMD} from its driver-store folder")
    elif not store:
        lack.append("a driver-store folder (/usr/lib/wsl/drivers/...) with the GPU vendor's D3D12 user-mode driver")
    if not lack:
        return Finding(PROVIDED, f"gets {DXG}, {', '.join(have)} and the driver store from the WSL host")
    got = _nodes_text([DXG, *have])
    return Finding(
        PARTIAL,
        f"gets {got} but not {' or '.join(lack)}: mount /usr/lib/wsl/lib and /usr/lib/wsl/drivers (or the whole "
        f"/usr/lib/wsl) into the container",
    )
