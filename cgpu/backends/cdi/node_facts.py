"""What the host does with the device nodes the judged devices inject, as problems and as the report's
`device_nodes` data (numbers a spec pins that are not the host's: device_identity; the engine's cgroup
driver and /dev/char links are added by dev_char), and NVIDIA's refresh units as `cdi_refresh`."""

from __future__ import annotations

from cgpu.backends.cdi.device import DeviceAnswer
from cgpu.backends.cdi.device_identity import WrongNode, consequence, identity_fix, wrong_node
from cgpu.backends.cdi.memory import Kept, fresh
from cgpu.backends.cdi.problems import name_list
from cgpu.backends.cdi.spec_fixes import refresh_units
from cgpu.cdi.model import DeviceNode
from cgpu.node.host import HostFS
from cgpu.problem import Problem
from cgpu.report import ReportBuilder


def injected_nodes(answers: list[DeviceAnswer]) -> dict[str, dict[str, DeviceNode]]:
    """Per spec file, each host node its devices inject (spec-level and their own), by host path. Each
    edits object is read once: a spec's own for all its devices, and a device's for every name of it (a
    GPU's index and UUID; 20,000 claim devices with the same edits are one)."""
    found: dict[str, dict[str, DeviceNode]] = {}
    seen: set[int] = set()
    for answer in answers:
        spec = answer.device.spec
        nodes = found.get(spec.path)
        if nodes is None:
            nodes = found[spec.path] = {}
            for node in spec.edits.device_nodes:
                if node.permissions != "none":
                    nodes.setdefault(node.host_path or node.path, node)
        # `same` is the spec's first device with these edits; a device judged alone is its own
        edits = answer.same if answer.same is not answer.findings else answer.device.device
        if id(edits) in seen:
            continue
        seen.add(id(edits))
        for node in answer.device.device.edits.device_nodes:
            if node.permissions != "none":
                nodes.setdefault(node.host_path or node.path, node)
    return found


def injecting(answers: list[DeviceAnswer], spec_path: str, paths: set[str]) -> list[str]:
    """The names of the devices of one spec file that inject any of `paths` (host paths)."""
    names = []
    for answer in answers:
        spec = answer.device.spec
        if spec.path != spec_path:
            continue
        for node in (*spec.edits.device_nodes, *answer.device.device.edits.device_nodes):
            if node.permissions != "none" and (node.host_path or node.path) in paths:
                names.append(answer.name)
                break
    return names


def report_node_facts(report: ReportBuilder, answers: list[DeviceAnswer], host: HostFS, kept: Kept) -> None:
    """The `device_nodes` data and the problems of the judged devices' nodes (`kept`: as the last
    probe found them, where its answers were these)."""
    problems, refresh, wrong = kept.get("node_facts", (), lambda: _node_facts(answers, host))
    report.add(*problems)
    report.cdi_refresh = fresh(refresh)
    if answers:
        report.device_nodes = {"wrong_numbers": fresh(wrong)}


def _node_facts(
    answers: list[DeviceAnswer], host: HostFS
) -> tuple[list[Problem], dict[str, object] | None, list[dict[str, object]]]:
    by_spec = injected_nodes(answers)
    wrong: dict[str, WrongNode] = {}
    problems = []
    for spec_path, nodes in by_spec.items():
        found = {path: w for path, node in nodes.items() if (w := wrong_node(node, host)) is not None}
        if not found:
            continue
        names = injecting(answers, spec_path, set(found))
        kind = next(a.device.spec.kind for a in answers if a.device.spec.path == spec_path)
        for item in found.values():
            wrong.setdefault(item.path, item)
        problems.append(
            Problem(
                "error",
                spec_path,
                f"{name_list(names)}: {' and '.join(w.clause() for w in found.values())}, so "
                f"{consequence(list(found.values()))}: {identity_fix(kind)}",
                "device-identity",
            )
        )
    return problems, refresh_units(host), [w.as_dict() for w in wrong.values()]
