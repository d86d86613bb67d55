"""containerd: CDI from 1.7 (off unless configured; on from 2.0); its release rows, its config.toml
with its `imports`, and the flavours that ship their own containerd: k3s (inside the k3s binary,
its configuration under /var/lib/rancher/k3s) and RKE2 (its own binary and configuration). On the
host, where its files tell no version, `containerd --version` is asked."""

from __future__ import annotations

import itertools
import json
import posixpath
import re

from cgpu.engines.base import ContainerEngine, parse_engine_version
from cgpu.problem import Problem

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from cgpu.engines.buildinfo import BuildInfo
    from cgpu.engines.config import Config, Lister, Reader

    Settings = dict[str, tuple[Any, str]]  # a CRI setting -> (its value, the file that set it, as shown)

MAX_IMPORTS = 64
# k3s: /usr/local/bin/k3s is a launcher (cmd/k3s, built with only k3s's own version: no containerd in its
# build info); it unpacks the real multicall binary into data/<sha256>/bin/k3s, links data/current to that
# dir, and bin/containerd there is a link to k3s (k3s-io/k3s cmd/k3s/main.go, scripts/build).
K3S_CONTAINERD = "/var/lib/rancher/k3s/data/current/bin/containerd"
K3S = "/usr/local/bin/k3s"
RKE2_CONTAINERD = "/var/lib/rancher/rke2/bin/containerd"  # bin -> data/<release>/bin (rancher/rke2)
MICROK8S_CONTAINERD = "/snap/microk8s/current/bin/containerd"  # the snap's own (canonical/microk8s)
K0S_CONTAINERD = "/var/lib/k0s/bin/containerd"  # k0s unpacks its binaries there (k0sproject/k0s)
CONFIG_TOML = "/etc/containerd/config.toml"
# The CRI plugin's table in each config version: 1 `cri` (a short id), 2 the gRPC plugin's URI, 3 and 4
# (containerd 2.x) the CRI runtime plugin's
CRI_V2 = "io.containerd.grpc.v1.cri"
CRI_RUNTIME = "io.containerd.cri.v1.runtime"
CDI_SETTINGS = ("enable_cdi", "cdi_spec_dirs")
DEFAULT_RUNTIME = "containerd.default_runtime_name"
FLAVOURS = {
    K3S_CONTAINERD: "k3s",
    K3S: "k3s",
    RKE2_CONTAINERD: "rke2",
    MICROK8S_CONTAINERD: "microk8s",
    K0S_CONTAINERD: "k0s",
}
FLAVOUR_CONFIGS = {
    # k3s and RKE2 write it at each start from config-v3.toml.tmpl or config.toml.tmpl where present
    "k3s": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
    "rke2": "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
    "microk8s": "/var/snap/microk8s/current/args/containerd.toml",  # made from containerd-template.toml
    "k0s": "/etc/k0s/containerd.toml",  # imports /etc/k0s/containerd.d/*.toml and k0s's CRI file
}


def imported_files(read: Reader, listed: Lister, path: str, document: dict[str, Any], config: Config) -> Iterator[str]:
    """The files a containerd config imports, in order (`resolveImports`): paths relative to its folder,
    cleaned; a path with a `*` is a glob (Go's filepath.Glob: names matched in name order; `listed`: a
    folder's names, sorted), any other taken as it is."""
    import fnmatch

    imports = document.get("imports", [])
    if not isinstance(imports, list):
        config.problems.append(Problem("error", read(path)[2], "imports is not a list of paths"))
        return
    for pattern in imports[:MAX_IMPORTS]:
        if not isinstance(pattern, str):
            continue
        pattern = posixpath.normpath(posixpath.join(posixpath.dirname(path), pattern))
        folder, name = posixpath.split(pattern)
        if "*" in name:
            yield from (posixpath.join(folder, n) for n in listed(folder) if fnmatch.fnmatchcase(n, name))
        else:
            yield pattern


class _File:
    """One config file as containerd loads it: its `version` and the CRI settings of each plugin table
    (`enable_cdi`, `cdi_spec_dirs`, `containerd.default_runtime_name`, each with the file that set it)."""

    __slots__ = ("plugins", "shown", "version")

    def __init__(self, shown: str, document: dict[str, Any], config: Config) -> None:
        from cgpu.engines.config import table

        self.shown = shown
        version = document.get("version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            # not decoded (a string), or a negative one containerd 2.x's migration indexes with (a panic)
            config.problems.append(Problem("error", shown, f"version is {version!r}, not a config version"))
            version = 0
        self.version = version
        self.plugins: dict[str, Settings] = {}
        plugins = document.get("plugins", {})
        if not isinstance(plugins, dict):
            config.problems.append(Problem("error", shown, "plugins is not a table"))
            return
        for name, found in plugins.items():
            settings: Settings = {}
            if isinstance(found, dict):
                settings = {key: (found[key], shown) for key in CDI_SETTINGS if key in found}
                runtime = table(found, "containerd")
                if runtime is not None and "default_runtime_name" in runtime:
                    settings[DEFAULT_RUNTIME] = (runtime["default_runtime_name"], shown)
            self.plugins[name] = settings


def _rename_short_ids(plugins: dict[str, Settings]) -> None:
    """containerd 2.x's `v1Migrate`: a version-1 file's short plugin id `cri` becomes the version-2 URI."""
    if "cri" in plugins:
        plugins[CRI_V2] = plugins.pop("cri")


def _move_cri_settings(plugins: dict[str, Settings]) -> None:
    """The CRI runtime plugin's `configMigration` (containerd 2.x): the version-2 CRI table's settings that
    the runtime table does not have are copied into it."""
    if CRI_V2 in plugins:
        runtime = plugins.setdefault(CRI_RUNTIME, {})
        for key, value in plugins[CRI_V2].items():
            runtime.setdefault(key, value)


def _line_1(files: list[_File], release: tuple[int, ...], config: Config) -> tuple[Settings, str]:
    """containerd 1.6/1.7 (services/server/config/config.go, LoadConfig and mergeConfig at v1.7.24): each
    imported file's plugin tables REPLACE the tables of that name (`to.Plugins[k] = v`); the last file
    that names a version gives it; no version is version 1, whose plugins go by short id (`cri`, Decode:
    `id = p.ID`), version 2 by URI; version 3 is refused from 1.7.17 (ValidateV2) and read as 2 before."""
    merged: dict[str, Settings] = {}
    holder: dict[str, str] = {}  # the file whose table of that name counts
    version = 0
    for file in files:
        version = file.version or version
        for name, settings in file.plugins.items():
            merged[name], holder[name] = settings, file.shown
    main = files[0].shown
    version = version or 1
    if version > 2 and release >= (1, 7, 17):
        config.problems.append(
            Problem("error", main, f"containerd {_shown(release)} refuses config version {version} (its highest is 2)")
        )
    elif version >= 2:
        for name in merged:
            if not name.startswith("io.containerd.") or len(name.split(".", 3)) < 4:
                config.problems.append(
                    Problem(
                        "error",
                        holder[name],
                        f"plugin {name!r} is not a URI (io.containerd.x.vx), as config version 2 needs",
                    )
                )
    cri = "cri" if version == 1 else CRI_V2
    config.file = holder.get(cri, main)
    return merged.get(cri, {}), cri


def _line_2(files: list[_File], release: tuple[int, ...] | None, config: Config) -> tuple[Settings, str]:
    """containerd 2.x (cmd/containerd/server/config/config.go, LoadConfig and mergeConfig at v2.0.0 to v2.2.x;
    LoadConfigWithPlugins from v2.3.0): imports MERGE key by key into the main file (mergo.WithOverride), a
    list replaced whole; a file below the current version is migrated: version 1's `cri` becomes
    `io.containerd.grpc.v1.cri`, whose settings the CRI runtime plugin's migration copies into
    `io.containerd.cri.v1.runtime` (plugins/cri/runtime/plugin.go configMigration). Up to 2.2 a file
    without a version is migrated straight to the running version (3), so its CRI tables are left where
    version 3 does not read them, and the copy runs once on the merged config where the last versioned
    file says 2; from 2.3 (config version 4) every file is migrated step by step, the copy at each step,
    and a drop-in may not name a higher version than the main file."""
    per_file = release is None or release >= (2, 3)
    highest = 4 if per_file else 3
    merged: dict[str, Settings] = {}
    version = highest
    root_version = 0
    for file in files:
        if per_file:
            root_version = root_version or file.version
            if file.version > root_version:
                config.problems.append(
                    Problem(
                        "error",
                        file.shown,
                        f"containerd refuses a drop-in of config version {file.version} above the main file's "
                        f"{root_version}",
                    )
                )
            for step in range(file.version, version):
                if step == 1:
                    _rename_short_ids(file.plugins)
                _move_cri_settings(file.plugins)
            file_version = max(file.version, version)
        else:
            if file.version <= 1:
                _rename_short_ids(file.plugins)
            file_version = file.version if file.version > 1 else version
        for name, settings in file.plugins.items():
            merged.setdefault(name, {}).update(settings)
        version = file_version
    if version > highest:
        config.problems.append(
            Problem("error", files[0].shown, f"containerd refuses config version {version} (its highest is {highest})")
        )
    if not per_file and version < 3:
        _move_cri_settings(merged)
    cri = CRI_V2 if files[0].version == 2 and (per_file or version == 2) else CRI_RUNTIME
    return merged.get(CRI_RUNTIME, {}), cri


def read_config(read: Reader, listdir: Lister, path: str, release: tuple[int, ...] | None) -> Config:
    """containerd's CRI plugin: `enable_cdi` (1.7: off by default; 2.x: on) and `cdi_spec_dirs`, from the
    main file and its `imports` as the release line loads them (`_line_1`: 1.6 and 1.7; `_line_2`: 2.x;
    an unknown release: the newest line)."""
    from cgpu.engines.config import Config, toml_file

    config = Config()
    main = toml_file(read, path, config)
    config.file = read(path)[2]
    if main is None:
        if config.problems:
            config.problems.append(
                Problem("error", config.file, "containerd refuses to start with a config file it cannot parse")
            )
        _apply({}, "cri" if release is not None and release < (2,) else CRI_RUNTIME, config)
        return config
    config.files.append(config.file)
    files = [_File(config.file, main, config)]
    # Imports of imports too, in containerd's order: it queues every import and skips a file loaded
    # before, so each file is queued here once, where it first appears; at most MAX_IMPORTS of them.
    queue = [path]
    listings: dict[str, list[str]] = {}

    def listed(folder: str) -> list[str]:
        if folder not in listings:
            listings[folder] = sorted(listdir(folder))
        return listings[folder]

    def enqueue(source: str, document: dict[str, Any]) -> None:
        for found in imported_files(read, listed, source, document, config):
            if len(queue) > MAX_IMPORTS:
                return  # no room: what is left of the imports is not read
            if found not in queue:
                queue.append(found)

    enqueue(path, main)
    for target in itertools.islice(queue, 1, None):  # the queue grows while it is walked
        text, why, shown = read(target)
        if text is None and why is None:
            config.problems.append(Problem("error", shown, "this imported config file does not exist"))
            continue
        config.files.append(shown)
        document = toml_file(read, target, config)
        if document is not None:
            files.append(_File(shown, document, config))
            enqueue(target, document)
    if release is not None and release < (2,):
        settings, cri = _line_1(files, release, config)
    else:
        settings, cri = _line_2(files, release, config)
    if any(severity == "error" for severity, _, _ in config.problems):
        config.problems.append(
            Problem("error", files[0].shown, "containerd refuses to start with a config file it cannot load")
        )
    _apply(settings, cri, config)
    return config


def _apply(settings: Settings, cri: str, config: Config) -> None:
    """The CRI settings that count into `config`; each one no file sets is the release's default."""
    from cgpu.engines.config import spec_dirs_setting

    if "enable_cdi" in settings:
        enabled, shown = settings["enable_cdi"]
        if isinstance(enabled, bool):
            config.enabled = enabled
            config.file = shown
        else:
            config.problems.append(Problem("error", shown, f"enable_cdi is {enabled!r}, not true or false"))
    if "cdi_spec_dirs" in settings:
        dirs, shown = settings["cdi_spec_dirs"]
        spec_dirs_setting({"cdi_spec_dirs": dirs}, "cdi_spec_dirs", shown, config)
    config.defaulted.extend(key for key in CDI_SETTINGS if key not in settings)
    config.setting = f"enable_cdi = true in [plugins.{json.dumps(cri)}] of {config.file}"
    if DEFAULT_RUNTIME in settings and isinstance(settings[DEFAULT_RUNTIME][0], str):
        config.default_runtime, config.runtime_file = settings[DEFAULT_RUNTIME]


def _shown(release: tuple[int, ...]) -> str:
    return ".".join(map(str, release))


class Containerd(ContainerEngine):
    __slots__ = ()

    name = "containerd"
    example = "1.7.27"
    daemon = "containerd"
    packages = ("containerd", "containerd.io", "containerd2")
    cri_sockets = ("containerd.sock",)  # k3s's and RKE2's own containerd too
    rows = (
        ((1, 7), "0.5.0", "v0.5.4"),
        ((1, 7, 12), "0.6.0", "v0.6.1/v0.6.2"),
        ((1, 7, 16), "0.7.0", "v0.7.2"),
        ((1, 7, 27), "0.8.0", "v0.8.1"),
        ((2, 0), "0.8.0", "v0.8.0/v0.8.1"),
        ((2, 0, 5), "1.0.0", "v1.0.0"),
        ((2, 1), "1.0.0", "v1.0.1"),
        ((2, 2, 1), "1.1.0", "v1.1.0"),  # and every 2.3.x
        ((2, 4), "1.1.0", "v1.1.1"),
    )
    checked_through = (2, 4)
    no_cdi_below = (1, 7)
    on_by_default_from = (2,)
    unread_setting = "enable_cdi = true"

    def binaries(self) -> list[str]:
        return [*super().binaries(), K3S_CONTAINERD, K3S, RKE2_CONTAINERD, MICROK8S_CONTAINERD, K0S_CONTAINERD]

    def flavour(self, binary: str) -> str:
        return FLAVOURS.get(binary, "")

    def version_from_build_info(self, info: BuildInfo, flavour: str) -> str | None:
        if flavour == "k3s":  # the k3s binary's own version is k3s's: the containerd inside it is a module
            # None where it names no containerd (the launcher): never k3s's own version taken for containerd's
            return info.dep("github.com/containerd/containerd/v2", "github.com/containerd/containerd")
        return super().version_from_build_info(info, flavour)

    def version_argv(self, binary: str) -> list[str] | None:
        return [binary, "--version"]

    def version_text(self, output: str) -> str:
        return re.sub(r"github\.com/\S+", "", output)  # "containerd github.com/containerd/containerd/v2 v2.1.4 …"

    def read_release_configuration(
        self, read: Reader, listdir: Lister, *, version: str | None, flavour: str, on_host: bool
    ) -> Config:
        """containerd's reading changes within a release line (2.3 against 2.2), so it reads by the whole
        version; it has no by-major `read_configuration`. A Kubernetes flavour's files are shown as the
        flavour writes them before containerd starts (cgpu/engines/flavours.py)."""
        release = None
        if version is not None:
            try:
                release = parse_engine_version(version)
            except ValueError:
                pass  # no release cgpu can read: the newest line's reading
        major = release[0] if release else None
        if not flavour:
            return read_config(read, listdir, CONFIG_TOML, release)
        from cgpu.engines.flavours import FlavourFiles

        files = FlavourFiles(flavour, read, listdir, major, FLAVOUR_CONFIGS.get(flavour, CONFIG_TOML))
        config = read_config(files.read, listdir, files.path, release)
        config.problems[:0] = files.problems
        return config


ENGINE = Containerd()
