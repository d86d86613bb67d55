"""The krunkit backend (macOS on Apple silicon): Vulkan through Venus.

Containers on a Mac get a GPU only in a libkrun VM (krunkit), whose virtio-gpu carries Vulkan
(Mesa Venus -> virglrenderer -> MoltenVK -> Metal) to the host. Whether it works depends on the
image (Mesa's libkrun build; stock Mesa fails `vkCreateInstance`) and on the VM, so the answer
comes from running the Venus probe image with `/dev/dri` in that VM: the agent's podman machine
on the libkrun provider, or a VM booted from `--vm-image`. The answer is cached (booting a VM
for every doctor run is too slow).

The code lives in named modules: `backend` (`probe`, the entry), `machine` (the podman machine
path), `booted` (a VM booted from --vm-image), `vm` (krunkit itself), `judging` (the probe's
output to an answer), `cached` and `answer_cache` (the answer cache), `image_files` (the probe
image's build context); podman is reached through `cgpu.engines.client`. This package only
re-exports, each name loaded on first use, so that `cgpu krunkit write-assets` loads
`image_files` alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cgpu.backends.krunkit.backend import QUICK_TIMEOUT_S as QUICK_TIMEOUT_S
    from cgpu.backends.krunkit.backend import probe as probe
    from cgpu.backends.krunkit.booted import BOOT_TIMEOUT_S as BOOT_TIMEOUT_S
    from cgpu.backends.krunkit.booted import VM_FOLDER_DAYS as VM_FOLDER_DAYS
    from cgpu.backends.krunkit.cached import CACHE_TTL_S as CACHE_TTL_S
    from cgpu.backends.krunkit.judging import GPU_DEVICE as GPU_DEVICE
    from cgpu.backends.krunkit.judging import INSTANCE_FAILURES as INSTANCE_FAILURES
    from cgpu.backends.krunkit.judging import LIBKRUN_MESA_FIX as LIBKRUN_MESA_FIX
    from cgpu.backends.krunkit.judging import ProbeFailed as ProbeFailed
    from cgpu.backends.krunkit.judging import judge as judge
    from cgpu.backends.krunkit.machine import BUILD_PROBE_IMAGE as BUILD_PROBE_IMAGE
    from cgpu.backends.krunkit.machine import DEFAULT_PROBE_IMAGE as DEFAULT_PROBE_IMAGE
    from cgpu.backends.krunkit.machine import RUN_TIMEOUT_S as RUN_TIMEOUT_S

# name -> the module that defines it
_EXPORTS = {
    "BOOT_TIMEOUT_S": "booted",
    "VM_FOLDER_DAYS": "booted",
    "CACHE_TTL_S": "cached",
    "GPU_DEVICE": "judging",
    "INSTANCE_FAILURES": "judging",
    "LIBKRUN_MESA_FIX": "judging",
    "ProbeFailed": "judging",
    "judge": "judging",
    "BUILD_PROBE_IMAGE": "machine",
    "DEFAULT_PROBE_IMAGE": "machine",
    "RUN_TIMEOUT_S": "machine",
    "QUICK_TIMEOUT_S": "backend",
    "probe": "backend",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
