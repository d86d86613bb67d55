"""The node answer: per API, the evidence of the first device that gives it, or why none does."""

from __future__ import annotations

from cgpu.backends.cdi.device import APIS, DeviceAnswer
from cgpu.backends.cdi.memory import Kept
from cgpu.backends.cdi.node_facts import report_node_facts
from cgpu.backends.cdi.problems import drivers_without_spec, name_list, stale_spec
from cgpu.backends.cdi.rules import PARTIAL, PROVIDED, UNKNOWN
from cgpu.cdi.model import ScanResult
from cgpu.node.host import HostFS
from cgpu.report import ReportBuilder


def _lead(answers: list[DeviceAnswer]) -> str:
    """The first device's name, with how many more share the finding: grammatical before 'gets'."""
    first = answers[0].name
    rest = len({id(a.same) for a in answers}) - 1  # distinct devices: a GPU's index and UUID are one
    return first if rest == 0 else f"{first} (and {rest} other device{'s' if rest > 1 else ''})"


def no_device_cause(scan: ScanResult, engine_label: str) -> str | None:
    """Why no device resolves when the spec dirs do hold something, read from the scan's problems'
    kinds (never their wording): two files defining one device, specs the engine rejects, a spec
    dir it skips or cannot read. None: nothing there at all (a spec is what is missing)."""
    sources: dict[str, list[str]] = {}
    for problem in scan.problems:
        if problem.severity in ("error", "warning"):
            sources.setdefault(problem.kind, [])
            if problem.source not in sources[problem.kind]:
                sources[problem.kind].append(problem.source)
    if "duplicate-device" in sources:
        return (
            f"two spec files define the same device ({name_list(sources['duplicate-device'], 2)}, see problems), "
            f"so {engine_label} drops it: remove one of the definitions"
        )
    if "spec-too-new" in sources:
        return (
            f"{engine_label} ignores {name_list(sources['spec-too-new'], 2)} (see problems), as its cdiVersion is "
            f"newer than {engine_label} accepts, and no other spec defines a device"
        )
    if "invalid-spec" in sources:
        return (
            f"{engine_label}'s CDI library rejects {name_list(sources['invalid-spec'], 2)} (see problems) and no "
            "other spec defines a device: fix or regenerate that file"
        )
    if "spec-dir" in sources:
        return (
            f"no spec {engine_label} reads defines a device, and it skips or cannot read "
            f"{name_list(sources['spec-dir'], 2)} (see problems): fix that spec dir"
        )
    return None


def node_evidence(
    report: ReportBuilder,
    answers: list[DeviceAnswer],
    scan: ScanResult,
    dirs: list[str],
    host: HostFS,
    ignored: list[str],
    engine_label: str,
    kept: Kept,
) -> None:
    runnable = [a for a in answers if not a.blocked]
    blocked = [a for a in answers if a.blocked]
    cause = no_device_cause(scan, engine_label)
    for api in APIS:
        providers = [a for a in runnable if a.findings[api].state == PROVIDED]
        if providers:
            finding = providers[0].findings[api]
            report.provide(api, f"{_lead(providers)} {finding.text}", image_needs=finding.needs)
            continue
        undecided = [a for a in runnable if a.findings[api].state == UNKNOWN]
        if undecided:
            report.unknown(api, f"unknown: {_lead(undecided)} {undecided[0].findings[api].text}")
            continue
        partial = [a for a in runnable if a.findings[api].state == PARTIAL]
        if partial:
            report.absent(api, f"partial: {_lead(partial)} {partial[0].findings[api].text}")
            continue
        stopped = [a for a in blocked if a.findings[api].state == PROVIDED]
        short = [a for a in blocked if a.findings[api].state == PARTIAL]
        if stopped or short:
            first = (stopped or short)[0]
            stale = stale_spec(stopped or short, host)
            cause = stale.cause() if stale else first.missing[0][1]
            if stopped:
                report.absent(
                    api,
                    f"not provided: {_lead(stopped)} would give {api} but no container with it can start, as {cause}",
                )
            else:
                report.absent(
                    api,
                    f"not provided: no container with {_lead(short)} can start, as {cause}, "
                    f"and it {first.findings[api].text}",
                )
            continue
        if answers:
            base = runnable or answers
            report.absent(api, f"not provided: {_lead(base)} {base[0].findings[api].text}")
        elif ignored:
            report.absent(
                api,
                f"not provided: {engine_label} ignores the spec that defines {name_list(ignored)}, as its "
                f"cdiVersion is newer than {engine_label} accepts",
            )
        elif scan.devices:
            report.absent(api, "not provided: none of the requested CDI devices resolves")
        elif scan.crashed:
            report.absent(
                api,
                f"not provided: the engine's CDI library crashes loading {', '.join(dirs)} (on "
                f"{name_list(scan.crashed, 2)}), so no CDI device resolves: fix or remove that file",
            )
        elif scan.unreached:
            report.absent(
                api,
                f"not provided: {engine_label}'s scan of the spec dirs ends at {scan.stopped_at} (see problems), "
                f"so it never reads the specs that define {name_list(list(scan.unreached))}",
            )
        elif cause is not None:
            report.absent(api, f"not provided: {cause}")
        else:
            found = drivers_without_spec(host)
            advice = f": the host has {found[0][0]} loaded, generate a spec with {found[0][1]}" if found else ""
            report.absent(api, f"not provided: no valid CDI spec defines a device in {', '.join(dirs)}{advice}")
    if scan.unreadable:  # what those files define is not known: no API is absent for sure
        for api in APIS:
            if report.state(api) != "provided":
                report.unknown(
                    api,
                    f"unknown: cgpu could not read {name_list(scan.unreadable, 2)} (see problems), which the engine "
                    f"may read and which may define devices that give {api}",
                )
    report_node_facts(report, answers, host, kept)
    if not answers and not ignored and not scan.devices and not scan.crashed and not scan.unreached and cause is None:
        for driver, command in drivers_without_spec(host):
            report.problem(
                "warning",
                ", ".join(dirs),
                f"the host has {driver} loaded but no CDI spec defines its devices, so a container asking for "
                f"one is refused: generate a spec with {command}",
                "no-spec",
            )
