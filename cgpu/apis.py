"""The GPU API names cgpu reports, in the one order every report uses, and the words of the
report contract: per-API states and what an image must bring."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Final, Literal


API_ORDER: Final = ("cuda", "rocm", "vulkan", "opencl", "directml", "metal")
# Every API but metal: the ones a container can get and a backend answers for. Metal is an Apple
# host API that never reaches a Linux container (METAL_EVIDENCE): a report always says absent.
CONTAINER_APIS: Final = API_ORDER[:-1]
# CONTAINER_APIS as a type (a test holds them equal), and every API as one
if TYPE_CHECKING:
    ContainerApi = Literal["cuda", "rocm", "vulkan", "opencl", "directml"]
    Api = Literal[ContainerApi, "metal"]
    State = Literal["provided", "absent", "unknown"]
else:  # names to import at run time; the Literals are for type checkers
    ContainerApi = Api = State = str
STATES: Final = ("provided", "absent", "unknown")

# What a container image must bring for an API the host side gives: stable tokens a scheduler
# can match on, each with the sentence the docs and schema use. New tokens may be added within
# a format version; a consumer treats a token it does not know as "the image must bring more".
IMAGE_NEEDS: Final[dict[str, str]] = {
    "glibc": "a glibc-based image: NVIDIA's user-space libraries cannot load under musl",
    "vulkan-loader": "the Vulkan loader (libvulkan.so.1)",
    "opencl-icd-loader": "an OpenCL ICD loader (libOpenCL.so.1: ocl-icd or Khronos')",
    "khronos-opencl-loader": "the Khronos OpenCL ICD loader, which reads OCL_ICD_FILENAMES (ocl-icd does not)",
    "ocl-icd-loader": (
        "ocl-icd's OpenCL loader (Debian's and Ubuntu's libOpenCL.so.1), which reads OPENCL_VENDOR_PATH, an "
        "OCL_ICD_VENDORS naming a file or library, and an .icd file's first line only (the Khronos loader does not)"
    ),
    "lib64-search": "a libc that searches /usr/lib64 by default (Fedora, RHEL, SUSE; not Debian or Ubuntu)",
    "multiarch-search": (
        "a libc that searches Debian's library folders (/usr/lib/<triplet>, /usr/lib) by default: Debian, Ubuntu; "
        "not Fedora, RHEL or SUSE"
    ),
    "mesa-vulkan": "Mesa's Vulkan driver for the GPU (RADV for AMD, ANV for Intel, NVK for nouveau)",
    "mesa-venus": "Mesa's Venus Vulkan driver (virtio-gpu)",
    "mesa-nvk": "Mesa's NVK Vulkan driver, for NVIDIA GPUs driven by nouveau",
    "mesa-venus-libkrun": "the libkrun build of Mesa's Venus driver (stock Mesa fails vkCreateInstance under krunkit)",
    "rocm-runtime": "the ROCm runtime (HSA: libhsa-runtime64.so.1)",
    "rocm-opencl": "ROCm's OpenCL driver and its ICD registration",
    "rocm-dxg": (
        "on WSL: AMD's librocdxg.so (ROCm 7.1 or later; built from the same ROCm as the image's HSA runtime, in the "
        "image or mounted from the distro) and HSA_ENABLE_DXG_DETECTION=1 in the container's environment"
    ),
    "mesa-dozen": (
        "Mesa's Dozen Vulkan driver (dzn: Vulkan on D3D12, Mesa's `microsoft-experimental` driver; not a "
        "conformant Vulkan implementation)"
    ),
    "intel-compute-runtime": "Intel's compute-runtime (NEO) OpenCL driver and its ICD registration",
}

METAL_EVIDENCE: Final = (
    "Metal is an Apple host API: it never reaches a Linux container, only Vulkan carried over virtio-gpu (Venus) does"
)
