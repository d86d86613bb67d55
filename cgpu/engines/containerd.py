"""containerd: CDI from 1.7 (off unless configured; on from 2.0); its release rows, its config.toml
with its `imports`, and the flavours that ship their own containerd: k3s (inside the k3s binary,
its configuration under /var/lib/rancher/k3s) and RKE2 (its own binary and configuration). On the
host, where its files tell no version, `containerd --version` is asked."""

from __future__ import annotations

import itertools
import json
import posixpath
import re

from cgpu.engines.base import ContainerEngine
from cgpu.problem import Problem

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from cgpu.engines.buildinfo import BuildInfo
    from cgpu.engines.config import Config, Lister, Reader

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
    """The files a containerd config imports, in order: paths relative to its folder, globs expanded in
    name order (`listed`: a folder's names, sorted)."""
    import fnmatch

    imports = document.get("imports", [])
    if not isinstance(imports, list):
        config.problems.append(Problem("error", read(path)[2], "imports is not a list of paths"))
        return
    for pattern in imports[:MAX_IMPORTS]:
        if not isinstance(pattern, str):
            continue
        pattern = pattern if pattern.startswith("/") else posixpath.join(posixpath.dirname(path), pattern)
        folder, name = posixpath.split(pattern)
        if any(c in name for c in "*?["):
            yield from (posixpath.join(folder, n) for n in listed(folder) if fnmatch.fnmatchcase(n, name))
        else:
            yield pattern


def read_config(read: Reader, listdir: Lister, path: str, major: int | None) -> Config:
    """containerd's CRI plugin: `enable_cdi` (1.7: off by default; 2.x: on) and `cdi_spec_dirs`, in
    `[plugins."io.containerd.grpc.v1.cri"]` (config version 2), `[plugins.cri]` (version 1) or
    `[plugins.'io.containerd.cri.v1.runtime']` (version 3, containerd 2.x); `imports` merged over
    the main file in order (containerd `cmd/containerd/server/config`: LoadConfig, mergeConfig)."""
    from cgpu.engines.config import Config, spec_dirs_setting, table, toml_file

    config = Config()
    main = toml_file(read, path, config)
    v3 = major is not None and major >= 2
    cri = "io.containerd.cri.v1.runtime" if v3 else "io.containerd.grpc.v1.cri"
    config.file = read(path)[2]
    config.setting = f"enable_cdi = true in [plugins.{json.dumps(cri)}] of {config.file}"
    if main is None:
        if config.problems:
            config.problems.append(
                Problem("error", read(path)[2], "containerd refuses to start with a config file it cannot parse")
            )
        return config
    documents = [(path, main)]
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
        document = toml_file(read, target, config)
        if document is not None:
            documents.append((target, document))
            enqueue(target, document)
    if any(severity == "error" for severity, _, _ in config.problems):
        config.problems.append(
            Problem("error", config.file, "containerd refuses to start with a config file it cannot load")
        )
    for source, document in documents:
        for keys in (
            ("plugins", "io.containerd.cri.v1.runtime"),
            ("plugins", "io.containerd.grpc.v1.cri"),
            ("plugins", "cri"),
        ):
            if keys[1] == "io.containerd.cri.v1.runtime" and not v3:
                continue  # containerd 1.7 does not know the version 3 table
            found = table(document, *keys)
            if found is None:
                continue
            shown = read(source)[2]
            enabled = found.get("enable_cdi")
            if isinstance(enabled, bool):
                config.enabled = enabled
                config.file = shown
                config.setting = f"enable_cdi = true in [plugins.{json.dumps(keys[1])}] of {shown}"
            elif enabled is not None:
                config.problems.append(Problem("error", shown, f"enable_cdi is {enabled!r}, not true or false"))
            spec_dirs_setting(found, "cdi_spec_dirs", shown, config)
            runtime = table(found, "containerd")
            if runtime is not None and isinstance(runtime.get("default_runtime_name"), str):
                config.default_runtime, config.runtime_file = runtime["default_runtime_name"], shown
            break
    return config


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
        ((2, 2, 1), "1.1.0", "v1.1.0"),
    )
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

    def read_configuration(
        self, read: Reader, listdir: Lister, *, major: int | None, flavour: str, on_host: bool
    ) -> Config:
        from cgpu.engines.flavours import FlavourFiles

        files = FlavourFiles(flavour, read, listdir, major, FLAVOUR_CONFIGS.get(flavour, CONFIG_TOML))
        config = read_config(files.read, listdir, files.path, major)
        config.problems[:0] = files.problems
        return config


ENGINE = Containerd()
