"""The cdi backend (Linux): which GPU APIs a container started with a CDI device gets.

Reads the spec dirs as the engines' CDI library does (`cgpu.cdi`), builds each device's
container view (spec-level plus device edits), checks it against the host under `--root`
(missing paths block a device; versioned paths of another driver make a spec stale) and
applies the per-API rules of `cdi_rules`. The node answer is the union over the devices a
container can start with.

The code lives in named modules: `backend` (the entry, `probe`), `judging` (which engine judges),
`answer` (the scan into device answers), `selection` (`--device`), `problems`, `evidence` (the
node answer), `device`, `host`, `view`, `rules`, `verify` with `probe_image` (`--verify`),
`memory` (what is kept from one probe to the next) and `inputs` (what an answer depends on, for
`cgpu watch`). It offers `new_memory` and `answer_inputs` (`cgpu.backends`).
"""

from cgpu.backends.cdi.answer import answer_scan
from cgpu.backends.cdi.backend import probe
from cgpu.backends.cdi.device import APIS, DeviceAnswer
from cgpu.backends.cdi.memory import Memory, new_memory

__all__ = ["APIS", "DeviceAnswer", "Memory", "answer_inputs", "answer_scan", "new_memory", "probe"]


def __getattr__(name: str) -> object:
    """`answer_inputs`, imported on first use (`cgpu watch`), not on a probe's path."""
    if name == "answer_inputs":
        from cgpu.backends.cdi.inputs import answer_inputs

        return answer_inputs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
