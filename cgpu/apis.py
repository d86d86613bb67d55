"""The GPU API names cgpu reports, in the one order every report uses."""

from __future__ import annotations

from typing import Final, Iterable

API_ORDER: Final = ("cuda", "rocm", "vulkan", "opencl", "directml", "metal")

METAL_EVIDENCE: Final = (
    "Metal is an Apple host API: it never reaches a Linux container, only Vulkan carried over "
    "virtio-gpu (Venus) does"
)


def ordered(apis: Iterable[str]) -> list[str]:
    """The given API names in canonical order, without duplicates; unknown names are an error."""
    wanted = set(apis)
    unknown = wanted - set(API_ORDER)
    if unknown:
        raise ValueError(f"unknown GPU API name(s): {', '.join(sorted(unknown))}")
    return [api for api in API_ORDER if api in wanted]
