"""cgroups and /dev/char (docs/cdi.md "cgroups and /dev/char"): with the systemd cgroup driver, runc gives
systemd each device rule as a DeviceAllow entry naming /dev/char/MAJOR:MINOR, and skips a rule whose link
(and /sys/dev/char entry) does not exist (runc `libcontainer/cgroups/systemd/common.go`,
`generateDeviceProperties`). The rules runc wrote itself hold until `systemctl daemon-reload` makes systemd
apply the unit's own again: then a node without a link loses its access, and NVML fails with "Unknown
Error" (nvidia-container-toolkit#48). NVIDIA's nodes are not made by udev, so they have no link unless
`nvidia-ctk system create-dev-char-symlinks` made one."""

from __future__ import annotations

import posixpath

from cgpu.backends.cdi.device import DeviceAnswer
from cgpu.backends.cdi.node_facts import injected_nodes
from cgpu.backends.cdi.problems import name_list
from cgpu.cdi.model import DeviceNode
from cgpu.node.host import HostFS
from cgpu.report import ReportBuilder

CREATE_LINKS = "`nvidia-ctk system create-dev-char-symlinks --create-all`"


def _numbers(node: DeviceNode, host: HostFS) -> tuple[str, int, int] | None:
    """The type and numbers runc's rule for this node carries: the host device's, else the spec's own."""
    found = host.device_number(node.host_path or node.path)
    if found is not None:
        return found
    if node.major and node.type in (None, "c", "u", "b"):
        return ("b" if node.type == "b" else "c"), node.major, node.minor or 0
    return None


def without_links(answers: list[DeviceAnswer], host: HostFS) -> list[str]:
    """The injected nodes (host paths) with neither a /dev/char (/dev/block) link nor a /sys/dev entry
    for their numbers; nodes whose numbers cgpu cannot tell are left out."""
    lacking: dict[str, None] = {}
    for nodes in injected_nodes(answers).values():
        for path, node in nodes.items():
            numbers = _numbers(node, host)
            if numbers is None:
                continue
            kind, major, minor = numbers
            link = f"/dev/{'block' if kind == 'b' else 'char'}/{major}:{minor}"
            if not host.exists(link) and not host.exists("/sys" + link):
                lacking[path] = None
    return list(lacking)


def report_dev_char(report: ReportBuilder, answers: list[DeviceAnswer], host: HostFS, engine: str | None) -> None:
    """The judging engine's cgroup driver and the nodes without a link, as `device_nodes` data; a warning
    where the driver is systemd and a node lacks its link."""
    from cgpu.engines.cgroup_driver import SYSTEMD, cgroup_driver

    if report.device_nodes is None or engine is None:
        return
    found = cgroup_driver(engine, host)
    if found is None:
        return
    driver, read_from = found
    lacking = without_links(answers, host)
    report.device_nodes["cgroup_driver"] = {"engine": engine, "driver": driver, "read_from": read_from}
    report.device_nodes["without_dev_char"] = lacking
    if driver != SYSTEMD or not lacking:
        return
    nvidia = [p for p in lacking if posixpath.basename(p).startswith("nvidia")]
    fixes = []
    if nvidia:
        fixes.append(f"create them with {CREATE_LINKS} (after the driver loads, at each boot: a udev rule or unit)")
    if len(nvidia) < len(lacking):
        fixes.append("`udevadm trigger` makes udev link the nodes it created")
    report.problem(
        "warning",
        host.display("/dev/char"),
        f"{engine} runs containers with the systemd cgroup driver ({read_from}) and {name_list(lacking, 4)} "
        f"{'has' if len(lacking) == 1 else 'have'} no /dev/char link: runc gives systemd no rule for such a node, "
        f"so after the next `systemctl daemon-reload` a running container loses access to it ('Failed to "
        f"initialize NVML: Unknown Error', nvidia-container-toolkit#48): {'; '.join(fixes)}",
        "dev-char",
    )
