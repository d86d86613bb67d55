"""Which engine judges the specs, with every engine found as data: its version, CDI library and
settings, the kubelet's runtime, and the info problem that says who judged and why."""

from __future__ import annotations

import os

from cgpu.engines.option import EngineOption, host_engine_details
from cgpu.report import ReportBuilder

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    from cgpu.engines.installed import InstalledEngine
    from cgpu.problem import Severity


class Judge:
    """Who judges the specs: the parsed option, the judging engine (None: the newest rules) and every
    engine found, for the report. `unknown`: why no engine can judge, so that every API is unknown (the
    engine named, by --engine or by the kubelet, is not there to be read or asked)."""

    __slots__ = ("engines", "entry", "option", "unknown")

    def __init__(
        self,
        option: EngineOption,
        entry: InstalledEngine | None,
        engines: list[InstalledEngine],
        unknown: str | None = None,
    ) -> None:
        self.option = option
        self.entry = entry
        self.engines = engines
        self.unknown = unknown

    @property
    def label(self) -> str | None:
        return self.entry.label if self.entry is not None else None

    def report_entries(self, containers: Mapping[int, Iterable[str]]) -> list[dict[str, Any]]:
        """Every engine's report entry; `containers`: what each one's containers get, by its place in `engines`."""
        return [
            engine.report_entry(judged=engine is self.entry, containers=containers.get(index, ()))
            for index, engine in enumerate(self.engines)
        ]


def engine_rules(
    report: ReportBuilder, engine: str | EngineOption | None, timeout: float | None, root: str
) -> Judge | None:
    """Who judges the specs, with every engine found as data. None when the option is unusable
    (reported). Says in an info problem who judged and what decided."""
    from cgpu.engines.option import AUTO, NONE, parse_engine
    from cgpu.engines.registry import REGISTRY

    try:
        option = parse_engine(engine)
    except ValueError as exc:
        report.usage_error("engine", str(exc))
        return None
    if option.mode == NONE:  # asked for: nothing to report
        return Judge(option, None, [])
    on_host = os.path.abspath(root) == os.path.abspath(os.sep)
    engines: list[InstalledEngine] = []
    kubelet: dict[str, str] | None = None
    failures: list[str] = []
    if not (on_host and option.version is not None):  # NAME@VERSION on the host runs and reads nothing
        engines, kubelet, failures = _installed(None if on_host else root, timeout or 10)
    if option.version is not None:
        entry = _named_entry(option, next((e for e in engines if e.name == option.name), None))
        engines = [entry, *(e for e in engines if e.name != option.name)]
        how = f"--engine {option}"
    else:
        found = [e for e in engines if option.name in (None, e.name)]
        why = f" ({'; '.join(failures)})" if failures else ""
        where = "on this host" if on_host else f"under {root}"
        if option.name is not None and not found:  # named and absent: not the newest rules' yes, unknown
            cannot = (
                f"no {option.name} {'answered' if on_host else 'is installed'} {where}{why}, so cgpu cannot tell "
                f"what its containers get; name its release with --engine {option.name}@VERSION"
            )
            return _cannot_tell(report, option, engines, "error", f"--engine {option}", cannot)
        if not found and kubelet is not None and option.name is None:  # a kubelet, and no engine behind it
            cannot = (
                f"the kubelet runs pods through {kubelet['endpoint']} ({kubelet['source']}), but cgpu found "
                f"none of {REGISTRY.spoken()} installed {where}, so it cannot tell what the pods' containers get; "
                f"name the runtime with --engine NAME@VERSION"
            )
            return _cannot_tell(report, option, engines, "error", kubelet["source"], cannot)
        if not found:
            report.problem(
                "warning",
                f"--engine {option}",
                f"none of {REGISTRY.spoken()} {'answered' if on_host else 'is installed'} {where}{why}, so specs "
                f"are judged by the newest CDI rules; name the engine that will run the containers with --engine "
                f"NAME@VERSION",
                "engine",
            )
            _report_engine_problems(report, engines)
            return Judge(option, None, engines)
        if kubelet is not None and option.name is None and not any(e.name == kubelet["engine"] for e in found):
            cannot = (
                f"the kubelet runs pods through {kubelet['endpoint']} ({kubelet['source']}), but cgpu found no "
                f"{kubelet['engine'] or 'engine it knows behind that socket'} installed {where}, so it cannot tell "
                f"what the pods' containers get; name the runtime with --engine NAME@VERSION"
            )
            return _cannot_tell(report, option, engines, "error", kubelet["source"], cannot)
        entry, how = _default_judge(found, kubelet, option, on_host)
        if option.mode != AUTO:
            how = f"the {'host' if on_host else 'node'}'s engine, --engine {option}"
        if entry.unrecognised is not None:  # never the newest rules' yes for a layout cgpu cannot read
            cannot = (
                f"{entry.unrecognised}, so cgpu cannot tell what the pods' containers get; name the runtime "
                f"with --engine {entry.name}@VERSION"
            )
            return _cannot_tell(report, option, engines, "warning", entry.binary or entry.name, cannot)
    _report_engine_problems(report, engines)
    _nvidia_runtime_note(report, entry)
    judge = Judge(option, entry, engines)
    if entry.unlearned:
        report.problem(
            "warning",
            f"--engine {option}",
            f"{entry.name} is installed ({', '.join(entry.sources) or entry.binary}) but cgpu could "
            f"not learn its version or CDI library from its files, so specs are judged by the newest CDI rules; "
            f"name it with --engine {entry.name}@VERSION",
            "engine",
        )
        return judge
    _unknown_setting(report, entry)
    max_version = entry.max_cdi_version
    accepts = f"cdiVersion up to {max_version}" if max_version else "no CDI spec at all"
    library = f", its CDI library {entry.cdi_library}" if entry.cdi_library else ""
    evidence = {
        "build-info": "the Go build info in its binary",
        "package": "its package's metadata",
        "version": "its version and the release table",
    }.get(entry.learned_from)
    sources = f" ({', '.join(entry.sources)})" if entry.sources else ""
    learned = f", learned from {evidence}{sources}" if evidence else ""
    report.problem(
        "info", "--engine", f"{judge.label} judged the specs ({how}): it reads {accepts}{library}{learned}", "engine"
    )
    return judge


def _installed(root: str | None, timeout: float) -> tuple[list[InstalledEngine], dict[str, str] | None, list[str]]:
    """The engines installed (under `root`, or on this host with podman and Docker asked), the
    kubelet's runtime, and why an engine on the host did not answer."""
    from cgpu.engines.option import learn_engines
    from cgpu.engines.registry import REGISTRY

    engines, node = learn_engines(root, timeout=timeout)
    kubelet = node.get("kubelet_runtime") if root is not None else None
    failures: list[str] = []
    if root is None:
        engines, failures = _with_running(engines, timeout)
    engines.sort(key=lambda e: REGISTRY.order(e.name))
    return engines, kubelet if isinstance(kubelet, dict) else None, failures


def _with_running(engines: list[InstalledEngine], timeout: float) -> tuple[list[InstalledEngine], list[str]]:
    """On the host, podman and Docker count as they answer (`podman version`, the Docker daemon's
    version), as before; their files add the exact library only where they name the same version."""
    from cgpu.engines.base import same_version
    from cgpu.engines.installed import with_version
    from cgpu.engines.registry import engine as engine_named

    answered, failures, details = host_engine_details(timeout=timeout)
    by_name = {e.name: e for e in engines}
    result = [e for e in engines if not e.engine.reached_by_client]
    for name, version in answered:
        installed = by_name.get(name)
        exact = installed is not None and installed.learned_from != "version"
        if installed is not None and exact and same_version(installed.version, version):
            entry = installed
        else:
            entry = with_version(installed, name, version, "version")
        sources = [*entry.sources, f"{name} version"]
        engine = engine_named(name)
        dirs = engine.daemon_spec_dirs(details)
        if dirs is not None:  # what the daemon itself says, wherever it runs
            entry = entry.replace(
                cdi_enabled=bool(dirs),
                spec_dirs=dirs or entry.spec_dirs,
                cdi_setting=entry.cdi_setting or engine.daemon_setting,
            )
            sources.append(f"{name} info")
        result.append(entry.replace(sources=sources))
    return result, failures


def _named_entry(option: EngineOption, installed: InstalledEngine | None) -> InstalledEngine:
    """The entry for --engine NAME@VERSION: the version given and the release rows; under --root the
    configuration of that engine as installed there, if it is."""
    from cgpu.engines.installed import with_version

    entry = with_version(installed, str(option.name), str(option.version), "option")
    return entry.replace(sources=[f"--engine {option}"])


def _default_judge(
    found: list[InstalledEngine], kubelet: dict[str, str] | None, option: EngineOption, on_host: bool
) -> tuple[InstalledEngine, str]:
    """The kubelet's CRI runtime where a kubelet names one, else the first in the registry's order."""
    if kubelet is not None and option.name is None:
        for entry in found:
            if entry.name == kubelet["engine"]:
                return entry, f"the kubelet's runtime {kubelet['endpoint']} in {kubelet['source']}, --engine auto"
    where = "host" if on_host else "node"
    return found[0], f"the {where}'s engine, --engine {option}"


def _unknown_setting(report: ReportBuilder, entry: InstalledEngine) -> None:
    """The judge's configuration was not read (another host, a daemon elsewhere) and its release has
    CDI off unless configured: the specs are judged as if it were on, and that is said."""
    if entry.cdi_enabled is not None or entry.config_broken or entry.version is None:
        return
    engine = entry.engine
    if engine.cdi_on_by_default(entry.version) is False:
        report.problem(
            "info",
            f"--engine {entry.name}",
            f"{entry.label} has CDI off unless its configuration sets {engine.unread_setting}; cgpu did not "
            f"read that configuration, so the specs are judged as if it were on",
            "engine",
        )


def _nvidia_runtime_note(report: ReportBuilder, entry: InstalledEngine) -> None:
    """NVIDIA's runtime is the judging engine's default runtime: containers that ask by environment get
    what its mode injects from the driver, not the spec files; said as a warning, the facts are data."""
    facts = entry.nvidia_runtime
    if not facts:
        return
    mode = facts["mode"] or "unknown (see problems)"
    where = f" ({facts['mode_from']})" if facts["mode_from"] else " (no config.toml: its default)"
    report.problem(
        "warning",
        facts["configured_in"] or entry.name,
        f"{entry.name}'s default runtime is NVIDIA's ({facts['runtime']}), mode {mode}{where}: a container that "
        f"asks by NVIDIA_VISIBLE_DEVICES (NVIDIA's device plugin's default envvar strategy) gets what that mode "
        f"injects from the host's driver, not what these spec files define, limited by NVIDIA_DRIVER_CAPABILITIES "
        f"(default compute,utility: cuda and opencl, no vulkan, which needs graphics); this report judges "
        f"containers that ask for CDI devices",
        "engine",
    )


def _cannot_tell(
    report: ReportBuilder,
    option: EngineOption,
    engines: list[InstalledEngine],
    severity: Severity,
    source: str,
    why: str,
) -> Judge:
    """No engine judges and every API it decides is `unknown`, with `why` as the problem."""
    report.problem(severity, source, why, "engine")
    _report_engine_problems(report, engines)
    return Judge(option, None, engines, unknown=why)


def _report_engine_problems(report: ReportBuilder, engines: list[InstalledEngine]) -> None:
    seen = set()
    for entry in engines:
        for problem in entry.problems:
            if (problem.source, problem.message) not in seen:
                seen.add((problem.source, problem.message))
                report.add(problem)
