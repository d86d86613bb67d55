"""The cdi backend's entry: who judges the specs, each engine's answer, and `--verify`."""

from __future__ import annotations

import os
from collections.abc import Sequence

from cgpu.backends.cdi.answer import engine_answer
from cgpu.backends.cdi.device import APIS, DeviceAnswer
from cgpu.backends.cdi.judging import engine_rules
from cgpu.engines.option import EngineOption
from cgpu.options import DEFAULT_ROOT, DEFAULT_SPEC_DIRS
from cgpu.report import ReportBuilder

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

    from cgpu.backends.cdi.memory import Memory
    from cgpu.backends.cdi.verify import LiveCheck


def probe(
    report: ReportBuilder,
    memory: Memory | None = None,
    /,
    *,
    spec_dirs: Sequence[str] | None = None,
    root: str | None = DEFAULT_ROOT,
    engine: str | EngineOption | None = None,
    devices: Sequence[str] | None = None,
    verify: bool = False,
    probe_image: str | None = None,
    timeout: float | None = None,
) -> None:
    """The answer for these options into `report`; `memory`: what is kept from the last probe
    (`cgpu.backends.cdi.new_memory`; None: nothing)."""
    for missing in [d for d in spec_dirs or () if _not_found(d)]:  # the defaults may well be absent
        report.problem(
            "warning", missing, f"the spec dir {missing} does not exist: nothing was read from it", "spec-dir"
        )
    root = root or DEFAULT_ROOT
    if not os.path.isdir(root):
        report.usage_error("root", f"{root!r} is not a directory")
        return
    judge = engine_rules(report, engine, timeout, root)
    if judge is None:
        return
    if judge.unknown is not None:
        for api in APIS:
            report.unknown(api, f"unknown: {judge.unknown}")
        report.engines = judge.report_entries({})
        return
    dirs = spec_dirs_read(spec_dirs, root, judge.entry.spec_dirs if judge.entry is not None else None)
    report.spec_dirs = dirs
    entries = engine_answer(report, judge.entry, dirs, root, devices, memory=memory)[0]
    containers: dict[int, list[str]] = {}
    for index, entry in enumerate(judge.engines):
        if entry is judge.entry:
            containers[index] = [api for api in APIS if report.state(api) == "provided"]
        else:  # each other engine's answer, as data
            own = list(spec_dirs) if spec_dirs else [under_root(root, d) for d in entry.spec_dirs]
            containers[index] = engine_answer(ReportBuilder("cdi"), entry, own, root, devices, quiet=True)[1]
    report.engines = judge.report_entries(containers)
    if entries is None:  # no answer read the host (a broken configuration, CDI off): the driver still runs
        report.nvidia_driver = _nvidia_driver(root)
        return
    live: dict[str, LiveCheck] = {}
    if verify:
        engine_dirs = list(judge.entry.spec_dirs) if judge.entry is not None else list(DEFAULT_SPEC_DIRS)
        live = _verify(
            report,
            entries.answers,
            dirs=dirs,
            engine_dirs=engine_dirs,
            engine=judge.option,
            probe_image=probe_image,
            timeout=timeout,
        )
    entries.put(report, live)


def _nvidia_driver(root: str) -> dict[str, Any] | None:
    """The host's NVIDIA driver and the highest CUDA it supports, where no answer read the host."""
    from cgpu.node.driver_cuda import nvidia_driver
    from cgpu.node.host import HostFS

    return nvidia_driver(HostFS(root), names=())


def spec_dirs_read(spec_dirs: Sequence[str] | None, root: str, judging_dirs: Sequence[str] | None) -> list[str]:
    """The spec dirs the answer reads: those given, else what the judging engine reads (`judging_dirs`), else (no
    engine judges) the CDI defaults; under --root every node path is the root's, so both are read inside the root
    (the machine's own `/etc/cdi` is not the node's)."""
    if spec_dirs:
        return list(spec_dirs)
    named = judging_dirs if judging_dirs is not None else DEFAULT_SPEC_DIRS
    return [under_root(root, d) for d in named]


def under_root(root: str, path: str) -> str:
    if os.path.abspath(root) == os.path.abspath(os.sep):
        return path
    return os.path.join(os.path.abspath(root), path.lstrip("/"))


def _not_found(path: str) -> bool:
    """lstat says "not found"; any other failure the scan reports with its real error."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return False


def _verify(
    report: ReportBuilder,
    answers: list[DeviceAnswer],
    *,
    dirs: list[str],
    engine_dirs: list[str],
    engine: EngineOption,
    probe_image: str | None,
    timeout: float | None,
) -> dict[str, LiveCheck]:
    """The live check of each device a container can start with, by name (`--verify`)."""
    from cgpu.backends.cdi.verify import verify_devices

    own = [d for d in dirs if os.path.realpath(d) not in {os.path.realpath(e) for e in engine_dirs}]
    if own:
        report.problem(
            "info",
            "--verify",
            f"the engine reads its own spec dirs ({', '.join(engine_dirs)}), not {', '.join(own)}: a device "
            f"defined only there is unresolvable to it",
            "verify",
        )
    runnable = [a for a in answers if not a.blocked]
    checks = verify_devices(
        report,
        [a.name for a in runnable],
        {a.name: a.apis for a in runnable},
        engine=engine,
        probe_image=probe_image,
        timeout=timeout,
    )
    return {check.name: check for check in checks}
