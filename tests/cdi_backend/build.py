"""Spec objects built directly from dicts (the spec's JSON shape), for tests that exercise the
backend's rules without the reader: no validation here, the reader's tests cover that."""

from __future__ import annotations

from typing import Any

from cgpu.cdi.model import ContainerEdits, DeviceNode, Hook, Mount, ResolvedDevice, ScanResult, Spec, SpecDevice


def edits(data: dict[str, Any] | None) -> ContainerEdits:
    data = data or {}
    return ContainerEdits(
        env=tuple(data.get("env") or ()),
        device_nodes=tuple(
            DeviceNode(
                path=n["path"],
                host_path=n.get("hostPath"),
                type=n.get("type"),
                major=n.get("major"),
                minor=n.get("minor"),
                file_mode=n.get("fileMode"),
                permissions=n.get("permissions"),
                uid=n.get("uid"),
                gid=n.get("gid"),
            )
            for n in data.get("deviceNodes") or ()
        ),
        mounts=tuple(
            Mount(
                host_path=m["hostPath"],
                container_path=m["containerPath"],
                type=m.get("type"),
                options=tuple(m.get("options") or ()),
            )
            for m in data.get("mounts") or ()
        ),
        hooks=tuple(
            Hook(
                hook_name=h["hookName"],
                path=h["path"],
                args=tuple(h.get("args") or ()),
                env=tuple(h.get("env") or ()),
                timeout=h.get("timeout"),
            )
            for h in data.get("hooks") or ()
        ),
        additional_gids=tuple(data.get("additionalGids") or ()),
    )


def spec(doc: dict[str, Any], path: str = "/etc/cdi/test.yaml", priority: int = 0) -> Spec:
    return Spec(
        path=path,
        version=str(doc["cdiVersion"]).lstrip("v"),
        kind=doc["kind"],
        devices=tuple(SpecDevice(name=str(d["name"]), edits=edits(d.get("containerEdits"))) for d in doc["devices"]),
        edits=edits(doc.get("containerEdits")),
        priority=priority,
    )


def scan(*specs: Spec) -> ScanResult:
    """Later specs win on a name, as a later spec dir does."""
    devices: dict[str, ResolvedDevice] = {}
    for s in specs:
        for d in s.devices:
            devices[f"{s.kind}={d.name}"] = ResolvedDevice(f"{s.kind}={d.name}", s, d)
    return ScanResult(devices=devices, specs=list(specs), problems=[])
