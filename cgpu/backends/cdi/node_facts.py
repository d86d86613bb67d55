"""What the host does with the device nodes the judged devices inject, as problems and as the report's
`device_nodes` data (numbers a spec pins that are not the host's: device_identity; the engine's cgroup
driver and /dev/char links are added by dev_char), and NVIDIA's refresh units as `cdi_refresh`."""

from __future__ import annotations

from cgpu.backends.cdi.device import DeviceAnswer
from cgpu.backends.cdi.device_identity import WrongNode, consequence, identity_fix, wrong_node
from cgpu.backends.cdi.problems import name_list
from cgpu.backends.cdi.spec_fixes import refresh_units
from cgpu.cdi.model import DeviceNode
from cgpu.node.host import HostFS
from cgpu.report import ReportBuilder


def injected_nodes(answers: list[DeviceAnswer]) -> dict[str, dict[str, tuple[DeviceNode, list[DeviceAnswer]]]]:
    """Per spec file, each host node its devices inject (spec-level and their own, by host path), with
    the devices that inject it. Each edits object is read once (20,000 claim devices share a spec's)."""
    found: dict[str, dict[str, tuple[DeviceNode, list[DeviceAnswer]]]] = {}
    by_spec: dict[int, list[DeviceAnswer]] = {}
    for answer in answers:
        by_spec.setdefault(id(answer.device.spec), []).append(answer)
    for users in by_spec.values():
        spec = users[0].device.spec
        nodes = found.setdefault(spec.path, {})
        for node in spec.edits.device_nodes:  # every device of the spec injects these
            if node.permissions != "none":
                nodes.setdefault(node.host_path or node.path, (node, list(users)))
        everyone = set(nodes)
        for answer in users:
            for node in answer.device.device.edits.device_nodes:
                path = node.host_path or node.path
                if node.permissions == "none" or path in everyone:
                    continue
                entry = nodes.get(path)
                if entry is None:
                    nodes[path] = (node, [answer])
                elif entry[1][-1] is not answer:
                    entry[1].append(answer)
    return found


def report_node_facts(report: ReportBuilder, answers: list[DeviceAnswer], host: HostFS) -> None:
    """The `device_nodes` data and the problems of the judged devices' nodes."""
    by_spec = injected_nodes(answers)
    wrong: dict[str, WrongNode] = {}
    for spec_path, nodes in by_spec.items():
        found = [(w, users) for node, users in nodes.values() if (w := wrong_node(node, host)) is not None]
        if not found:
            continue
        kind = found[0][1][0].device.spec.kind
        names = list(dict.fromkeys(a.name for _, users in found for a in users))
        for item, _ in found:
            wrong.setdefault(item.path, item)
        report.problem(
            "error",
            spec_path,
            f"{name_list(names)}: {' and '.join(w.clause() for w, _ in found)}, so "
            f"{consequence([w for w, _ in found])}: {identity_fix(kind)}",
            "device-identity",
        )
    report.cdi_refresh = refresh_units(host)
    if answers:
        report.device_nodes = {"wrong_numbers": [w.as_dict() for w in wrong.values()]}
