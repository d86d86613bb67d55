"""The per-API rules of the CDI backend (design §3): what one device's container gets.

Each rule returns a `Finding`: provided, partial (something aimed at the API is there, but not
all of it) or absent, with a sentence fragment that follows the device's name in the evidence
("gets ..." / "mounts ... but ...: fix"). Everything that must come from the host is checked
against the container view; what an ordinary image brings (loaders, Mesa, ROCm) is named.
"""

from __future__ import annotations

import posixpath
import re

from cgpu.backends.cdi.view import ContainerView

PROVIDED, PARTIAL, ABSENT = "provided", "partial", "absent"
_RANK = {PROVIDED: 2, PARTIAL: 1, ABSENT: 0}

NVIDIA_GPU_NODE = re.compile(r"/dev/nvidia\d+")
RENDER_NODE = re.compile(r"/dev/dri/renderD\d+")
MIG_CAP_NODE = re.compile(r"/dev/nvidia-caps/nvidia-cap\d+")
DRM_NODE = re.compile(r"/dev/dri/(card|renderD)\d+")
CTL, UVM, DXG, KFD = "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/dxg", "/dev/kfd"

VENDOR_NAMES = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}
KIND_VENDOR_IDS = {"nvidia.com": "0x10de", "amd.com": "0x1002", "intel.com": "0x8086"}

VULKAN_SEARCH_DIRS = (
    "/etc/vulkan/icd.d",
    "/etc/xdg/vulkan/icd.d",
    "/usr/local/etc/vulkan/icd.d",
    "/usr/local/share/vulkan/icd.d",
    "/usr/share/vulkan/icd.d",
)
OPENCL_VENDORS_DIR = "/etc/OpenCL/vendors"

# Software drivers never count (design §3); matched on the library file name an ICD names.
SOFTWARE_DRIVERS = (
    (re.compile(r"lvp|llvmpipe"), "lavapipe (llvmpipe)"),
    (re.compile(r"swiftshader"), "SwiftShader"),
    (re.compile(r"pocl"), "PoCL"),
)

NVIDIA_REGENERATE = "regenerate the spec with `nvidia-ctk cdi generate`"


class Finding:
    __slots__ = ("state", "text")

    def __init__(self, state: str, text: str) -> None:
        self.state = state  # PROVIDED, PARTIAL or ABSENT
        self.text = text  # follows the device name: "gets ...", "mounts ... but ...: fix"

    def __repr__(self) -> str:
        return f"Finding({self.state!r}, {self.text!r})"


class RenderNode:
    __slots__ = ("path", "source", "vendor")

    def __init__(self, path: str, vendor: str | None, source: str) -> None:
        self.path = path  # in the container
        self.vendor = vendor  # PCI vendor id
        self.source = source  # how the vendor is known

    @property
    def vendor_name(self) -> str:
        return VENDOR_NAMES.get(self.vendor or "", f"vendor {self.vendor or 'unknown'}")


def judge(view: ContainerView, kind: str) -> dict[str, Finding]:
    """cuda, rocm, vulkan, opencl, directml for one device (metal never reaches a container)."""
    renders = render_nodes(view, kind)
    nvidia_like = bool(view.usable_nodes(NVIDIA_GPU_NODE)) or kind.startswith("nvidia.com/")
    return {
        "cuda": _cuda(view),
        "rocm": _rocm(view, renders),
        "vulkan": _best(
            _nvidia_vulkan(view), _render_graphics(view, renders, "vulkan"), nvidia_like, _software_note(view, "vulkan")
        ),
        "opencl": _best(
            _nvidia_opencl(view), _render_graphics(view, renders, "opencl"), nvidia_like, _software_note(view, "opencl")
        ),
        "directml": _directml(view),
    }


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
        found.append(RenderNode(path, vendor, source))
    return found


def _best(nvidia: Finding, render: Finding, nvidia_like: bool, software: str | None) -> Finding:
    if _RANK[nvidia.state] != _RANK[render.state]:
        best = nvidia if _RANK[nvidia.state] > _RANK[render.state] else render
    else:
        best = nvidia if nvidia_like else render
    if software and best.state != PROVIDED:
        best = Finding(best.state, f"{best.text}, and {software}")
    return best


# --- NVIDIA --------------------------------------------------------------------------------------


def _nodes_text(paths: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return paths[0] if len(paths) == 1 else f"{', '.join(paths[:-1])} and {paths[-1]}"


def _nvidia_nodes(view: ContainerView, *, uvm: bool) -> tuple[list[str], list[str]]:
    """(NVIDIA nodes the container gets, those it lacks) for a native (non-WSL) driver."""
    have: list[str] = []
    lack: list[str] = []
    for path in (CTL, UVM) if uvm else (CTL,):
        (have if view.usable_node(path) else lack).append(path)
    gpus = view.usable_nodes(NVIDIA_GPU_NODE)
    if gpus:
        have.extend(gpus)
    else:
        lack.append("/dev/nvidiaN")
    return have, lack


def _library(view: ContainerView, stem: str, soname: str) -> tuple[str | None, str | None]:
    """(library, how it is linkable) — a linkable one first; (None, None) when none is mounted."""
    key = ("library", stem, soname)
    found = view.file_memo.get(key)
    if found is None:
        found = view.file_memo[key] = _find_library(view, stem, soname)
    return found  # type: ignore[return-value]


def _find_library(view: ContainerView, stem: str, soname: str) -> tuple[str | None, str | None]:
    libraries = view.libraries(stem)
    for library in libraries:
        route = view.soname_route(library, soname)
        if route:
            return library, route
    return (libraries[0], None) if libraries else (None, None)


def _nvidia_api(
    view: ContainerView,
    library: str | None,
    route: str | None,
    soname: str,
    *,
    have: list[str],
    lack: list[str],
    registration: str | None,
    unregistered: str | None,
    brings: str,
) -> Finding:
    """The verdict once the pieces are known: all there, or what falls short and how to fix it."""
    name = posixpath.basename(library) if library else None
    short, fixes = [], []
    if lack:
        short.append(f"no {_nodes_text(lack)}")
    if name and not route:
        short.append(
            f"nothing makes {name} loadable as {soname} (no update-ldcache hook over "
            f"{posixpath.dirname(library or '')}, no create-symlinks link)"
        )
    if short:
        fixes.append(NVIDIA_REGENERATE + ("" if route or not name else " without `--disable-hook all`"))
    if name and unregistered:
        short.append(unregistered.split(": ", 1)[0])
        fixes.append(unregistered.split(": ", 1)[1])
    if not short and name:
        got = ", ".join([*have, f"{name} ({route})"])
        return Finding(PROVIDED, f"gets {got}{' and ' + registration if registration else ''}; {brings}")
    got = _nodes_text([*have, name]) if name else (_nodes_text(have) if have else "nothing of it")
    return Finding(PARTIAL, f"gets {got} but {' and '.join(short)}: {', and '.join(fixes)}")


def _cuda(view: ContainerView) -> Finding:
    library, route = _library(view, "libcuda", "libcuda.so.1")
    if view.usable_node(DXG):  # WSL mode: the driver store's libcuda.so.1.1 behind /dev/dxg
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
    return _nvidia_api(
        view,
        library,
        route,
        "libGLX_nvidia.so.0",
        have=have,
        lack=lack,
        registration=f"the Vulkan ICD {icd}" if icd else None,
        unregistered=None
        if icd
        else (
            f"no Vulkan ICD manifest naming it reaches a loader search dir ({VULKAN_SEARCH_DIRS[0]}, "
            f"{VULKAN_SEARCH_DIRS[-1]}) or VK_DRIVER_FILES: mount the host's nvidia_icd.json at /etc/vulkan/icd.d/ "
            f"(`nvidia-ctk cdi generate` does where the host has it; RPM drivers name it nvidia_icd.x86_64.json, "
            f"picked up since toolkit 1.18.0)"
        ),
        brings="the image brings the Vulkan loader (libvulkan.so.1)",
    )


def _nvidia_opencl(view: ContainerView) -> Finding:
    library, route = _library(view, "libnvidia-opencl", "libnvidia-opencl.so.1")
    if library is None:
        return Finding(ABSENT, "mounts no libnvidia-opencl.so.<driver version>, NVIDIA's OpenCL driver")
    have, lack = _nvidia_nodes(view, uvm=True)
    icd = _registration(view, library, "libnvidia-opencl.so.1", "opencl")
    return _nvidia_api(
        view,
        library,
        route,
        "libnvidia-opencl.so.1",
        have=have,
        lack=lack,
        registration=icd,
        unregistered=None
        if icd
        else (
            f"no {OPENCL_VENDORS_DIR}/*.icd file, OCL_ICD_FILENAMES or OCL_ICD_VENDORS names it, so the OpenCL "
            f"loader finds no platform: mount the host's {OPENCL_VENDORS_DIR}/nvidia.icd (nvidia-ctk 1.20.0 and "
            f"later do) or ship it in the image"
        ),
        brings="the image brings the OpenCL ICD loader (libOpenCL.so.1)",
    )


# --- loader registrations (Vulkan ICD manifests, OpenCL .icd files) -------------------------------


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
        for folder in VULKAN_SEARCH_DIRS:
            manifests.extend(p for p in view.files_in(folder) if p.endswith(".json"))
    return manifests


def _opencl_icd_files(view: ContainerView) -> list[str]:
    folder = view.env.get("OCL_ICD_VENDORS") or OPENCL_VENDORS_DIR
    if folder.endswith(".icd"):
        return [folder]
    return [p for p in view.files_in(folder) if p.endswith(".icd")]


def _registered_library(view: ContainerView, path: str, api: str) -> str | None:
    """The library a manifest (Vulkan) or .icd file (OpenCL) names, read from the host file."""
    host_path = view.host_path(path)
    if host_path is None:
        return None
    if api == "vulkan":
        data, _ = view.host.read_json(host_path)
        icd = data.get("ICD") if isinstance(data, dict) else None
        value = icd.get("library_path") if isinstance(icd, dict) else None
        return value if isinstance(value, str) else None
    text, _ = view.host.read_small(host_path)
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else None


def _loader_entries(view: ContainerView, api: str) -> list[tuple[str, str | None]]:
    """(file, the library it names) for each Vulkan ICD manifest or OpenCL .icd file the loader reads."""
    key = ("loader entries", api)
    found = view.file_memo.get(key)
    if found is None:
        files = _vulkan_manifests(view) if api == "vulkan" else _opencl_icd_files(view)
        found = view.file_memo[key] = [(path, _registered_library(view, path, api)) for path in files]
    return found  # type: ignore[return-value]


def _registration(view: ContainerView, library: str, soname: str, api: str) -> str | None:
    """Which registration makes the loader load `library`, described; None when none does."""
    for path, value in _loader_entries(view, api):
        if value and view.names_library(value, path, library, soname):
            return f"{path} naming {value}"
    if api == "opencl":
        for value in filter(None, (view.env.get("OCL_ICD_FILENAMES") or "").split(":")):
            if view.names_library(value, "/", library, soname):
                return f"OCL_ICD_FILENAMES={value}"
    return None


def _software_note(view: ContainerView, api: str) -> str | None:
    for path, value in _loader_entries(view, api):
        if not value:
            continue
        for pattern, name in SOFTWARE_DRIVERS:
            if pattern.search(posixpath.basename(value).lower()):
                kind = "Vulkan ICD" if api == "vulkan" else "OpenCL ICD"
                return f"the {kind} {path} it mounts names {value}, {name}, a software driver that never counts"
    return None


# --- render nodes: AMD and Intel -----------------------------------------------------------------


def _rocm(view: ContainerView, renders: list[RenderNode]) -> Finding:
    amd = [r for r in renders if r.vendor == "0x1002"]
    kfd = view.usable_node(KFD)
    if amd and kfd:
        return Finding(
            PROVIDED,
            f"gets {KFD} and {amd[0].path} of an AMD GPU ({amd[0].source}); "
            f"the image brings the ROCm runtime (HIP, ROCr)",
        )
    if amd:
        return Finding(
            PARTIAL,
            f"gets {amd[0].path} of an AMD GPU but no {KFD}, ROCm's compute interface: "
            f"add {KFD} to the device (`amd-ctk cdi generate` does)",
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
                )
            if kfd:
                return Finding(
                    PROVIDED,
                    f"gets {KFD} and {render.path} of an AMD GPU ({render.source}); "
                    f"the image brings ROCm's OpenCL runtime and its ICD",
                )
            return Finding(
                PARTIAL,
                f"gets {render.path} of an AMD GPU but no {KFD}, which ROCm's OpenCL "
                f"needs: add {KFD} to the device (`amd-ctk cdi generate` does)",
            )
        if render.vendor == "0x8086":
            brings = "Mesa ANV and the Vulkan loader" if api == "vulkan" else "Intel's compute-runtime and its ICD"
            return Finding(PROVIDED, f"gets {render.path} of an Intel GPU ({render.source}); the image brings {brings}")
    if renders:
        render = renders[0]
        if render.vendor == "0x10de":
            return Finding(ABSENT, f"gets {render.path} of an NVIDIA GPU but no NVIDIA user-space driver for {api}")
        return Finding(
            ABSENT, f"gets {render.path} of {render.vendor_name} ({render.source}), a GPU cgpu claims nothing for"
        )
    return Finding(ABSENT, f"has no GPU render node (/dev/dri/renderD*){_not_on_host(view)}")


def _not_on_host(view: ContainerView) -> str:
    listed = view.absent_nodes(RENDER_NODE) + view.absent_nodes(re.compile(re.escape(KFD)))
    if not listed:
        return ""
    return (
        f" on this host: it lists {_nodes_text(listed)}, which the host does not have, so no GPU is behind "
        f"{'them' if len(listed) > 1 else 'it'}"
    )


# --- WSL -----------------------------------------------------------------------------------------


def _directml(view: ContainerView) -> Finding:
    names = view.index.names
    needed = ("libdxcore.so", "libd3d12.so")
    have = [n for n in needed if n in names]
    lack = [n for n in needed if n not in names]
    if not view.usable_node(DXG):
        return Finding(ABSENT, f"has no {DXG}, WSL's GPU paravirtualization device")
    if not lack:
        return Finding(PROVIDED, f"gets {DXG}, libdxcore.so and libd3d12.so from the WSL host")
    got = _nodes_text([DXG, *have])
    return Finding(
        PARTIAL,
        f"gets {got} but not {' or '.join(lack)}: mount /usr/lib/wsl/lib "
        f"(libdxcore.so, libd3d12.so, libd3d12core.so) into the container",
    )
