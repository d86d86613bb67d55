"""The cdi backend (Linux): which GPU APIs a container started with a CDI device gets.

Reads the spec dirs as the engines' CDI library does (`cgpu.cdi`), builds each device's
container view (spec-level plus device edits), checks it against the host under `--root`
(missing paths block a device; versioned paths of another driver make a spec stale) and
applies the per-API rules of `cdi_rules`. The node answer is the union over the devices a
container can start with.

The code lives in named modules: `backend` (the entry, `probe`), `judging` (which engine judges),
`answer` (the scan into device answers), `selection` (`--device`), `problems`, `evidence` (the
node answer), `device`, `host`, `view`, `rules`, `verify` with `probe_image` (`--verify`), and
`inputs` (what an answer depends on, for `cgpu watch`).
"""

from cgpu.backends.cdi.answer import _REMEMBERED, answer_scan, remake_kept
from cgpu.backends.cdi.backend import probe
from cgpu.backends.cdi.device import APIS, DeviceAnswer
from cgpu.backends.cdi.problems import _RISKY

__all__ = ["APIS", "_REMEMBERED", "_RISKY", "DeviceAnswer", "answer_scan", "probe", "remake_kept"]
