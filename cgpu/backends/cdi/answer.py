"""The answer path: a scan of the spec dirs into one answer per device and the node's answer, each
device's container view checked against the host and judged by the per-API rules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cgpu.backends.cdi.device import APIS, DeviceAnswer
from cgpu.backends.cdi.evidence import node_evidence
from cgpu.backends.cdi.memory import Kept, Memory, fresh
from cgpu.backends.cdi.problems import report_problems, spec_dir_hints
from cgpu.backends.cdi.rules import Finding, driver_mismatch, judge
from cgpu.backends.cdi.selection import select_devices
from cgpu.backends.cdi.view import ContainerView, is_bind, node_fully_specified, risky_edits
from cgpu.cdi.model import ContainerEdits, ResolvedDevice, ScanResult, Spec
from cgpu.node.host import HostFS
from cgpu.report import ReportBuilder

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

    from cgpu.backends.cdi.verify import LiveCheck
    from cgpu.cdi.scan import SpecReader
    from cgpu.engines.installed import InstalledEngine


def _cdi_off(report: ReportBuilder, entry: InstalledEngine, label: str | None, quiet: bool) -> tuple[None, list[str]]:
    """The engine has CDI switched off in its configuration: no CDI device, the setting named."""
    setting = entry.cdi_setting or "its CDI setting"
    why = (
        f"{label or entry.name} has CDI switched off, so it injects no CDI device and a container that asks "
        f"for one {'is refused' if entry.engine.refuses_when_off else 'starts without it'}: set {setting}"
    )
    if not quiet:
        report.problem("error", entry.cdi_file or entry.name, why, "cdi-off")
    for api in APIS:
        report.absent(api, f"not provided: {why}")
    return None, []


def engine_answer(
    report: ReportBuilder,
    entry: InstalledEngine | None,
    dirs: list[str],
    root: str,
    devices: Sequence[str] | None,
    *,
    quiet: bool = False,
    memory: Memory | None = None,
) -> tuple[DeviceEntries | None, list[str]]:
    """The answer of one engine (`entry`; None: the newest rules) into `report`: its device entries,
    for the caller to put in the report, and the APIs its containers get. `memory`: what is kept
    from the last probe (None: nothing)."""
    from cgpu.cdi.scan import scan_spec_dirs
    from cgpu.cdi.versions import LIBRARY
    from cgpu.node.driver_cuda import nvidia_driver
    from cgpu.node.files import default_cache_dir_text

    label = None
    max_version = None
    library = LIBRARY
    if entry is not None and not entry.rules_unknown and not entry.unlearned:
        label = entry.label
        max_version = entry.max_cdi_version
        library = entry.library_rules  # the reading of the CDI library it links (v1.1.1's from containerd 2.4)
    if entry is not None and entry.config_broken:
        for api in APIS:
            report.unknown(
                api,
                f"unknown: {entry.name} may not start with its configuration ({entry.config_broken}), and "
                f"cgpu cannot tell what it would inject: fix that file",
            )
        return None, []
    if label is not None and max_version is None:
        without = entry.engine.without_cdi if entry is not None else "reads no CDI specs at all"
        why = f"{label} {without}, so no container there gets a CDI device"
        if not quiet:
            report.problem("error", "--engine", why, "cdi-off")
        for api in APIS:  # the cause, not "generate a spec": a spec would change nothing
            report.absent(api, f"not provided: {why}")
        return None, []
    elif entry is not None and entry.cdi_enabled is False:
        return _cdi_off(report, entry, label, quiet)
    else:
        scan = scan_spec_dirs(
            dirs,
            max_version=max_version,
            engine_label=label,
            cache_dir=default_cache_dir_text(),
            library=library,
            root=root,
            reader=memory.reader if memory is not None else None,
        )
        if not quiet:
            spec_dir_hints(report, dirs, root)
    host = HostFS(root)
    answers = _scan_answers(report, scan, host, devices=devices, dirs=dirs, engine_label=label, memory=memory)
    if not quiet and answers is not None and entry is not None:  # the judging engine's cgroup driver
        from cgpu.backends.cdi.dev_char import report_dev_char

        report_dev_char(report, answers.answers, host, entry.name)
    if answers is not None:  # who may open the nodes, and SELinux (docs/cdi.md "Who may open the nodes")
        from cgpu.backends.cdi.access import report_access

        report_access(report, answers.answers, host, entry, quiet=quiet, kept=answers.kept)
        if not quiet:  # what each request style gives (docs/cdi.md "Request styles")
            from cgpu.backends.cdi.request_paths import request_paths

            report.request_paths = request_paths(report, answers.answers, host, entry)
            from cgpu.backends.cdi.pod_names import pod_names

            found = answers.answers
            report.pod_names = fresh(answers.kept.get("pod_names", (), lambda: pod_names(found)))
    if not quiet:  # the driver's CUDA, from the same host view: its reads join the remembered trace
        if answers is None:
            report.nvidia_driver = nvidia_driver(host, names=())
        else:
            names = [answer.name for answer in answers.answers]
            report.nvidia_driver = fresh(
                answers.kept.get("nvidia_driver", (), lambda: nvidia_driver(host, names=names))
            )
        for path, why in host.refused_files():
            report.problem(
                "warning", host.display(path), f"this host file {why}; cgpu did not open it", "unreadable-file"
            )
    return answers, [api for api in APIS if report.state(api) == "provided"]


def answer_scan(
    report: ReportBuilder,
    scan: ScanResult,
    host: HostFS,
    *,
    devices: Sequence[str] | None = None,
    dirs: Sequence[str] = (),
    engine_label: str | None = None,
) -> list[DeviceAnswer] | None:
    """Fill the report from a scan: problems, one entry per device, the node answer with evidence."""
    entries = _scan_answers(report, scan, host, devices=devices, dirs=dirs, engine_label=engine_label)
    if entries is None:
        return None
    entries.put(report)
    return entries.answers


class DeviceEntries:
    """One answer's device entries, put in the report once `--verify` (if asked) has checked the
    devices: what each device gives, then the devices the engine ignores or never reaches."""

    __slots__ = ("answers", "engine_label", "ignored", "kept", "scan", "unreached")

    def __init__(
        self,
        answers: list[DeviceAnswer],
        scan: ScanResult,
        ignored: dict[str, Spec],
        unreached: list[str],
        label: str,
        kept: Kept,
    ) -> None:
        self.answers = answers
        self.kept = kept  # what the last probe worked out from these same answers, or a new Kept
        self.scan = scan
        self.ignored = ignored  # devices only specs the engine ignores define (their cdiVersion is too new)
        self.unreached = unreached  # in a spec dir after the one where the engine's scan stops
        self.engine_label = label

    def put(self, report: ReportBuilder, live: Mapping[str, LiveCheck] | None = None) -> None:
        """One entry per device into `report`, with `live`'s answer (`--verify`) beside the static one."""
        first_named: dict[int, str] = {}  # devices with the same edits in one spec: one device, two names
        checks: dict[tuple[int, ...], dict[str, str]] = {}
        # a device that can start, by its findings dict (shared by devices with equal findings): status, APIs
        shown: dict[int, tuple[str, list[str], dict[str, str]]] = {}
        for answer in self.answers:
            apis: list[str]
            if answer.missing:
                status, apis, found = "blocked", [], _checks(answer.findings, checks)
            else:
                known = shown.get(id(answer.findings))
                if known is None:
                    known = shown[id(answer.findings)] = (answer.status, answer.apis, _checks(answer.findings, checks))
                status, apis, found = known
            details: dict[str, Any] = {"status": status, "spec": answer.device.spec.path}
            alias_of = first_named.setdefault(id(answer.same), answer.name)
            if alias_of != answer.name:  # another name (index, UUID) for what a container gets with alias_of
                details["alias_of"] = alias_of
            details["checks"] = found
            if answer.missing:
                details["missing"] = [path for path, _ in answer.missing]
            check = live.get(answer.name) if live else None
            if check is not None:
                details.update(check.entry_fields())
            report.device(answer.name, apis, **details)
        for name, spec in self.ignored.items():
            report.device(
                name,
                [],
                status="blocked",
                spec=spec.path,
                reason=f"{self.engine_label} ignores its spec: cdiVersion {spec.version} is above what it accepts",
            )
        for name in self.unreached:
            report.device(
                name,
                [],
                status="blocked",
                spec=self.scan.unreached[name].path,
                reason=f"{self.engine_label} never reads its spec dir: the scan of the spec dirs ends at "
                f"{self.scan.stopped_at} (see problems)",
            )


def _scan_answers(
    report: ReportBuilder,
    scan: ScanResult,
    host: HostFS,
    *,
    devices: Sequence[str] | None = None,
    dirs: Sequence[str] = (),
    engine_label: str | None = None,
    memory: Memory | None = None,
) -> DeviceEntries | None:
    """The problems and the node answer with evidence into `report`; the device entries to put there."""
    report.add(*scan.problems)
    dropped = _engine_dropped(scan)
    selected = select_devices(report, scan, devices, list(dirs), {**scan.unreached, **dropped})
    if selected is None:
        return None
    answers, kept = _answers(selected, host, memory)
    report_problems(report, answers, host, memory.reader if memory is not None else None)
    ignored = [name for name in (devices or dropped) if name in dropped]
    unreached = [n for n in (devices or scan.unreached) if n in scan.unreached and n not in dropped]
    label = engine_label or "the engine"
    node_evidence(report, answers, scan, list(dirs), host, ignored, label, kept)
    return DeviceEntries(answers, scan, {n: dropped[n] for n in ignored}, list(dict.fromkeys(unreached)), label, kept)


def _checks(findings: dict[str, Finding], known: dict[tuple[int, ...], dict[str, str]]) -> dict[str, str]:
    """A device's `checks`: one dict (and its texts) for every device with the same findings, so
    that 20,000 claim devices of one kind hold one copy, not 20,000 (the report is not mutated)."""
    key = tuple(map(id, findings.values()))
    found = known.get(key)
    if found is None:
        found = known[key] = {api: f"{f.state}: {f.text}" for api, f in findings.items()}
    return found


def _engine_dropped(scan: ScanResult) -> dict[str, Spec]:
    """Devices only specs the engine ignores define (their cdiVersion is too new for it)."""
    dropped: dict[str, Spec] = {}
    for spec in scan.engine_dropped:
        for device in spec.devices:
            name = f"{spec.kind}={device.name}"
            if name not in scan.devices:
                dropped.setdefault(name, spec)
    return dropped


# findings, missing paths, driver mismatch and the device's own risky edits: one tuple for every
# device that gives the same (20,000 claim devices of one kind share one)
_Result = tuple[dict[str, Finding], list[tuple[str, str]], tuple[str, str, str] | None, Sequence[str]]
# What the devices of one spec give: for a spec of one device its _Result; else a list in the
# spec's device order of each one's _Result, or the index of the earlier device with the same
# edits (a GPU's index and UUID names: one device, whose result it shares), or None (not judged).
_SpecResults = _Result | list[_Result | int | None]


_NOTHING_MISSING: list[tuple[str, str]] = []  # shared by every device that can start; never mutated
ANSWERS = "answers"  # what the reader keeps per spec file: (generation, _SpecResults)


def _answers(selected: list[ResolvedDevice], host: HostFS, memory: Memory | None) -> tuple[list[DeviceAnswer], Kept]:
    """Each device's answer, and what the last probe worked out from the same answers. With `memory`,
    the last answers per spec file are reused while every host question of the last probe gets the
    same answer again: only the devices of new or changed files are judged (one claim spec among
    20,000 costs one judgement, not 20,000)."""
    if memory is None or not memory.begin():  # another thread's probe is using it: judge every device
        return _judged(selected, host, None, None), Kept()
    try:
        generation = memory.generation(host)
        answers = _judged(selected, host, memory.reader, generation)
        memory.keep(host)
        kept = memory.kept(answers, generation)
    finally:
        memory.end()
    return answers, kept


def _judged(
    selected: list[ResolvedDevice], host: HostFS, reader: SpecReader | None, generation: object
) -> list[DeviceAnswer]:
    """Each device's answer: what `reader` remembers of its spec's file where that was judged in
    this `generation` (the last probe's, every host question answered the same again), else
    judged; each spec's remembered there. A device with the same edits as an earlier one of its
    spec (a GPU's index and UUID names: one device) shares that device's result, and is kept as
    its index (so that a probe over unchanged files compares no edits)."""
    bases: dict[int, tuple[ContainerView, list[tuple[str, str]]]] = {}
    same_edits: dict[Any, int] = {}  # equal edits of one spec: the first device's index
    shared: dict[tuple[str, str, tuple[str, ...]], Finding] = {}  # equal findings of any spec: one object
    equal_findings: dict[tuple[int, ...], dict[str, Finding]] = {}  # ... and one dict of them
    equal_results: dict[tuple[Any, ...], _Result] = {}  # ... and one result tuple
    seeded = False

    def seed(reader: SpecReader) -> None:  # the last probe's, so that a new judgement equal to one shares it
        done: set[int] = set()
        for kept_in, value in reader.recalled(ANSWERS):
            if kept_in is not generation:
                continue
            for result in value if type(value) is list else (value,):
                if type(result) is tuple and id(result) not in done:
                    done.add(id(result))
                    findings = result[0]
                    for finding in findings.values():
                        shared.setdefault((finding.state, finding.text, finding.needs), finding)
                    equal_findings.setdefault(tuple(map(id, findings.values())), findings)
                    equal_results.setdefault(_result_key(result), result)

    by_spec: dict[int, tuple[Spec, list[Any], Any]] = {}  # this probe's results of each spec's devices, and the kept
    positions: dict[int, dict[int, int]] = {}  # a spec of several devices: each one's index
    answers = []
    for device in selected:
        spec = device.spec
        entry = by_spec.get(id(spec))
        if entry is None:
            kept = reader.recall(spec, ANSWERS) if reader is not None else None
            found = kept[1] if kept is not None and kept[0] is generation else None
            count = len(spec.devices)
            if count == 1 and type(found) is tuple:
                values: list[Any] = [found]
            elif count > 1 and type(found) is list and len(found) == count and None not in found:
                values = found  # never changed: every device has its result
            else:
                values = [None] * count
            entry = by_spec[id(spec)] = (spec, values, found)
        values = entry[1]
        if len(values) == 1:
            index = 0
        else:
            where = positions.get(id(spec))
            if where is None:
                where = positions[id(spec)] = {id(d): i for i, d in enumerate(spec.devices)}
            index = where[id(device.device)]
        same = index
        result = values[index]
        if type(result) is int:
            same, result = result, values[result]
        if result is None:
            own = device.device.edits
            try:
                key: Any = (id(spec), own)
                hash(key)
            except TypeError:  # edits holding dicts (intelRdt, netDevices): no sharing
                key = object()
            first = same_edits.get(key)
            if first is not None:
                same, result = first, values[first]
                values[index] = first
            else:
                if not seeded and reader is not None:
                    seed(reader)
                    seeded = True
                if id(spec) not in bases:
                    bases[id(spec)] = (ContainerView.of(spec.edits, host), _missing(spec.edits, host))
                base, base_missing = bases[id(spec)]
                view = base.with_device(own)
                missing = _missing(device.edits(), host) if own.mounts else base_missing + _missing(own, host)
                judged = {
                    api: shared.setdefault((finding.state, finding.text, finding.needs), finding)
                    for api, finding in judge(view, spec.kind).items()
                }
                findings = equal_findings.setdefault(tuple(map(id, judged.values())), judged)
                risky: Sequence[str] = risky_edits(own) or ()
                result = (findings, missing or _NOTHING_MISSING, driver_mismatch(view), risky)
                result = values[index] = equal_results.setdefault(_result_key(result), result)
                same_edits[key] = index
        findings, missing, mismatch, risky = result
        answers.append(DeviceAnswer(device, findings, missing, mismatch, same=spec.devices[same], risky=risky))
    if reader is not None:
        for spec, values, found in by_spec.values():
            value = values[0] if len(values) == 1 else values
            if value is not found:  # judged now (a file unchanged since the last probe keeps what it has)
                reader.remember(spec, ANSWERS, (generation, value))
    return answers


def _result_key(result: _Result) -> tuple[Any, ...]:
    findings, missing, mismatch, risky = result
    return id(findings), id(missing), mismatch, id(risky)


def _missing(edits: ContainerEdits, host: HostFS) -> list[tuple[str, str]]:
    """The host paths an engine needs for these edits that do not exist: the container cannot start."""
    missing: list[tuple[str, str]] = []
    for mount in edits.mounts:
        if is_bind(mount) and not host.exists(mount.host_path):
            target = "" if mount.container_path == mount.host_path else f" (for {mount.container_path})"
            missing.append(
                (mount.host_path, f"the mount source {host.display(mount.host_path)}{target} {_NOT_ON_HOST}")
            )
    for node in edits.device_nodes:
        path = node.host_path or node.path
        if node_fully_specified(node):
            continue  # the engine creates it from type, major and minor
        if not host.exists(path):
            missing.append((path, f"the device node {host.display(path)} {_NOT_ON_HOST}"))
        elif host.real_root and not host.is_device_node(path):
            # The CDI library stats the node for its type and numbers and refuses anything else ("not a
            # device node"). Under --root the trees hold stand-in files: only existence is checked there.
            missing.append((path, f"the device node {path} is not a device file on the host"))
    for hook in edits.hooks:
        if not host.exists(hook.path):
            missing.append((hook.path, f"the {hook.hook_name} hook binary {host.display(hook.path)} {_NOT_ON_HOST}"))
    return missing


_NOT_ON_HOST = "does not exist on the host"
