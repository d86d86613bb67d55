"""The GPU API names cgpu reports, in the one order every report uses."""

from __future__ import annotations

from typing import Final

API_ORDER: Final = ("cuda", "rocm", "vulkan", "opencl", "directml", "metal")

METAL_EVIDENCE: Final = (
    "Metal is an Apple host API: it never reaches a Linux container, only Vulkan carried over virtio-gpu (Venus) does"
)
