"""The container engines installed on a node, learned from their files (docs/cdi.md "Engines: as
installed and configured"): each one's version, the exact CDI library it links, whether CDI is on
in its configuration and which spec dirs it reads; and the kubelet's CRI runtime.

Under `--root R` only R's files are read (symlinks resolved inside R, never a FIFO, size-capped),
and nothing runs. On the host (no `--root`) an engine whose files tell no version is asked
(`containerd --version`, `crio version`; podman and Docker are asked by `engine_option.host_engines`).
What is learned, and the identity of every file it was learned from, is what
`engine_option.learn_engines` remembers.
"""

from __future__ import annotations

import os
import re
import shutil
import stat

from cgpu.cdi.versions import CDI_MODULES, library_max_version, max_cdi_version
from cgpu.engines.config import MAX_CONFIG_BYTES, Config
from cgpu.node.host import HostFS
from cgpu.options import DEFAULT_SPEC_DIRS
from cgpu.patterns import lazy
from cgpu.problem import Problem

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin")
DAEMONS = {"podman": "podman", "docker": "dockerd", "crio": "crio", "containerd": "containerd"}
K3S = "/usr/local/bin/k3s"
RKE2_CONTAINERD = "/var/lib/rancher/rke2/bin/containerd"
# Packages that install each engine (Debian, Docker's and Fedora's repositories, openSUSE, OBS)
PACKAGES = {
    "podman": ("podman",),
    "docker": ("docker.io", "docker-ce", "moby-engine", "docker"),
    "crio": ("cri-o", "crio"),
    "containerd": ("containerd", "containerd.io", "containerd2"),
}
DPKG_STATUS = "/var/lib/dpkg/status"
RPMDBS = ("/usr/lib/sysimage/rpm/rpmdb.sqlite", "/var/lib/rpm/rpmdb.sqlite")
MAX_STATUS_BYTES = 64 << 20
MAX_RPMDB_BYTES = 512 << 20
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
KUBEADM_FLAGS = "/var/lib/kubelet/kubeadm-flags.env"
KUBELET_DROP_INS = ("/etc/systemd/system/kubelet.service.d", "/usr/lib/systemd/system/kubelet.service.d")
# A CRI socket's name -> the engine behind it (k3s and RKE2 run their own containerd)
SOCKETS = (("crio.sock", "crio"), ("containerd.sock", "containerd"), ("cri-dockerd.sock", "docker"))
# Debian's package of the CDI library, in Built-Using / Static-Built-Using
_DEB_CDI = lazy(
    r"golang-(?:tags\.cncf|github-container-orchestrated-devices)-container-device-interface(?:-dev)?"
    r"\s*\(\s*=\s*([^)\s]+)\s*\)"
)
_RPM_CDI = tuple(f"bundled(golang({module}))" for module in CDI_MODULES)
_REPACK = lazy(r"[~+](?:ds|dfsg)\d*$")  # Debian's repacked upstream source: 1.7.24~ds1, 26.1.5+dfsg1
_VERSION_WORD = lazy(r"\bv?(\d+\.\d+(?:\.\d+)?(?:[-+~][0-9A-Za-z.+~-]*)?)")
_ENDPOINT = lazy(r"--container-runtime-endpoint[= ]\s*[\"']?([^\s\"']+)")
_YAML_ENDPOINT = lazy(r"^containerRuntimeEndpoint:\s*[\"']?([^\s\"'#]+)", re.MULTILINE)


class Files:
    """The node's files as the engine sees them, under `root`: each read's identity recorded."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.host = HostFS(root)
        self.identity: dict[str, list[Any] | None] = {}  # node path (or which:NAME) -> identity

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


def new_entry(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "version": None,
        "cdi_library": None,
        "max_cdi_version": None,
        "cdi_enabled": None,
        "spec_dirs": list(DEFAULT_SPEC_DIRS),
        "learned_from": "version",
        "sources": [],
        "judged": False,
        "containers": [],
        "nvidia_runtime": None,
        "problems": [],  # internal: Problems; not in the report's entry
        "cdi_setting": "",  # internal: the setting and file that turn CDI on
        "cdi_file": "",  # internal: the file holding (or to hold) that setting
        "cdi_explicit": None,  # internal: what the configuration says of CDI (None: nothing)
        "config_broken": None,  # internal: why the engine would not start with its configuration
        "rules_unknown": False,  # internal: cgpu has no release row for its version
        "binary": None,  # internal
    }


def with_version(installed: dict[str, Any] | None, name: str, version: str, learned_from: str) -> dict[str, Any]:
    """A fresh entry for `name` at `version` judged by the release rows, keeping what the installed
    engine's configuration says (its spec dirs, whether CDI is on)."""
    from cgpu.cdi.versions import cdi_on_by_default

    entry = new_entry(name)
    entry["version"] = version
    entry["learned_from"] = learned_from
    if installed is not None:
        for key in (
            "spec_dirs",
            "cdi_setting",
            "cdi_file",
            "cdi_explicit",
            "config_broken",
            "nvidia_runtime",
            "problems",
        ):
            entry[key] = installed[key]
    try:
        entry["max_cdi_version"] = max_cdi_version(name, version)
    except ValueError as exc:
        entry["rules_unknown"] = True
        entry["problems"] = [
            *entry["problems"],
            Problem("warning", f"{name} {version}", f"{exc}; judged by the newest rules"),
        ]
    explicit = entry["cdi_explicit"]
    entry["cdi_enabled"] = explicit if explicit is not None else cdi_on_by_default(name, version)
    if installed is None and name in ("docker", "containerd"):
        entry["cdi_enabled"] = None  # a daemon whose configuration cgpu did not read (another host, DOCKER_HOST)
    return entry


def learn(root: str, *, run_allowed: bool, timeout: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every engine installed under `root`, and the node facts (the kubelet's runtime); with the
    identity of each file read, for the cache."""
    files = Files(root)
    packages = _Packages(files)
    engines = []
    for name in DAEMONS:
        entry = _learn_one(files, packages, name, run_allowed=run_allowed, timeout=timeout)
        if entry is not None:
            entry["problems"] += packages.problems
            engines.append(entry)
    node = {"kubelet_runtime": kubelet_runtime(files), "identity": files.identity}
    return engines, node


def _binary(files: Files, name: str, run_allowed: bool) -> str | None:
    """The engine's binary: under a root, in the usual places; on the host, on PATH (podman's and
    Docker's also in the usual places: they count only as they answer, their files add the library)."""
    daemon = DAEMONS[name]
    if run_allowed:
        found = shutil.which(daemon)
        files.identity[f"which:{daemon}"] = [found] if found else None
        if found:
            files.real(found)
            return found
        if name in ("crio", "containerd"):
            return None
    candidates = [f"{d}/{daemon}" for d in BIN_DIRS]
    if name == "containerd":
        candidates += [K3S, RKE2_CONTAINERD]
    for path in candidates:
        if files.is_file(path):
            return path
    return None


def _learn_one(
    files: Files, packages: _Packages, name: str, *, run_allowed: bool, timeout: float
) -> dict[str, Any] | None:
    entry = new_entry(name)
    binary = _binary(files, name, run_allowed)
    if binary is None and run_allowed:
        return None  # on the host an engine is a binary that can run
    package = packages.find(name)
    if binary is None and package is None:
        return None
    entry["binary"] = binary
    flavour = "k3s" if binary == K3S else "rke2" if binary == RKE2_CONTAINERD else ""
    if binary is not None:
        _from_build_info(files, entry, binary, flavour)
    if entry["learned_from"] != "build-info" and package is not None:
        _from_package(entry, package)
    if entry["version"] is None and binary is not None and run_allowed and name in ("containerd", "crio"):
        _from_running(entry, binary, timeout)
    if entry["version"] is not None and entry["learned_from"] == "version":
        try:
            entry["max_cdi_version"] = max_cdi_version(name, entry["version"])
        except ValueError as exc:
            entry["rules_unknown"] = True
            entry["problems"].append(
                Problem("warning", f"{name} {entry['version']}", f"{exc}; judged by the newest rules")
            )
    _configure(files, entry, flavour)
    return entry


def _from_build_info(files: Files, entry: dict[str, Any], binary: str, flavour: str) -> None:
    """Fill `entry` from the binary's Go build info (k3s: the version of the containerd inside it)."""
    from cgpu.engines.buildinfo import BuildInfoError, read_build_info

    shown = files.shown(binary)
    real = files.real(binary)
    if real is None:
        return
    try:
        info = read_build_info(real)
    except (OSError, BuildInfoError) as exc:
        entry["problems"].append(Problem("warning", shown, f"cgpu could not read this engine's Go build info: {exc}"))
        return
    if info is None:
        return
    version = None
    if flavour == "k3s":
        version = info.dep("github.com/containerd/containerd/v2", "github.com/containerd/containerd")
    if version is None:
        version = info.version_flag()
    if version is None and info.main is not None and info.main[1] not in ("", "(devel)"):
        version = info.main[1]
    if version is not None:
        entry["version"] = version.lstrip("v")
    if not info.module_mode:
        return  # built outside module mode: no module list, so no library named
    library = info.dep(*CDI_MODULES)
    entry["learned_from"] = "build-info"
    entry["sources"].append(shown)
    entry["cdi_library"] = library
    entry["max_cdi_version"] = library_max_version(library) if library else None
    if library is not None and entry["max_cdi_version"] is None:
        entry["problems"].append(Problem("warning", shown, f"its CDI library {library} is older than any cgpu knows"))


def _from_package(entry: dict[str, Any], package: tuple[Any, str]) -> None:
    found, shown = package
    version = _REPACK.sub("", found.version.split(":", 1)[-1])
    if entry["version"] is None:
        entry["version"] = version
    library = None
    match = _DEB_CDI.search(found.built_using)
    if match:
        library = "v" + re.split(r"[-+~]", match.group(1).split(":", 1)[-1])[0]
    for provided, provided_version in found.provides:
        if provided in _RPM_CDI and provided_version:
            library = "v" + provided_version.lstrip("v")
    entry["sources"].append(shown)
    if library is not None:
        entry["learned_from"] = "package"
        entry["cdi_library"] = library
        entry["max_cdi_version"] = library_max_version(library)


def _from_running(entry: dict[str, Any], binary: str, timeout: float) -> None:
    from cgpu.run import CommandError, decode, run

    argv = [binary, "--version"] if entry["name"] == "containerd" else [binary, "version"]
    try:
        done = run(argv, timeout=timeout)
    except CommandError as exc:
        entry["problems"].append(Problem("warning", " ".join(argv), str(exc)))
        return
    text = decode(done.stdout)
    if entry["name"] == "containerd":
        text = re.sub(r"github\.com/\S+", "", text)  # "containerd github.com/containerd/containerd/v2 v2.1.4 …"
    match = _VERSION_WORD.search(text)
    if done.returncode == 0 and match:
        entry["version"] = match.group(1)
        entry["sources"].append(" ".join(argv))


class _Packages:
    """The node's package database (dpkg status, else rpm), read once, only when needed."""

    def __init__(self, files: Files) -> None:
        self.files = files
        self._read = False
        self._packages: dict[str, tuple[Any, str]] = {}
        self.problems: list[Problem] = []

    def find(self, engine: str) -> tuple[Any, str] | None:
        if not self._read:
            self._read = True
            self._load()
        for name in PACKAGES[engine]:
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


def _configure(files: Files, entry: dict[str, Any], flavour: str) -> None:
    """Whether CDI is on and which spec dirs the engine reads, from its configuration files."""
    from cgpu.engines import config as engine_config

    name = entry["name"]
    major = _major(entry["version"])
    config: Config
    if name == "containerd":
        path = {
            "k3s": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
            "rke2": "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
        }.get(flavour, "/etc/containerd/config.toml")
        config = engine_config.containerd(files.read, files.listdir, path, major)
    elif name == "crio":
        config = engine_config.crio(files.read, files.listdir, "/etc/crio/crio.conf", "/etc/crio/crio.conf.d")
    elif name == "podman":
        conf_files = ["/usr/share/containers/containers.conf", "/etc/containers/containers.conf"]
        drop_ins = ["/usr/share/containers/containers.conf.d", "/etc/containers/containers.conf.d"]
        if files.host.real_root:  # this user's own files, read by a rootless podman run here
            user = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "containers")
            conf_files.append(f"{user}/containers.conf")
            drop_ins.append(f"{user}/containers.conf.d")
        config = engine_config.podman(files.read, files.listdir, conf_files, drop_ins)
    else:
        config = engine_config.docker(files.read, "/etc/docker/daemon.json")
    from cgpu.cdi.versions import cdi_on_by_default

    entry["cdi_explicit"] = config.enabled
    entry["cdi_enabled"] = config.enabled if config.enabled is not None else cdi_on_by_default(name, entry["version"])
    if config.spec_dirs is not None:
        entry["spec_dirs"] = config.spec_dirs
    entry["cdi_setting"] = config.setting
    entry["cdi_file"] = config.file
    if config.default_runtime is not None and config.default_runtime.startswith("nvidia"):
        facts, problems = engine_config.nvidia_runtime(files.read, config.default_runtime, config.runtime_file)
        entry["nvidia_runtime"] = facts
        entry["problems"] += problems
    entry["problems"] += config.problems
    broken = [f"{source}: {message}" for severity, source, message in config.problems if severity == "error"]
    if broken:
        entry["config_broken"] = broken[0]
        entry["cdi_enabled"] = None


def _major(version: str | None) -> int | None:
    if not version:
        return None
    match = re.match(r"v?(\d+)", version)
    return int(match.group(1)) if match else None


def kubelet_runtime(files: Files) -> dict[str, str] | None:
    """The engine the kubelet runs pods with, from its configuration: {"engine", "endpoint", "source"}."""
    sources = [(KUBELET_CONFIG, _YAML_ENDPOINT), (KUBEADM_FLAGS, _ENDPOINT)]
    for folder in KUBELET_DROP_INS:
        sources += [(f"{folder}/{n}", _ENDPOINT) for n in files.listdir(folder) if n.endswith(".conf")]
    for path, pattern in sources:
        text, _, shown = files.read(path)
        if text is None:
            continue
        match = pattern.search(text)
        if match is None:
            continue
        endpoint = match.group(1)
        for socket, engine in SOCKETS:
            if endpoint.rstrip("/").endswith(socket):
                return {"engine": engine, "endpoint": endpoint, "source": shown}
        return {"engine": "", "endpoint": endpoint, "source": shown}
    return None
