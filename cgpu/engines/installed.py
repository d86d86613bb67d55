"""The container engines installed on a node, learned from their files (docs/cdi.md "Engines: as
installed and configured"): each one's version, the exact CDI library it links, whether CDI is on
in its configuration and which spec dirs it reads; and the kubelet's CRI runtime.

Under `--root R` only R's files are read (symlinks resolved inside R, never a FIFO, size-capped),
and nothing runs. On the host (no `--root`) an engine whose files tell no version is asked
(`containerd --version`, `crio version`; podman and Docker are asked by `option.host_engines`).
What each engine's files are, and how its configuration reads, is its module's (`cgpu.engines.registry`);
what they share is here: the binary's Go build info, the package databases, the engine as learned
(`InstalledEngine`, and its report entry). What is learned, and the identity of every file it was
learned from, is what `option.learn_engines` remembers.
"""

from __future__ import annotations

import os
import re
import stat
import time

from cgpu.cdi.versions import CDI_MODULES, library_max_version
from cgpu.engines.config import MAX_CONFIG_BYTES
from cgpu.node.host import HostFS
from cgpu.options import DEFAULT_SPEC_DIRS
from cgpu.patterns import lazy
from cgpu.problem import Problem

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    from cgpu.engines.base import ContainerEngine

# All of a node's engine configuration files together: tens of KB where an engine was given them
MAX_CONFIG_TOTAL = 2 << 20
DPKG_STATUS = "/var/lib/dpkg/status"
RPMDBS = ("/usr/lib/sysimage/rpm/rpmdb.sqlite", "/var/lib/rpm/rpmdb.sqlite")
MAX_STATUS_BYTES = 64 << 20
MAX_RPMDB_BYTES = 512 << 20
# Debian's package of the CDI library, in Built-Using / Static-Built-Using
_DEB_CDI = lazy(
    r"golang-(?:tags\.cncf|github-container-orchestrated-devices)-container-device-interface(?:-dev)?"
    r"\s*\(\s*=\s*([^)\s]+)\s*\)"
)
_RPM_CDI = tuple(f"bundled(golang({module}))" for module in CDI_MODULES)
_REPACK = lazy(r"[~+](?:ds|dfsg)\d*$")  # Debian's repacked upstream source: 1.7.24~ds1, 26.1.5+dfsg1
_VERSION_WORD = lazy(r"\bv?(\d+\.\d+(?:\.\d+)?(?:[-+~][0-9A-Za-z.+~-]*)?)")


class Files:
    """The node's files as the engine sees them, under `root`: each read's identity recorded. Engine
    configuration (`read_config`) is read within MAX_CONFIG_TOTAL in all and before `deadline`
    (time.monotonic()): a configuration parses slowly, and many files of it must not hold up the probe."""

    def __init__(self, root: str, deadline: float | None = None) -> None:
        self.root = root
        self.host = HostFS(root)
        self.identity: dict[str, list[Any] | None] = {}  # node path (or which:NAME) -> identity
        self.deadline = deadline
        self.config_sizes: dict[str, int] = {}  # each configuration file read, counted once
        self.cut_short = False  # a file was not read for the deadline: what was learned is not to be kept

    def shown(self, path: str) -> str:
        return path if self.host.real_root else os.path.join(self.host.root, path.lstrip("/"))

    def real(self, path: str) -> str | None:
        """The real file for a node path, links resolved inside the root; recorded (absent too)."""
        real, info = self.look(path)
        self.identity[path] = identity_of(info)
        return real

    def look(self, path: str) -> tuple[str | None, os.stat_result | None]:
        real = self.host.resolve(path)
        if real is None:
            return None, None
        try:
            return real, os.stat(real)
        except (OSError, ValueError):
            return None, None

    def is_file(self, path: str) -> str | None:
        real = self.real(path)
        if real is None:
            return None
        try:
            return real if stat.S_ISREG(os.stat(real).st_mode) else None
        except OSError:
            return None

    def read(self, path: str, limit: int = MAX_CONFIG_BYTES) -> tuple[str | None, str | None, str]:
        """(text, None, shown) or (None, why, shown); (None, None, shown) when it does not exist."""
        shown = self.shown(path)
        real = self.real(path)
        if real is None:
            return None, None, shown
        data, why = read_capped(real, limit)
        return (data.decode("utf-8", errors="replace") if data is not None else None), why, shown

    def read_config(self, path: str) -> tuple[str | None, str | None, str]:
        """An engine configuration file, as `read` gives it, within the total cap and the deadline."""
        text, why, shown = self.read(path)
        if text is None or path in self.config_sizes:
            return text, why, shown
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.cut_short = True
            return None, "the probe's time limit (--timeout) passed before cgpu read it", shown
        size = len(text)
        if sum(self.config_sizes.values()) + size > MAX_CONFIG_TOTAL:
            return None, f"cgpu reads at most {MAX_CONFIG_TOTAL} bytes of engine configuration in all", shown
        self.config_sizes[path] = size
        return text, why, shown

    def listdir(self, path: str) -> list[str]:
        real = self.real(path)
        if real is None:
            return []
        try:
            return sorted(os.listdir(real))
        except OSError:
            return []


def identity_unchanged(root: str, identity: dict[str, Any]) -> bool:
    """Every file `learn` consulted under `root` is the same file as then (absent ones still absent)."""
    files = Files(root)
    for path, known in identity.items():
        if path.startswith("which:"):
            import shutil  # only where an engine was found on PATH: its import is not on every probe's path

            found = shutil.which(path[len("which:") :])
            if (None if found is None else [found]) != known:
                return False
        elif identity_of(files.look(path)[1]) != known:
            return False
    return True


def identity_of(info: os.stat_result | None) -> list[int] | None:
    if info is None:
        return None
    return [info.st_size, info.st_mtime_ns, info.st_ino, info.st_mode]


def read_capped(path: str, limit: int) -> tuple[bytes | None, str | None]:
    from cgpu.node.files import open_regular

    try:
        with open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > limit:
                return None, f"it is {size} bytes, above the {limit} cgpu reads of such a file"
            data = handle.read(limit + 1)
    except OSError as exc:
        return None, exc.strerror or str(exc)
    if len(data) > limit:
        return None, f"it is above the {limit} bytes cgpu reads of such a file"
    return data, None


class InstalledEngine:
    """An engine as cgpu learned it (from its files, its answer or `--engine NAME@VERSION`): what the
    report says of it, and what decides its answer. Frozen: a changed fact is a new one (`replace`)."""

    __slots__ = (
        "binary",
        "cdi_enabled",
        "cdi_explicit",
        "cdi_file",
        "cdi_library",
        "cdi_setting",
        "config_broken",
        "config_files",
        "defaulted",
        "learned_from",
        "max_cdi_version",
        "name",
        "nvidia_runtime",
        "problems",
        "rules_unknown",
        "sources",
        "spec_dirs",
        "unrecognised",
        "version",
    )

    name: str
    version: str | None  # as learned (1.7.24 for Debian's 1.7.24~ds1-6); None: unknown
    cdi_library: str | None  # the exact CDI library release it links, where its files name it
    max_cdi_version: str | None  # the newest cdiVersion it reads; None: none at all, or unknown
    cdi_enabled: bool | None  # None: cgpu cannot tell (a daemon elsewhere, a broken configuration)
    spec_dirs: tuple[str, ...]  # as its configuration names them, on its node
    learned_from: str  # build-info, package, version or option
    sources: tuple[str, ...]  # the files and commands it was learned from
    config_files: tuple[str, ...]  # the configuration files it reads, in the order it reads them
    defaulted: tuple[str, ...]  # its CDI settings no configuration file sets: its defaults decide them
    nvidia_runtime: Mapping[str, Any] | None  # NVIDIA's runtime as its default runtime (`config.nvidia_runtime`)
    problems: tuple[Problem, ...]  # what is wrong with its files, for the report
    cdi_setting: str  # the setting and file that turn CDI on
    cdi_file: str  # the file holding (or to hold) that setting
    cdi_explicit: bool | None  # what the configuration says of CDI (None: nothing)
    config_broken: str | None  # why the engine would not start with its configuration
    rules_unknown: bool  # cgpu has no release row for its version
    binary: str | None  # where its binary is on the node
    unrecognised: str | None  # a layout cgpu does not recognise: what it looked for and did not find

    def __init__(
        self,
        name: str,
        *,
        version: str | None = None,
        cdi_library: str | None = None,
        max_cdi_version: str | None = None,
        cdi_enabled: bool | None = None,
        spec_dirs: Iterable[str] = DEFAULT_SPEC_DIRS,
        learned_from: str = "version",
        sources: Iterable[str] = (),
        config_files: Iterable[str] = (),
        defaulted: Iterable[str] = (),
        nvidia_runtime: Mapping[str, Any] | None = None,
        problems: Iterable[Problem] = (),
        cdi_setting: str = "",
        cdi_file: str = "",
        cdi_explicit: bool | None = None,
        config_broken: str | None = None,
        rules_unknown: bool = False,
        binary: str | None = None,
        unrecognised: str | None = None,
    ) -> None:
        fields = {
            "name": name,
            "version": version,
            "cdi_library": cdi_library,
            "max_cdi_version": max_cdi_version,
            "cdi_enabled": cdi_enabled,
            "spec_dirs": tuple(spec_dirs),
            "learned_from": learned_from,
            "sources": tuple(sources),
            "config_files": tuple(config_files),
            "defaulted": tuple(defaulted),
            "nvidia_runtime": nvidia_runtime,
            "problems": tuple(problems),
            "cdi_setting": cdi_setting,
            "cdi_file": cdi_file,
            "cdi_explicit": cdi_explicit,
            "config_broken": config_broken,
            "rules_unknown": rules_unknown,
            "binary": binary,
            "unrecognised": unrecognised,
        }
        for key, value in fields.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"an InstalledEngine is frozen: replace(..., {key}=...) makes a changed one")

    def __delattr__(self, key: str) -> None:
        raise AttributeError("an InstalledEngine is frozen")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InstalledEngine) and self.as_json() == other.as_json()

    __hash__ = None  # type: ignore[assignment]  # equal by value, holds a mapping: not hashable

    def __repr__(self) -> str:
        return f"InstalledEngine({self.label!r}, learned_from={self.learned_from!r})"

    def replace(self, **changes: Any) -> InstalledEngine:
        """This engine with some facts changed."""
        fields = {key: getattr(self, key) for key in self.__slots__}
        fields.update(changes)
        return InstalledEngine(**fields)

    @property
    def engine(self) -> ContainerEngine:
        """What cgpu knows of this engine (its module in `cgpu.engines`)."""
        from cgpu.engines.registry import engine

        return engine(self.name)

    @property
    def label(self) -> str:
        """ "containerd 1.7.24", or the bare name where its version is not known."""
        return f"{self.name} {self.version}" if self.version else self.name

    @property
    def library_rules(self) -> str:
        """The CDI library reading its specs get (`cgpu.cdi.versions.library_rules`): of the library it links,
        else of the one its release row names."""
        from cgpu.cdi.versions import library_rules

        library = self.cdi_library
        if library is None and self.version is not None:
            library = self.engine.row_library(self.version)
        return library_rules(library)

    @property
    def unlearned(self) -> bool:
        """Installed, but neither its version nor its library could be learned: the newest rules judge."""
        return self.version is None and self.learned_from == "version"

    def report_entry(self, *, judged: bool, containers: Iterable[str]) -> dict[str, Any]:
        """Its entry in the report (cgpu.model.Engine): whether its rules judged, what its containers get."""
        return {
            "name": self.name,
            "version": self.version,
            "cdi_library": self.cdi_library,
            "max_cdi_version": self.max_cdi_version,
            "cdi_enabled": self.cdi_enabled,
            "spec_dirs": list(self.spec_dirs),
            "learned_from": self.learned_from,
            "sources": list(self.sources),
            "config_files": list(self.config_files),
            "defaulted": list(self.defaulted),
            "judged": judged,
            "containers": list(containers),
            "nvidia_runtime": None if self.nvidia_runtime is None else dict(self.nvidia_runtime),
        }

    def as_json(self) -> dict[str, Any]:
        """Every fact, as JSON keeps it (`from_json` reads it back)."""
        facts = {key: getattr(self, key) for key in self.__slots__}
        facts.update(
            spec_dirs=list(self.spec_dirs),
            sources=list(self.sources),
            config_files=list(self.config_files),
            defaulted=list(self.defaulted),
            problems=list(self.problems),
        )
        facts["nvidia_runtime"] = None if self.nvidia_runtime is None else dict(self.nvidia_runtime)
        return facts

    @classmethod
    def from_json(cls, data: object) -> InstalledEngine:
        """An engine from what `as_json` gave, read back from a file (a cache: it can hold anything).
        CgpuValueError (a ValueError) for anything else."""
        from cgpu.errors import CgpuValueError

        if not isinstance(data, dict) or set(data) != set(cls.__slots__):
            raise CgpuValueError("not an engine's facts")
        texts = ("name", "learned_from", "cdi_setting", "cdi_file")
        optional_texts = ("version", "cdi_library", "max_cdi_version", "config_broken", "binary", "unrecognised")
        if not all(isinstance(data[key], str) for key in texts) or not all(
            data[key] is None or isinstance(data[key], str) for key in optional_texts
        ):
            raise CgpuValueError("an engine's facts are malformed")
        for key in ("spec_dirs", "sources", "config_files", "defaulted"):
            if not isinstance(data[key], list) or not all(isinstance(item, str) for item in data[key]):
                raise CgpuValueError(f"an engine's {key} are malformed")
        flags = (data["cdi_enabled"], data["cdi_explicit"])
        if not all(flag is None or isinstance(flag, bool) for flag in flags) or not isinstance(
            data["rules_unknown"], bool
        ):
            raise CgpuValueError("an engine's flags are malformed")
        if not (data["nvidia_runtime"] is None or isinstance(data["nvidia_runtime"], dict)):
            raise CgpuValueError("an engine's NVIDIA runtime is malformed")
        if not isinstance(data["problems"], list):
            raise CgpuValueError("an engine's problems are malformed")
        return cls(**{**data, "problems": [Problem.from_json(problem) for problem in data["problems"]]})


def with_version(installed: InstalledEngine | None, name: str, version: str, learned_from: str) -> InstalledEngine:
    """A fresh entry for `name` at `version` judged by the release rows, keeping what the installed
    engine's configuration says (its spec dirs, whether CDI is on)."""
    from cgpu.engines.registry import engine as engine_named

    engine = engine_named(name)
    kept: dict[str, Any] = {}
    if installed is not None:
        kept = {
            key: getattr(installed, key)
            for key in (
                "spec_dirs",
                "cdi_setting",
                "cdi_file",
                "cdi_explicit",
                "config_broken",
                "config_files",
                "defaulted",
                "nvidia_runtime",
                "problems",
            )
        }
    problems = list(kept.pop("problems", ()))
    max_version, rules_unknown = _release_limit(engine, version, problems)
    explicit = kept.get("cdi_explicit")
    enabled = explicit if explicit is not None else engine.cdi_on_by_default(version)
    if installed is None and engine.on_by_default_from is not None:
        enabled = None  # a daemon whose configuration cgpu did not read (another host, DOCKER_HOST)
    if engine.injects_cdi(version) is False:
        enabled = False  # whatever its configuration says: the release has no such setting
    return InstalledEngine(
        name,
        version=version,
        learned_from=learned_from,
        max_cdi_version=max_version,
        rules_unknown=rules_unknown,
        cdi_enabled=enabled,
        problems=problems,
        **kept,
    )


def _release_limit(engine: ContainerEngine, version: str, problems: list[Problem]) -> tuple[str | None, bool]:
    """The newest cdiVersion that release reads by the engine's rows, and whether the rows do not know
    it (then the newest rules judge, and a warning in `problems` says so)."""
    try:
        limit = engine.max_cdi_version(version)
    except ValueError as exc:
        shown = version if len(version) <= 40 else f"{version[:40]}…"
        problems.append(Problem("warning", f"{engine.name} {shown}", f"{exc}; judged by the newest rules"))
        return None, True
    if engine.beyond_table(version):
        shown = version if len(version) <= 40 else f"{version[:40]}…"
        line = ".".join(map(str, engine.checked_through or ()))
        problems.append(
            Problem(
                "warning",
                f"{engine.name} {shown}",
                f"cgpu's release table of {engine.name} ends at {line}: {shown} is judged by its newest row "
                f"(CDI {engine.row_library(version)}); check it with the release's own library",
            )
        )
    return limit, False


def learn(root: str, *, run_allowed: bool, timeout: float) -> tuple[list[InstalledEngine], dict[str, Any]]:
    """Every engine installed under `root`, and the node facts (the kubelet's runtime); with the
    identity of each file read, for the cache."""
    from cgpu.engines.kubelet import kubelet_runtime
    from cgpu.engines.registry import REGISTRY

    files = Files(root, deadline=time.monotonic() + timeout)
    packages = _Packages(files)
    kubelet = kubelet_runtime(files)
    # a flavour's containerd where the kubelet runs pods on it, before a packaged one the node may also have
    preferred = []
    if kubelet is not None:
        from cgpu.engines.flavours import flavour_binaries

        preferred = flavour_binaries(kubelet["endpoint"])
    engines = []
    for engine in REGISTRY.engines():
        found = _learn_one(files, packages, engine, run_allowed=run_allowed, timeout=timeout, preferred=preferred)
        if found is not None:
            engines.append(found.replace(problems=(*found.problems, *packages.problems)))
    node = {"kubelet_runtime": kubelet, "identity": files.identity, "cut_short": files.cut_short}
    return engines, node


def _binary(files: Files, engine: ContainerEngine, run_allowed: bool, preferred: list[str]) -> str | None:
    """The engine's binary: the first of `preferred` that is one of its own (a flavour's containerd the kubelet
    runs pods on); under a root, in the usual places; on the host, on PATH (podman's and Docker's also in the
    usual places: they count only as they answer, their files add the library)."""
    own = engine.binaries()
    for path in preferred:
        if path in own and files.is_file(path):
            return path
    if run_allowed:
        import shutil  # only on the host itself: its import is not on a probe's path under --root

        found = shutil.which(engine.daemon)
        files.identity[f"which:{engine.daemon}"] = [found] if found else None
        if found:
            files.real(found)
            return found
        if not engine.reached_by_client:
            return None
    for path in own:
        if files.is_file(path):
            return path
    return None


class _Learning:
    """What is learned of one engine's release, fact by fact, before its configuration is read."""

    __slots__ = ("cdi_library", "learned_from", "max_cdi_version", "problems", "rules_unknown", "sources", "version")

    def __init__(self) -> None:
        self.version: str | None = None
        self.cdi_library: str | None = None
        self.max_cdi_version: str | None = None
        self.learned_from = "version"
        self.sources: list[str] = []
        self.problems: list[Problem] = []
        self.rules_unknown = False


def _learn_one(
    files: Files,
    packages: _Packages,
    engine: ContainerEngine,
    *,
    run_allowed: bool,
    timeout: float,
    preferred: list[str],
) -> InstalledEngine | None:
    binary = _binary(files, engine, run_allowed, preferred)
    if binary is None and run_allowed:
        return None  # on the host an engine is a binary that can run
    package = packages.find(engine.packages)
    if binary is None and package is None:
        return None
    learning = _Learning()
    flavour = engine.flavour(binary) if binary is not None else ""
    if binary is not None:
        _from_build_info(files, learning, engine, binary, flavour)
    if learning.learned_from != "build-info" and package is not None and not flavour:
        _from_package(learning, package)  # a flavour's own containerd is never the distribution's package
    elif (
        learning.version is None and package is not None and not flavour
    ):  # a version set in the source (CRI-O, podman)
        _version_from_package(learning, package)
    if learning.version is None and binary is not None and run_allowed:
        _from_running(learning, engine, binary, timeout)
    if learning.version is not None and learning.learned_from == "version":
        learning.max_cdi_version, learning.rules_unknown = _release_limit(engine, learning.version, learning.problems)
    found = _configure(files, engine, learning, binary, flavour)
    gap = _layout_gap(files, binary, flavour, learning)
    return found if gap is None else found.replace(unrecognised=gap)


def _layout_gap(files: Files, binary: str | None, flavour: str, learning: _Learning) -> str | None:
    """What cgpu looked for and did not find where a flavour's layout is not one it recognises; None else.
    k3s: the launcher without the payload it unpacks at its first start (its containerd and that containerd's
    build info): nothing on the node says which containerd runs the pods."""
    from cgpu.engines.containerd import K3S, K3S_CONTAINERD

    if flavour != "k3s" or binary != K3S or learning.version is not None:
        return None
    text, _, shown = files.read("/etc/rancher/k3s/config.yaml")
    match = re.search(r"^data-dir:[ \t]*[\"']?([^\s\"'#]+)", text or "", re.MULTILINE)
    elsewhere = f"; {shown} names data-dir {match.group(1)}, which cgpu does not read" if match else ""
    return (
        f"k3s is installed ({files.shown(K3S)}) but the containerd it unpacks at its first start is not at "
        f"{files.shown(K3S_CONTAINERD)} (data/current under its default data-dir){elsewhere}"
    )


def _from_build_info(files: Files, learning: _Learning, engine: ContainerEngine, binary: str, flavour: str) -> None:
    """Learn from the binary's Go build info (k3s: the version of the containerd inside it)."""
    from cgpu.engines.buildinfo import BuildInfoError, read_build_info

    shown = files.shown(binary)
    real = files.real(binary)
    if real is None:
        return
    try:
        info = read_build_info(real)
    except (OSError, BuildInfoError) as exc:
        learning.problems.append(Problem("warning", shown, f"cgpu could not read this engine's Go build info: {exc}"))
        return
    if info is None:
        return
    version = engine.version_from_build_info(info, flavour)
    if version is not None:
        learning.version = version.lstrip("v")
    if not info.module_mode:
        return  # built outside module mode: no module list, so no library named
    library = info.dep(*CDI_MODULES)
    if version is None and library is None:
        return  # it names neither the engine's version nor a CDI library (k3s's launcher): nothing learned
    learning.learned_from = "build-info"
    learning.sources.append(shown)
    learning.cdi_library = library
    learning.max_cdi_version = library_max_version(library) if library else None
    if library is not None and learning.max_cdi_version is None:
        learning.problems.append(Problem("warning", shown, f"its CDI library {library} is older than any cgpu knows"))


def _from_package(learning: _Learning, package: tuple[Any, str]) -> None:
    found, shown = package
    version = _REPACK.sub("", found.version.split(":", 1)[-1])
    if learning.version is None:
        learning.version = version
    library = None
    match = _DEB_CDI.search(found.built_using)
    if match:
        library = "v" + re.split(r"[-+~]", match.group(1).split(":", 1)[-1])[0]
    for provided, provided_version in found.provides:
        if provided in _RPM_CDI and provided_version:
            library = "v" + provided_version.lstrip("v")
    learning.sources.append(shown)
    if library is not None:
        learning.learned_from = "package"
        learning.cdi_library = library
        learning.max_cdi_version = library_max_version(library)


def _version_from_package(learning: _Learning, package: tuple[Any, str]) -> None:
    """The version alone from the package, where the binary's build info named the library but not the
    version: CRI-O's and podman's are constants in their source, never a -X flag."""
    found, shown = package
    learning.version = _REPACK.sub("", found.version.split(":", 1)[-1])
    learning.sources.append(shown)


def _from_running(learning: _Learning, engine: ContainerEngine, binary: str, timeout: float) -> None:
    """Ask the engine's binary its version, where the engine is asked that way (containerd, CRI-O)."""
    argv = engine.version_argv(binary)
    if argv is None:
        return
    from cgpu.run import CommandError, decode, run

    try:
        done = run(argv, timeout=timeout)
    except CommandError as exc:
        learning.problems.append(Problem("warning", " ".join(argv), str(exc)))
        return
    match = _VERSION_WORD.search(engine.version_text(decode(done.stdout)))
    if done.returncode == 0 and match:
        learning.version = match.group(1)
        learning.sources.append(" ".join(argv))


class _Packages:
    """The node's package database (dpkg status, else rpm), read once, only when needed."""

    def __init__(self, files: Files) -> None:
        self.files = files
        self._read = False
        self._packages: dict[str, tuple[Any, str]] = {}
        self.problems: list[Problem] = []

    def find(self, names: tuple[str, ...]) -> tuple[Any, str] | None:
        """The first of these packages installed, with the database it was read from."""
        if not self._read:
            self._read = True
            self._load()
        for name in names:
            if name in self._packages:
                return self._packages[name]
        return None

    def _load(self) -> None:
        from cgpu.node.packages import read_dpkg_status

        text, why, shown = self.files.read(DPKG_STATUS, MAX_STATUS_BYTES)
        if why is not None:
            self.problems.append(Problem("warning", shown, f"cgpu could not read the package database: {why}"))
        if text is not None:
            for package in read_dpkg_status(text):
                self._packages.setdefault(package.name, (package, shown))
            return
        for path in RPMDBS:
            real = self.files.real(path)
            if real is None:
                continue
            self._load_rpm(real, self.files.shown(path), self.files.real(path + "-wal"))
            return

    def _load_rpm(self, real: str, shown: str, wal_real: str | None) -> None:
        from cgpu.node.bounds import Deadline, ImageReadError
        from cgpu.node.packages import read_rpmdb

        data, why = read_capped(real, MAX_RPMDB_BYTES)
        if data is None:
            self.problems.append(Problem("warning", shown, f"cgpu could not read the rpm database: {why}"))
            return
        # the write-ahead log is a node file too: resolved inside the root, never from the database's real path
        wal, _ = read_capped(wal_real, MAX_RPMDB_BYTES) if wal_real is not None else (None, None)
        try:
            packages, _ = read_rpmdb(data, wal, provides_with=b"container-device-interface", deadline=Deadline(10))
        except ImageReadError as exc:
            self.problems.append(Problem("warning", shown, f"cgpu could not read the rpm database: {exc}"))
            return
        for package in packages:
            self._packages.setdefault(package.name, (package, shown))


def _configure(
    files: Files, engine: ContainerEngine, learning: _Learning, binary: str | None, flavour: str
) -> InstalledEngine:
    """The engine as learned, with whether CDI is on and which spec dirs it reads from its configuration files."""
    from cgpu.engines.config import nvidia_runtime

    config = engine.read_release_configuration(
        files.read_config, files.listdir, version=learning.version, flavour=flavour, on_host=files.host.real_root
    )
    problems = learning.problems
    enabled = config.enabled if config.enabled is not None else engine.cdi_on_by_default(learning.version)
    facts = None
    if config.default_runtime is not None and config.default_runtime.startswith("nvidia"):
        facts, runtime_problems = nvidia_runtime(files.read_config, config.default_runtime, config.runtime_file)
        problems += runtime_problems
    problems += config.problems
    broken = [f"{source}: {message}" for severity, source, message in config.problems if severity == "error"]
    if broken:
        enabled = None
    if engine.injects_cdi(learning.version) is False:
        enabled = False  # containerd 1.6 ignores enable_cdi: its config dump has no such setting
    return InstalledEngine(
        engine.name,
        version=learning.version,
        cdi_library=learning.cdi_library,
        max_cdi_version=learning.max_cdi_version,
        cdi_enabled=enabled,
        spec_dirs=config.spec_dirs if config.spec_dirs is not None else DEFAULT_SPEC_DIRS,
        learned_from=learning.learned_from,
        sources=learning.sources,
        config_files=config.files,
        defaulted=config.defaulted,
        nvidia_runtime=facts,
        problems=problems,
        cdi_setting=config.setting,
        cdi_file=config.file,
        cdi_explicit=config.enabled,
        config_broken=broken[0] if broken else None,
        rules_unknown=learning.rules_unknown,
        binary=binary,
    )
