"""Which engine judges the specs, with every engine found as data: its version, CDI library and
settings, the kubelet's runtime, and the info problem that says who judged and why."""

from __future__ import annotations

import os

from cgpu.engines.option import EngineOption, host_engine_details
from cgpu.report import ReportBuilder

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

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


def engine_rules(
    report: ReportBuilder, engine: str | EngineOption | None, timeout: float | None, root: str
) -> _Judge | None:
    """Who judges the specs, with every engine found as data. None when the option is unusable
    (reported). Says in an info problem who judged and what decided."""
    from cgpu.engines.option import AUTO, ENGINE_NAMES, NONE, parse_engine

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
    if unlearned(entry):
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


def unlearned(entry: dict[str, Any]) -> bool:
    """Installed, but neither its version nor its library could be learned: the newest rules judge."""
    return entry["version"] is None and entry["learned_from"] == "version"


def _installed(root: str | None, timeout: float) -> tuple[list[dict[str, Any]], dict[str, str] | None, list[str]]:
    """The engines installed (under `root`, or on this host with podman and Docker asked), the
    kubelet's runtime, and why an engine on the host did not answer."""
    from cgpu.engines.option import ENGINE_NAMES, learn_engines

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
    from cgpu.engines.installed import with_version

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
    from cgpu.engines.installed import with_version

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
        for problem in entry.get("problems", ()):
            if (problem.source, problem.message) not in seen:
                seen.add((problem.source, problem.message))
                report.add(problem)


def engine_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """An engine's entry as the report gives it (the interface fields only)."""
    return {key: entry[key] for key in _ENTRY_FIELDS}
