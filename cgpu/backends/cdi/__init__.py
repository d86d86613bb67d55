"""The cdi backend (Linux): which GPU APIs a container started with a CDI device gets.

Reads the spec dirs as the engines' CDI library does (`cgpu.cdi`), builds each device's
container view (spec-level plus device edits), checks it against the host under `--root`
(missing paths block a device; versioned paths of another driver make a spec stale) and
applies the per-API rules of `cdi_rules`. The node answer is the union over the devices a
container can start with.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from cgpu.backends.cdi.host import HostFS, HostTrace
from cgpu.backends.cdi.rules import PARTIAL, PROVIDED, Finding, driver_mismatch, judge, mismatch_fix
from cgpu.backends.cdi.view import ContainerView, is_bind, node_fully_specified, risky_edits
from cgpu.cdi.model import ContainerEdits, ResolvedDevice, ScanResult, Spec
from cgpu.engine_option import EngineOption, host_engine_details
from cgpu.patterns import lazy
from cgpu.report import ReportBuilder

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

APIS = ("cuda", "rocm", "vulkan", "opencl", "directml")  # metal: the report's own evidence
_DRIVER_VERSION_IN_PATH = lazy(r"\.so\.(\d{3}\.\d+(?:\.\d+)?)$|/nvidia/(\d{3}\.\d+(?:\.\d+)?)/")
_HOST_DRIVER_ARG = lazy(r"--host-driver-version=(\d+\.\d+(?:\.\d+)?)")


class DeviceAnswer:
    # Plain classes, not dataclasses, in this backend: creating a dataclass costs about a
    # millisecond at import, a visible share of the CLI's start-up (design §9).
    __slots__ = ("device", "findings", "mismatch", "missing")

    def __init__(
        self,
        device: ResolvedDevice,
        findings: dict[str, Finding],
        missing: list[tuple[str, str]],
        mismatch: tuple[str, str, str] | None = None,
    ) -> None:
        self.device = device
        self.findings = findings
        self.mismatch = mismatch  # (user-space version, kernel module version, where it was read)
        self.missing = missing  # (host path, "the mount source /x (for /y) does not exist on the host")

    @property
    def name(self) -> str:
        return self.device.qualified_name

    @property
    def blocked(self) -> bool:
        return bool(self.missing)

    @property
    def apis(self) -> list[str]:
        if self.blocked:
            return []
        return [api for api in APIS if self.findings[api].state == PROVIDED]

    @property
    def status(self) -> str:
        if self.blocked:
            return "blocked"
        return "partial" if any(f.state == PARTIAL for f in self.findings.values()) else "ok"


def probe(
    report: ReportBuilder,
    *,
    spec_dirs: Sequence[str] | None = None,
    root: str | None = "/",
    engine: str | EngineOption | None = None,
    devices: Sequence[str] | None = None,
    verify: bool = False,
    probe_image: str | None = None,
    timeout: float | None = None,
) -> None:
    from cgpu.cdi.scan import DEFAULT_SPEC_DIRS

    for missing in [d for d in spec_dirs or () if _not_found(d)]:  # the defaults may well be absent
        report.problem("warning", missing, f"the spec dir {missing} does not exist: nothing was read from it")
    root = root or "/"
    if not os.path.isdir(root):
        report.usage_error("root", f"{root!r} is not a directory")
        return
    judge = _engine_rules(report, engine, timeout, root)
    if judge is None:
        return
    if spec_dirs:
        dirs = list(spec_dirs)
    elif judge.entry is not None:  # what the judging engine reads, inside the root under --root
        dirs = [_under(root, d) for d in judge.entry["spec_dirs"]]
    else:
        dirs = list(DEFAULT_SPEC_DIRS)
    answers = _answer(report, judge.entry, dirs, root, devices)
    for entry in judge.engines:
        if entry is not judge.entry:  # each other engine's answer, as data
            own = list(spec_dirs) if spec_dirs else [_under(root, d) for d in entry["spec_dirs"]]
            entry["containers"] = _answer(ReportBuilder("cdi"), entry, own, root, devices, quiet=True)[1]
    if judge.entry is not None:
        judge.entry["containers"] = [api for api in APIS if report.state(api) == "provided"]
    report.engines = [engine_entry(e) for e in judge.engines]
    if verify and answers[0] is not None:
        engine_dirs = judge.entry["spec_dirs"] if judge.entry is not None else list(DEFAULT_SPEC_DIRS)
        _verify(
            report,
            answers[0],
            dirs=dirs,
            engine_dirs=engine_dirs,
            engine=judge.option,
            probe_image=probe_image,
            timeout=timeout,
        )


def _cdi_off(report: ReportBuilder, entry: dict[str, Any], label: str | None, quiet: bool) -> tuple[None, list[str]]:
    """The engine has CDI switched off in its configuration: no CDI device, the setting named."""
    setting = entry.get("cdi_setting") or "its CDI setting"
    why = (
        f"{label or entry['name']} has CDI switched off, so it injects no CDI device and a container that asks "
        f"for one {'is refused' if entry['name'] == 'docker' else 'starts without it'}: set {setting}"
    )
    if not quiet:
        report.problem("error", entry.get("cdi_file") or entry["name"], why)
    for api in APIS:
        report.absent(api, f"not provided: {why}")
    return None, []


def _under(root: str, path: str) -> str:
    if os.path.abspath(root) == os.path.abspath(os.sep):
        return path
    return os.path.join(os.path.abspath(root), path.lstrip("/"))


def _answer(
    report: ReportBuilder,
    entry: dict[str, Any] | None,
    dirs: list[str],
    root: str,
    devices: Sequence[str] | None,
    *,
    quiet: bool = False,
) -> tuple[list[DeviceAnswer] | None, list[str]]:
    """The answer of one engine (`entry`; None: the newest rules) into `report`: its answers and the
    APIs its containers get."""
    from cgpu.cache import default_cache_dir_text
    from cgpu.cdi.scan import scan_spec_dirs

    label = None
    max_version = None
    if entry is not None and not entry.get("rules_unknown") and not _unlearned(entry):
        version = entry["version"]
        label = f"{entry['name']} {version}" if version else str(entry["name"])
        max_version = entry["max_cdi_version"]
    if entry is not None and entry.get("config_broken"):
        for api in APIS:
            report.unknown(
                api,
                f"unknown: {entry['name']} may not start with its configuration ({entry['config_broken']}), and "
                f"cgpu cannot tell what it would inject: fix that file",
            )
        return None, []
    if label is not None and max_version is None:
        why = f"{label} reads no CDI specs at all, so no container there gets a CDI device"
        if not quiet:
            report.problem("error", "--engine", why)
        scan = ScanResult(devices={}, specs=[], problems=[])
    elif entry is not None and entry["cdi_enabled"] is False:
        return _cdi_off(report, entry, label, quiet)
    else:
        scan = scan_spec_dirs(dirs, max_version=max_version, engine_label=label, cache_dir=default_cache_dir_text())
        if not quiet:
            _spec_dir_hints(report, dirs)
    host = HostFS(root)
    answers = answer_scan(report, scan, host, devices=devices, dirs=dirs, engine_label=label)
    if not quiet:
        for path, why in host.refused_files():
            report.problem("warning", host.display(path), f"this host file {why}; cgpu did not open it")
    return answers, [api for api in APIS if report.state(api) == "provided"]


_BACKUP_SUFFIXES = ("~", ".bak", ".orig", ".old", ".swp", ".tmp", ".rpmnew", ".rpmsave", ".dpkg-old", ".dpkg-dist")


def _spec_dir_hints(report: ReportBuilder, dirs: list[str]) -> None:
    """Info for a person: files in a spec dir that engines skip (`.yml`, backups, hidden files),
    and why a spec dir with no spec gives no device. The reader skips them silently, as engines do."""
    from cgpu.cdi.scan import SPEC_EXTENSIONS

    for folder in dirs:
        if os.path.islink(folder) or not os.path.isdir(folder):
            continue  # the reader already said why it skipped it
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        skipped = [n for n in names if not n.endswith(SPEC_EXTENSIONS) and not os.path.isdir(os.path.join(folder, n))]
        yml = [n for n in skipped if n.lower().endswith((".yml", ".yaml", ".json"))]
        backups = [n for n in skipped if n not in yml and n.endswith(_BACKUP_SUFFIXES)]
        hidden = [n for n in skipped if n not in yml and n not in backups and n.startswith(".")]
        other = [n for n in skipped if n not in yml and n not in backups and n not in hidden]
        for group, why in (
            (yml, "engines read only *.json and *.yaml (case-sensitive): rename to use them"),
            (backups, "backup or editor files: engines skip them, and so does cgpu"),
            (hidden, "hidden files that are not *.json or *.yaml: engines skip them, and so does cgpu"),
            (other, "not *.json or *.yaml: engines skip them, and so does cgpu"),
        ):
            if group:
                report.problem("info", folder, f"skipped {_names(group, 5)}: {why}")
        if not any(n.endswith(SPEC_EXTENSIONS) for n in names):
            report.problem(
                "info",
                folder,
                "this spec dir holds no *.json or *.yaml spec, so it defines no device: generate one with "
                "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (NVIDIA), `amd-ctk cdi generate` (AMD) "
                "or your vendor's CDI generator, or point --spec-dir at the dir that has them",
            )


def _not_found(path: str) -> bool:
    """lstat says "not found"; any other failure the scan reports with its real error."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return False


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
    for severity, source, message in scan.problems:
        report.problem(severity, source, message)  # type: ignore[arg-type]
    dropped = _engine_dropped(scan)
    selected = _select(report, scan, devices, list(dirs), {**scan.unreached, **dropped})
    if selected is None:
        return None
    answers = _answers(selected, host)
    _report_problems(report, answers, host)
    first_named: dict[int, str] = {}  # devices with the same edits in one spec share their findings
    for answer in answers:
        details: dict[str, Any] = {"status": answer.status, "spec": answer.device.spec.path}
        alias_of = first_named.setdefault(id(answer.findings), answer.name)
        if alias_of != answer.name:  # another name (index, UUID) for what a container gets with alias_of
            details["alias_of"] = alias_of
        details["checks"] = {api: f"{f.state}: {f.text}" for api, f in answer.findings.items()}
        if answer.blocked:
            details["missing"] = [path for path, _ in answer.missing]
        report.device(answer.name, answer.apis, **details)
    ignored = [name for name in (devices or dropped) if name in dropped]
    for name in dict.fromkeys(ignored):
        spec = dropped[name]
        report.device(
            name,
            [],
            status="blocked",
            spec=spec.path,
            reason=f"{engine_label or 'the engine'} ignores its spec: cdiVersion {spec.version} is above what "
            f"it accepts",
        )
    for name in dict.fromkeys(n for n in (devices or scan.unreached) if n in scan.unreached and n not in dropped):
        report.device(
            name,
            [],
            status="blocked",
            spec=scan.unreached[name].path,
            reason=f"{engine_label or 'the engine'} never reads its spec dir: the scan of the spec dirs ends at "
            f"{scan.stopped_at} (see problems)",
        )
    _evidence(report, answers, scan, list(dirs), host, ignored, engine_label or "the engine")
    return answers


def _engine_dropped(scan: ScanResult) -> dict[str, Spec]:
    """Devices only specs the engine ignores define (their cdiVersion is too new for it)."""
    dropped: dict[str, Spec] = {}
    for spec in scan.engine_dropped:
        for device in spec.devices:
            name = f"{spec.kind}={device.name}"
            if name not in scan.devices:
                dropped.setdefault(name, spec)
    return dropped


class _Remembered:
    __slots__ = ("answers", "devices", "trace")

    def __init__(self, devices: list[ResolvedDevice], trace: HostTrace, answers: list[DeviceAnswer]) -> None:
        self.devices = devices  # held, so the specs' ids stay theirs
        self.trace = trace
        self.answers = answers


# The last answers per root: reused when the reader hands back the same parsed specs (it caches
# them by path, size and mtime) and every host question gets the same answer again.
_REMEMBERED: dict[str, _Remembered] = {}


def _answers(selected: list[ResolvedDevice], host: HostFS) -> list[DeviceAnswer]:
    last = _REMEMBERED.get(host.root)
    if (
        last is not None
        and len(last.devices) == len(selected)
        and all(
            a.spec is b.spec and a.qualified_name == b.qualified_name
            for a, b in zip(last.devices, selected, strict=True)
        )
        and host.replay(last.trace)
    ):
        return last.answers
    bases: dict[int, tuple[ContainerView, list[tuple[str, str]]]] = {}
    same_edits: dict[Any, tuple[dict[str, Finding], list[tuple[str, str]], tuple[str, str, str] | None]] = {}
    answers = []
    for device in selected:
        spec = device.spec
        if id(spec) not in bases:
            bases[id(spec)] = (ContainerView.of(spec.edits, host), _missing(spec.edits, host))
        try:
            key: Any = (id(spec), device.device.edits)
            hash(key)
        except TypeError:  # edits holding dicts (intelRdt, netDevices): no sharing
            key = object()
        if key not in same_edits:
            base, base_missing = bases[id(spec)]
            own = device.device.edits
            view = base.with_device(own)
            missing = _missing(device.edits(), host) if own.mounts else base_missing + _missing(own, host)
            same_edits[key] = (judge(view, spec.kind), missing, driver_mismatch(view))
        findings, missing, mismatch = same_edits[key]
        answers.append(DeviceAnswer(device, findings, missing, mismatch))
    _REMEMBERED.clear()  # one root at a time: a long-running agent asks about one node
    _REMEMBERED[host.root] = _Remembered(list(selected), host.trace, answers)
    return answers


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


# --- engine rules and device selection ----------------------------------------------------------


_ENTRY_FIELDS = (
    "name",
    "version",
    "cdi_library",
    "max_cdi_version",
    "cdi_enabled",
    "spec_dirs",
    "learned_from",
    "sources",
    "judged",
    "containers",
    "nvidia_runtime",
)


class _Judge:
    """Who judges the specs: the parsed option, the judging engine's entry (None: the newest rules)
    and every engine's entry for the report."""

    __slots__ = ("engines", "entry", "option")

    def __init__(self, option: EngineOption, entry: dict[str, Any] | None, engines: list[dict[str, Any]]) -> None:
        self.option = option
        self.entry = entry
        self.engines = engines

    @property
    def label(self) -> str | None:
        if self.entry is None:
            return None
        version = self.entry["version"]
        return f"{self.entry['name']} {version}" if version else str(self.entry["name"])


def _engine_rules(
    report: ReportBuilder, engine: str | EngineOption | None, timeout: float | None, root: str
) -> _Judge | None:
    """Who judges the specs, with every engine found as data. None when the option is unusable
    (reported). Says in an info problem who judged and what decided."""
    from cgpu.engine_option import AUTO, ENGINE_NAMES, NONE, parse_engine

    try:
        option = parse_engine(engine)
    except ValueError as exc:
        report.usage_error("engine", str(exc))
        return None
    if option.mode == NONE:  # asked for: nothing to report
        return _Judge(option, None, [])
    on_host = os.path.abspath(root) == os.path.abspath(os.sep)
    engines: list[dict[str, Any]] = []
    kubelet: dict[str, str] | None = None
    failures: list[str] = []
    if not (on_host and option.version is not None):  # NAME@VERSION on the host runs and reads nothing
        engines, kubelet, failures = _installed(None if on_host else root, timeout or 10)
    if option.version is not None:
        entry = _named_entry(option, next((e for e in engines if e["name"] == option.name), None))
        engines = [entry, *(e for e in engines if e["name"] != option.name)]
        how = f"--engine {option}"
    else:
        found = [e for e in engines if option.name in (None, e["name"])]
        if not found:
            every = f"{', '.join(ENGINE_NAMES[:-1])} or {ENGINE_NAMES[-1]}"
            wanted = f"no {option.name}" if option.name else f"none of {every}"
            why = f" ({'; '.join(failures)})" if failures else ""
            where = "on this host" if on_host else f"under {root}"
            report.problem(  # an engine named and absent: the answer is not for the engine asked for
                "error" if option.name else "warning",
                f"--engine {option}",
                f"{wanted} {'answered' if on_host else 'is installed'} {where}{why}, so specs are judged by the "
                f"newest CDI rules; name the engine that will run the containers with --engine NAME@VERSION",
            )
            _report_engine_problems(report, engines)
            return _Judge(option, None, engines)
        entry, how = _default_judge(found, kubelet, option, on_host)
        missed = kubelet if kubelet is not None and option.name is None and kubelet["engine"] != entry["name"] else None
        if missed is not None:
            report.problem(
                "warning",
                missed["source"],
                f"the kubelet runs pods through {missed['endpoint']}, but cgpu found no "
                f"{missed['engine'] or 'engine behind that socket'} installed under {root}: {entry['name']} judged "
                f"instead; name the runtime with --engine NAME@VERSION",
            )
        if option.mode != AUTO:
            how = f"the {'host' if on_host else 'node'}'s engine, --engine {option}"
    entry["judged"] = True
    _report_engine_problems(report, engines)
    _nvidia_runtime_note(report, entry)
    judge = _Judge(option, entry, engines)
    if _unlearned(entry):
        report.problem(
            "warning",
            f"--engine {option}",
            f"{entry['name']} is installed ({', '.join(entry['sources']) or entry.get('binary')}) but cgpu could "
            f"not learn its version or CDI library from its files, so specs are judged by the newest CDI rules; "
            f"name it with --engine {entry['name']}@VERSION",
        )
        return judge
    _unknown_setting(report, entry)
    max_version = entry["max_cdi_version"]
    accepts = f"cdiVersion up to {max_version}" if max_version else "no CDI spec at all"
    library = f", its CDI library {entry['cdi_library']}" if entry["cdi_library"] else ""
    evidence = {
        "build-info": "the Go build info in its binary",
        "package": "its package's metadata",
        "version": "its version and the release table",
    }.get(entry["learned_from"])
    sources = f" ({', '.join(entry['sources'])})" if entry["sources"] else ""
    learned = f", learned from {evidence}{sources}" if evidence else ""
    report.problem("info", "--engine", f"{judge.label} judged the specs ({how}): it reads {accepts}{library}{learned}")
    return judge


def _unlearned(entry: dict[str, Any]) -> bool:
    """Installed, but neither its version nor its library could be learned: the newest rules judge."""
    return entry["version"] is None and entry["learned_from"] == "version"


def _installed(root: str | None, timeout: float) -> tuple[list[dict[str, Any]], dict[str, str] | None, list[str]]:
    """The engines installed (under `root`, or on this host with podman and Docker asked), the
    kubelet's runtime, and why an engine on the host did not answer."""
    from cgpu.engine_option import ENGINE_NAMES, learn_engines

    engines, node = learn_engines(root, timeout=timeout)  # fresh objects on every call: ours to change
    kubelet = node.get("kubelet_runtime") if root is not None else None
    failures: list[str] = []
    if root is None:
        engines, failures = _with_running(engines, timeout)
    order = {name: index for index, name in enumerate(ENGINE_NAMES)}
    engines.sort(key=lambda e: order.get(e["name"], len(order)))
    return engines, kubelet if isinstance(kubelet, dict) else None, failures


def _with_running(engines: list[dict[str, Any]], timeout: float) -> tuple[list[dict[str, Any]], list[str]]:
    """On the host, podman and Docker count as they answer (`podman version`, the Docker daemon's
    version), as before; their files add the exact library only where they name the same version."""
    from cgpu.cdi.versions import same_version
    from cgpu.installed import with_version

    answered, failures, details = host_engine_details(timeout=timeout)
    by_name = {e["name"]: e for e in engines}
    result = [e for e in engines if e["name"] not in ("podman", "docker")]
    for name, version in answered:
        installed = by_name.get(name)
        exact = installed is not None and installed["learned_from"] != "version"
        if installed is not None and exact and same_version(installed["version"], version):
            entry = installed
        else:
            entry = with_version(installed, name, version, "version")
        entry["sources"] = [*entry["sources"], f"{name} version"]
        dirs = details.get("docker_cdi_spec_dirs") if name == "docker" else None
        if dirs is not None:  # what the daemon itself says, wherever it runs
            entry["cdi_enabled"] = bool(dirs)
            entry["spec_dirs"] = dirs or entry["spec_dirs"]
            entry["cdi_setting"] = entry["cdi_setting"] or '"features": {"cdi": true} in the daemon\'s daemon.json'
            entry["sources"].append("docker info")
        result.append(entry)
    return result, failures


def _named_entry(option: EngineOption, installed: dict[str, Any] | None) -> dict[str, Any]:
    """The entry for --engine NAME@VERSION: the version given and the release rows; under --root the
    configuration of that engine as installed there, if it is."""
    from cgpu.installed import with_version

    entry = with_version(installed, str(option.name), str(option.version), "option")
    entry["sources"] = [f"--engine {option}"]
    return entry


def _default_judge(
    found: list[dict[str, Any]], kubelet: dict[str, str] | None, option: EngineOption, on_host: bool
) -> tuple[dict[str, Any], str]:
    """The kubelet's CRI runtime where a kubelet names one, else the first in ENGINE_NAMES order."""
    if kubelet is not None and option.name is None:
        for entry in found:
            if entry["name"] == kubelet["engine"]:
                return entry, f"the kubelet's runtime {kubelet['endpoint']} in {kubelet['source']}, --engine auto"
    where = "host" if on_host else "node"
    return found[0], f"the {where}'s engine, --engine {option}"


def _unknown_setting(report: ReportBuilder, entry: dict[str, Any]) -> None:
    """The judge's configuration was not read (another host, a daemon elsewhere) and its release has
    CDI off unless configured: the specs are judged as if it were on, and that is said."""
    from cgpu.cdi.versions import cdi_on_by_default

    if entry["cdi_enabled"] is not None or entry.get("config_broken") or entry["version"] is None:
        return
    if cdi_on_by_default(entry["name"], entry["version"]) is False:
        setting = "enable_cdi = true" if entry["name"] == "containerd" else '"features": {"cdi": true} in daemon.json'
        report.problem(
            "info",
            f"--engine {entry['name']}",
            f"{entry['name']} {entry['version']} has CDI off unless its configuration sets {setting}; cgpu did not "
            f"read that configuration, so the specs are judged as if it were on",
        )


def _nvidia_runtime_note(report: ReportBuilder, entry: dict[str, Any]) -> None:
    """NVIDIA's runtime is the judging engine's default runtime: containers that ask by environment get
    what its mode injects from the driver, not the spec files; said as a warning, the facts are data."""
    facts = entry.get("nvidia_runtime")
    if not facts:
        return
    mode = facts["mode"] or "unknown (see problems)"
    where = f" ({facts['mode_from']})" if facts["mode_from"] else " (no config.toml: its default)"
    report.problem(
        "warning",
        facts["configured_in"] or entry["name"],
        f"{entry['name']}'s default runtime is NVIDIA's ({facts['runtime']}), mode {mode}{where}: a container that "
        f"asks by NVIDIA_VISIBLE_DEVICES (NVIDIA's device plugin's default envvar strategy) gets what that mode "
        f"injects from the host's driver, not what these spec files define, limited by NVIDIA_DRIVER_CAPABILITIES "
        f"(default compute,utility: cuda and opencl, no vulkan, which needs graphics); this report judges "
        f"containers that ask for CDI devices",
    )


def _report_engine_problems(report: ReportBuilder, engines: list[dict[str, Any]]) -> None:
    seen = set()
    for entry in engines:
        for severity, source, message in entry.get("problems", ()):
            if (source, message) not in seen:
                seen.add((source, message))
                report.problem(severity, source, message)


def engine_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """An engine's entry as the report gives it (the interface fields only)."""
    return {key: entry[key] for key in _ENTRY_FIELDS}


def _select(
    report: ReportBuilder, scan: ScanResult, names: Sequence[str] | None, dirs: list[str], dropped: dict[str, Spec]
) -> list[ResolvedDevice] | None:
    if not names:
        return list(scan.devices.values())
    from cgpu.cdi.names import parse_qualified_name

    wanted = list(dict.fromkeys(names))
    for name in wanted:
        try:
            parse_qualified_name(name)
        except ValueError as exc:
            report.usage_error("devices", _bad_name(name, exc, scan))
            return None
    unknown = [name for name in wanted if name not in scan.devices and name not in dropped]
    if unknown:
        report.problem(
            "error",
            _names(unknown, 5),
            f"unresolvable CDI devices {_names(unknown, 5)}: no valid spec in {', '.join(dirs)} "
            f"defines them, so an engine refuses a container that requests them{_did_you_mean(unknown, scan)}",
        )
    return [scan.devices[name] for name in wanted if name in scan.devices]


def _bad_name(name: str, error: ValueError, scan: ScanResult) -> str:
    """Why `name` is not a qualified CDI name, in the words of what is missing, and the names it may mean."""
    from cgpu.cdi.names import class_error, parse_device, vendor_error

    qualifier, sep, device = name.partition("=")
    vendor, device_class, _ = parse_device(name)
    if not sep and "/" in name:
        why = f"the =NAME part is missing (e.g. {name}=0 or {name}=all)"
    elif not sep:
        why = "it is not qualified: give vendor/class=name"
    elif not device:
        why = "the name after = is empty"
    elif "/" not in qualifier:
        why = f"the vendor/ part is missing before {qualifier}"
    elif vendor and not vendor_error(vendor) and not class_error(device_class):  # the library's text says "class"
        why = f"the name {device!r} must start and end with a letter or digit and hold only those and _ - . :"
    else:
        why = str(error)
    near = [known for known in scan.devices if known.endswith(("/" + name, "=" + name)) or known.startswith(name + "=")]
    hint = f"; did you mean {_names(near)}?" if near else "; use vendor/class=name, e.g. nvidia.com/gpu=0"
    return f"{name!r} is not a CDI device name: {why}{hint}"


def _did_you_mean(unknown: list[str], scan: ScanResult) -> str:
    """Close names for the first few unknown ones (difflib is quadratic: a few, never 50,000)."""
    if not scan.devices:
        return ""
    import difflib

    known = list(scan.devices)
    hints = []
    for name in unknown[:3]:
        children = [k for k in known if k.startswith(name + ":")]  # a GPU's own MIG devices first
        close = [*children, *(c for c in difflib.get_close_matches(name, known, n=3, cutoff=0.6) if c not in children)]
        close = close[:3]
        if close:
            hints.append(f"{name}: did you mean {', '.join(close)}?")
    if hints:
        return "; " + "; ".join(hints)
    return f"; the names defined are {_names(known, 5)} (`cgpu probe --list-devices` lists them all)"


# --- problems: blocked devices, stale specs, risky edits -----------------------------------------


def _names(names: list[str], limit: int = 3) -> str:
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit} more"


def _spec_driver_version(spec: Spec, missing: list[tuple[str, str]]) -> str | None:
    """The NVIDIA driver version a spec was generated for, as its hooks or missing paths say."""
    for hook in spec.edits.hooks:
        for arg in hook.args:
            match = _HOST_DRIVER_ARG.fullmatch(arg)
            if match:
                return match.group(1)
    for path, _ in missing:
        match = _DRIVER_VERSION_IN_PATH.search(path)
        if match:
            return match.group(1) or match.group(2)
    return None


def _stale(answers: list[DeviceAnswer], host: HostFS) -> tuple[str, str, str, list[str]] | None:
    """(spec's driver, host's driver, file it was read from, versioned missing paths) when a spec is stale."""
    host_version, source = host.nvidia_driver_version()
    missing = [item for answer in answers for item in answer.missing]
    spec_version = _spec_driver_version(answers[0].device.spec, missing)
    if host_version is None or source is None or spec_version is None or spec_version == host_version:
        return None
    versioned = list(dict.fromkeys(p for p, _ in missing if spec_version in p))
    return (spec_version, host_version, source, versioned) if versioned else None


_RISKY: dict[int, tuple[ContainerEdits, list[str]]] = {}


def _risky(edits: ContainerEdits, used: dict[int, tuple[ContainerEdits, list[str]]]) -> list[str]:
    """`risky_edits`, remembered per parsed edits object (the reader reuses them while files are
    unchanged); `used` collects this probe's, which are all that is kept afterwards."""
    known = used.get(id(edits)) or _RISKY.get(id(edits))
    if known is None or known[0] is not edits:
        known = (edits, risky_edits(edits))
    used[id(edits)] = known
    return known[1]


def _report_problems(report: ReportBuilder, answers: list[DeviceAnswer], host: HostFS) -> None:
    by_spec: dict[str, list[DeviceAnswer]] = {}
    for answer in answers:
        by_spec.setdefault(answer.device.spec.path, []).append(answer)
    used: dict[int, tuple[ContainerEdits, list[str]]] = {}
    risky = {
        spec_path: [
            *_risky(group[0].device.spec.edits, used),
            *(m for a in group for m in _risky(a.device.device.edits, used)),
        ]
        for spec_path, group in by_spec.items()
    }
    _RISKY.clear()  # bounded by the specs read now, not by every spec seen since start-up
    _RISKY.update(used)
    for spec_path, group in by_spec.items():
        spec = group[0].device.spec
        seen: set[str] = set()
        for message in risky[spec_path]:
            if message not in seen:
                seen.add(message)
                report.problem("warning", spec_path, message)
        _report_mismatch(report, spec_path, [a for a in group if not a.blocked], host)
        blocked = [a for a in group if a.blocked]
        if not blocked:
            continue
        stale = _stale(blocked, host)
        if stale is not None:
            spec_version, host_version, source, versioned = stale
            report.problem(
                "error",
                spec_path,
                (
                    f"stale spec: it was generated for NVIDIA driver {spec_version} but the host runs {host_version} "
                    f"({host.display(source)}), so {len(versioned)} of its paths such as {versioned[0]} no longer "
                    f"exist and no container with {_names([a.name for a in blocked])} can start; regenerate it with "
                    f"`nvidia-ctk cdi generate --output={spec_path}` (or `systemctl restart "
                    f"nvidia-cdi-refresh.service` where the toolkit keeps /var/run/cdi/nvidia.yaml current)"
                ),
            )
            continue
        by_cause: dict[tuple[str, str], list[DeviceAnswer]] = {}
        for answer in blocked:
            by_cause.setdefault(answer.missing[0], []).append(answer)
        for (path, what), causing in by_cause.items():
            more = len({p for a in causing for p, _ in a.missing}) - 1
            extra = f" (and {more} more missing paths)" if more > 0 else ""
            unloaded = _driver_not_loaded(spec.kind, host) if path.startswith("/dev/") else None
            if unloaded:
                fix = f"{unloaded}; regenerating the spec does not help"
            elif what.endswith("not a device file on the host"):
                fix = "something replaced the node with another kind of file: reload the driver (or reboot)"
            else:
                fix = "the spec does not fit this host: regenerate it here"
            report.problem(
                "error",
                spec_path,
                f"{_names([a.name for a in causing])} cannot start: {what}{extra}, so the engine refuses the "
                f"container; {fix}",
            )


def _report_mismatch(report: ReportBuilder, spec_path: str, runnable: list[DeviceAnswer], host: HostFS) -> None:
    """The kernel module and the user-space files a device's container gets disagree: nothing works."""
    found = [a for a in runnable if a.mismatch is not None]
    if not found:
        return
    user, kernel, source = found[0].mismatch  # type: ignore[misc]
    report.problem(
        "error",
        spec_path,
        f"NVIDIA driver mismatch: a container with {_names([a.name for a in found])} gets the user-space driver "
        f"{user} but the host's kernel module is {kernel} ({host.display(source)}), so NVML fails with "
        f"'driver/library version mismatch' and CUDA with error 803; {mismatch_fix(user, kernel)}",
    )


# Which driver a host has loaded and the command that writes a spec for it.
_GENERATORS = (
    ("nvidia", "the NVIDIA driver", "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`"),
    (
        "wsl",
        "WSL's GPU paravirtualization (/dev/dxg) with NVIDIA's driver store",
        "`nvidia-ctk cdi generate --mode=wsl --output=/etc/cdi/nvidia.yaml`",
    ),
    ("amd", "the amdgpu driver", "`amd-ctk cdi generate --output=/etc/cdi/amd.json` (AMD Container Toolkit)"),
    (
        "intel",
        "an Intel GPU driver (i915 or xe)",
        "a spec like the one in Intel's device-plugin CDI guide (kind intel.com/gpu: card and render node)",
    ),
)


def _loaded_drivers(host: HostFS) -> set[str]:
    loaded = set()
    if host.nvidia_driver_version()[0] is not None or host.exists("/dev/nvidiactl"):
        loaded.add("nvidia")
    if host.exists("/dev/dxg") and any(n.startswith("nv") for n in host.listdir("/usr/lib/wsl/drivers")):
        loaded.add("wsl")  # an NVIDIA driver store under WSL: nvidia-ctk's WSL mode applies
    if host.exists("/sys/module/amdgpu") or host.exists("/dev/kfd"):
        loaded.add("amd")
    if host.exists("/sys/module/i915") or host.exists("/sys/module/xe"):
        loaded.add("intel")
    return loaded


def _drivers_without_spec(host: HostFS) -> list[tuple[str, str]]:
    loaded = _loaded_drivers(host)
    return [(driver, command) for key, driver, command in _GENERATORS if key in loaded]


def _driver_not_loaded(kind: str, host: HostFS) -> str | None:
    """Why a spec's device nodes are missing when it is the driver, not the spec: the fix."""
    vendor = kind.split("/", 1)[0]
    loaded = _loaded_drivers(host)
    if vendor == "nvidia.com" and not loaded & {"nvidia", "wsl"} and not host.exists("/dev/nvmap"):
        return (
            "the NVIDIA kernel driver is not loaded (no /proc/driver/nvidia/version): load it (`modprobe nvidia`) "
            "or install it"
        )
    if vendor == "amd.com" and "amd" not in loaded:
        return "the amdgpu kernel driver is not loaded (no /sys/module/amdgpu): load it (`modprobe amdgpu`)"
    return None


# --- the node answer ------------------------------------------------------------------------------


def _lead(answers: list[DeviceAnswer]) -> str:
    """The first device's name, with how many more share the finding: grammatical before 'gets'."""
    first = answers[0].name
    rest = len({id(a.findings) for a in answers}) - 1  # distinct devices: a GPU's index and UUID are one
    return first if rest == 0 else f"{first} (and {rest} other device{'s' if rest > 1 else ''})"


def _evidence(
    report: ReportBuilder,
    answers: list[DeviceAnswer],
    scan: ScanResult,
    dirs: list[str],
    host: HostFS,
    ignored: list[str],
    engine_label: str,
) -> None:
    runnable = [a for a in answers if not a.blocked]
    blocked = [a for a in answers if a.blocked]
    for api in APIS:
        providers = [a for a in runnable if a.findings[api].state == PROVIDED]
        if providers:
            finding = providers[0].findings[api]
            report.provide(api, f"{_lead(providers)} {finding.text}", image_needs=finding.needs)
            continue
        partial = [a for a in runnable if a.findings[api].state == PARTIAL]
        if partial:
            report.absent(api, f"partial: {_lead(partial)} {partial[0].findings[api].text}")
            continue
        stopped = [a for a in blocked if a.findings[api].state == PROVIDED]
        short = [a for a in blocked if a.findings[api].state == PARTIAL]
        if stopped or short:
            first = (stopped or short)[0]
            stale = _stale(stopped or short, host)
            cause = (
                f"its spec is stale (written for NVIDIA driver {stale[0]}, the host runs {stale[1]}): "
                f"regenerate it with `nvidia-ctk cdi generate`"
                if stale
                else first.missing[0][1]
            )
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
                f"not provided: {engine_label} ignores the spec that defines {_names(ignored)}, as its "
                f"cdiVersion is newer than {engine_label} accepts",
            )
        elif scan.devices:
            report.absent(api, "not provided: none of the requested CDI devices resolves")
        elif scan.crashed:
            report.absent(
                api,
                f"not provided: the engine's CDI library crashes loading {', '.join(dirs)} (on "
                f"{_names(scan.crashed, 2)}), so no CDI device resolves: fix or remove that file",
            )
        elif scan.unreached:
            report.absent(
                api,
                f"not provided: {engine_label}'s scan of the spec dirs ends at {scan.stopped_at} (see problems), "
                f"so it never reads the specs that define {_names(list(scan.unreached))}",
            )
        else:
            found = _drivers_without_spec(host)
            advice = f": the host has {found[0][0]} loaded, generate a spec with {found[0][1]}" if found else ""
            report.absent(api, f"not provided: no valid CDI spec defines a device in {', '.join(dirs)}{advice}")
    if scan.unreadable:  # what those files define is not known: no API is absent for sure
        for api in APIS:
            if report.state(api) != "provided":
                report.unknown(
                    api,
                    f"unknown: cgpu could not read {_names(scan.unreadable, 2)} (see problems), which the engine "
                    f"may read and which may define devices that give {api}",
                )
    if not answers and not ignored and not scan.devices and not scan.crashed and not scan.unreached:
        for driver, command in _drivers_without_spec(host):
            report.problem(
                "warning",
                ", ".join(dirs),
                f"the host has {driver} loaded but no CDI spec defines its devices, so a container asking for "
                f"one is refused: generate a spec with {command}",
            )


def _verify(
    report: ReportBuilder,
    answers: list[DeviceAnswer],
    *,
    dirs: list[str],
    engine_dirs: list[str],
    engine: EngineOption,
    probe_image: str | None,
    timeout: float | None,
) -> None:
    from cgpu.backends.cdi.verify import verify_devices

    own = [d for d in dirs if os.path.realpath(d) not in {os.path.realpath(e) for e in engine_dirs}]
    if own:
        report.problem(
            "info",
            "--verify",
            f"the engine reads its own spec dirs ({', '.join(engine_dirs)}), not {', '.join(own)}: a device "
            f"defined only there is unresolvable to it",
        )
    runnable = [a for a in answers if not a.blocked]
    verify_devices(
        report,
        [a.name for a in runnable],
        {a.name: a.apis for a in runnable},
        engine=engine,
        probe_image=probe_image,
        timeout=timeout,
    )
