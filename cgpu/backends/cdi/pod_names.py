"""The CDI names a pod's GPU request becomes, and whether the node's specs define them (docs/cdi.md
"The names a pod asks for"): a spec with only `all` resolves no pod that asks for one GPU by its UUID.

NVIDIA's device plugin names a GPU by its `deviceIDStrategy` (default `uuid`: `GPU-<uuid>`; `index`: `0`).
With a CDI device-list strategy (`cdi-annotations`, `cdi-cri`) it writes its own spec of kind
`k8s.device-plugin.nvidia.com/gpu` (/var/run/cdi) and asks for its names there (NVIDIA/k8s-device-plugin
`internal/cdi/cdi.go`, `cmd/nvidia-device-plugin/plugin-manager.go` `WithVendor`); with the default
`envvar` strategy NVIDIA's runtime in cdi mode turns NVIDIA_VISIBLE_DEVICES=GPU-<uuid> into
`nvidia.com/gpu=GPU-<uuid>`, and the runtime's own management devices are `management.nvidia.com/gpu=all`.
"""

from __future__ import annotations

from cgpu.backends.cdi.device import DeviceAnswer

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

PLUGIN_KIND = "k8s.device-plugin.nvidia.com/gpu"
NVIDIA_KIND, MANAGEMENT_KIND = "nvidia.com/gpu", "management.nvidia.com/gpu"
SHOWN = 8  # names listed per entry
_UUID_CHARACTERS = frozenset("0123456789abcdefABCDEF-")


def is_uuid_name(name: str) -> bool:
    """`GPU-<uuid>` or `MIG-<uuid>` (the regex `(GPU|MIG)-[0-9a-fA-F-]+`, as string work: on every run)."""
    return name.startswith(("GPU-", "MIG-")) and len(name) > 4 and _UUID_CHARACTERS.issuperset(name[4:])


def is_index_name(name: str) -> bool:
    """`0` or a MIG device's `0:1` (the regex `\\d+(:\\d+)?`)."""
    gpu, colon, mig = name.partition(":")
    return gpu.isdecimal() and (not colon or mig.isdecimal())


def _names_by_kind(answers: list[DeviceAnswer]) -> dict[str, list[str]]:
    """The device names of the NVIDIA kinds a pod's request can become, in one pass."""
    found: dict[str, list[str]] = {PLUGIN_KIND: [], NVIDIA_KIND: [], MANAGEMENT_KIND: []}
    for answer in answers:
        kind, _, name = answer.name.partition("=")
        names = found.get(kind)
        if names is not None:
            names.append(name)
    return found


def id_strategy(names: list[str]) -> str:
    uuid = any(is_uuid_name(n) for n in names)
    index = any(is_index_name(n) for n in names)
    return "uuid and index" if uuid and index else "uuid" if uuid else "index" if index else "neither"


def _entry(requester: str, asks_for: str, kind: str, names: list[str], covered: bool, why: str) -> dict[str, Any]:
    shown = [f"{kind}={n}" for n in names[:SHOWN]]
    return {"requester": requester, "asks_for": asks_for, "names": shown, "covered": covered, "why": why}


def _per_gpu(kind: str, requester: str, names: list[str]) -> dict[str, Any]:
    """Whether a pod asking for one GPU of `kind` by its UUID resolves."""
    per_gpu = [n for n in names if is_uuid_name(n)]
    if per_gpu:
        why = f"the spec of kind {kind} names {len(per_gpu)} GPU{'s' if len(per_gpu) != 1 else ''} by UUID"
    else:
        why = (
            f"the spec of kind {kind} defines only {', '.join(sorted(set(names))[:SHOWN])} and no GPU-<uuid> name "
            f"(a WSL or management spec has only `all`: nvidia-container-toolkit#1239, #1895), so a pod asking for "
            f"one GPU by UUID is refused (unresolvable CDI devices): generate per-GPU names (`nvidia-ctk cdi "
            f"generate`, whose default device-name-strategy writes index and uuid), or run the device plugin with a "
            f"CDI device-list strategy so that it writes its own spec"
        )
    return _entry(requester, f"{kind}=GPU-<uuid>", kind, per_gpu, bool(per_gpu), why)


def pod_names(answers: list[DeviceAnswer]) -> list[dict[str, Any]]:
    """What each NVIDIA requester asks for and whether the specs define it; empty where no NVIDIA kind
    is defined (AMD's and Intel's plugins ask for the names their own generators write)."""
    found: list[dict[str, Any]] = []
    by_kind = _names_by_kind(answers)
    plugin = by_kind[PLUGIN_KIND]
    if plugin:
        strategy = id_strategy(plugin)
        found.append(
            _entry(
                "NVIDIA device plugin, deviceListStrategy cdi-annotations or cdi-cri",
                f"{PLUGIN_KIND}=<GPU-uuid or index>",
                PLUGIN_KIND,
                [n for n in plugin if n != "all"],
                True,
                f"the plugin wrote its own spec of kind {PLUGIN_KIND}, naming the GPUs by {strategy} "
                f"(deviceIDStrategy), and asks for those names",
            )
        )
    requesters = (
        (NVIDIA_KIND, "NVIDIA device plugin (envvar strategy) through NVIDIA's runtime in cdi mode"),
        (MANAGEMENT_KIND, "NVIDIA device plugin in CDI mode under the GPU Operator (management kind)"),
    )
    for kind, requester in requesters:
        if by_kind[kind]:
            found.append(_per_gpu(kind, requester, by_kind[kind]))
    return found
