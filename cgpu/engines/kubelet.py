"""Who runs a Kubernetes node's containers: the CRI endpoint its kubelet was started with, read as the kubelet
itself decides it.

The kubelet's command line is what systemd assembles from its unit and drop-ins (kubeadm's `10-kubeadm.conf`:
`ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS
$KUBELET_EXTRA_ARGS`, the variables from `Environment=` lines and from `/var/lib/kubelet/kubeadm-flags.env` and
`/etc/default/kubelet`). A `--container-runtime-endpoint` flag there overrides `containerRuntimeEndpoint` in the
`--config` file ("command line flags which target the same value as a config file will override that value":
kubernetes.io, Set Kubelet Parameters Via A Configuration File); with neither, the kubelet uses its default,
`unix:///run/containerd/containerd.sock` (kubernetes `pkg/kubelet/apis/config/v1beta1/defaults.go`). Sources and
the order are in docs/cdi.md, "Who runs the containers".
"""

from __future__ import annotations

import re
import shlex
from typing import Protocol

KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"  # kubeadm's --config
KUBEADM_FLAGS = "/var/lib/kubelet/kubeadm-flags.env"  # KUBELET_KUBEADM_ARGS, written by kubeadm init/join
EXTRA_ARGS_FILES = ("/etc/default/kubelet", "/etc/sysconfig/kubelet")  # KUBELET_EXTRA_ARGS (deb, rpm)
DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
# systemd's unit search path, highest priority first; a drop-in of one name in an earlier dir masks a later one
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system")
KUBELET_BINARIES = ("/usr/bin/kubelet", "/usr/local/bin/kubelet")
MAX_DROP_INS = 64  # more kubelet drop-ins than any real node has; the rest are not read (and said so)

_YAML_ENDPOINT = re.compile(r"^containerRuntimeEndpoint:[ \t]*[\"']?([^\s\"'#]+)", re.MULTILINE)
_JSON_ENDPOINT = re.compile(r"\"containerRuntimeEndpoint\"\s*:\s*\"([^\"]+)\"")
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
# k3s and RKE2 run the kubelet inside their own process and tell it the runtime themselves: their own
# containerd's socket unless their configuration (the CLI flags' names, in config.yaml and config.yaml.d/*.yaml)
# says `container-runtime-endpoint` or, for k3s, `docker` (its embedded cri-dockerd) (k3s-io/k3s
# pkg/agent/config/config.go, pkg/configfilearg; rancher/rke2 shares the code).
EMBEDDING = (
    ("k3s", "/usr/local/bin/k3s", "/etc/rancher/k3s/config.yaml", "unix:///run/k3s/cri-dockerd/cri-dockerd.sock"),
    ("rke2", "/var/lib/rancher/rke2/bin/containerd", "/etc/rancher/rke2/config.yaml", None),
)
EMBEDDED_CONTAINERD = "unix:///run/k3s/containerd/containerd.sock"
_YAML_KEY = re.compile(r"^(container-runtime-endpoint|docker):[ \t]*[\"']?([^\s\"'#]*)", re.MULTILINE)


class NodeFiles(Protocol):
    """What this module reads a node through (cgpu.engines.installed.Files)."""

    def read(self, path: str, limit: int = ...) -> tuple[str | None, str | None, str]: ...

    def listdir(self, path: str) -> list[str]: ...

    def is_file(self, path: str) -> str | None: ...


def kubelet_runtime(files: NodeFiles) -> dict[str, str] | None:
    """The engine the kubelet runs pods with: {"engine", "endpoint", "source"}; None where no kubelet is installed.

    `engine` is "" for a socket cgpu cannot map to an engine; `source` names the file that decided, or the
    kubelet's default."""
    command, unit_files = _command_line(files)
    if command is None:
        embedded = _embedded_kubelet(files)
        if embedded is not None:
            return embedded
    flags = _flags(command)
    endpoint = flags.get("--container-runtime-endpoint")
    if endpoint:
        return _runtime(endpoint, unit_files.get("--container-runtime-endpoint", "the kubelet's command line"))
    config = flags.get("--config", KUBELET_CONFIG)
    text, _, shown = files.read(config)
    if text is not None:
        match = _YAML_ENDPOINT.search(text) or _JSON_ENDPOINT.search(text)
        if match:
            return _runtime(match.group(1), shown)
    installed = command is not None or text is not None or any(files.is_file(b) for b in KUBELET_BINARIES)
    if not installed:
        return None
    return _runtime(DEFAULT_ENDPOINT, "the kubelet's default (no flag or config file names a runtime)")


def _embedded_kubelet(files: NodeFiles) -> dict[str, str] | None:
    """The runtime k3s's or RKE2's own kubelet is given, where one of them is installed; None else."""
    for name, binary, config, docker in EMBEDDING:
        if not files.is_file(binary):
            continue
        endpoint, source = EMBEDDED_CONTAINERD, f"{name}'s own containerd (its default)"
        folder = config + ".d"
        for path in [config, *(f"{folder}/{n}" for n in files.listdir(folder)[:MAX_DROP_INS] if n.endswith(".yaml"))]:
            text, _, shown = files.read(path)
            for key, value in _YAML_KEY.findall(text or ""):  # a later file, or a later line, wins
                if key == "container-runtime-endpoint" and value:
                    endpoint, source = value if "://" in value else f"unix://{value}", shown
                elif key == "docker" and docker is not None and value.lower() == "true":
                    endpoint, source = docker, shown
        return _runtime(endpoint, source)
    return None


def _runtime(endpoint: str, source: str) -> dict[str, str]:
    """The engine behind a CRI endpoint, by the socket names each engine module gives (k3s and RKE2 name
    their own containerd's socket containerd.sock too); "" for a socket no engine names."""
    from cgpu.engines.registry import REGISTRY

    for engine in REGISTRY.engines():
        if any(endpoint.rstrip("/").endswith(socket) for socket in engine.cri_sockets):
            return {"engine": engine.name, "endpoint": endpoint, "source": source}
    return {"engine": "", "endpoint": endpoint, "source": source}


def _command_line(files: NodeFiles) -> tuple[str | None, dict[str, str]]:
    """The kubelet's ExecStart with its variables expanded, as systemd would start it, and which file gave each
    variable's flags (for the report). None where the node has no kubelet unit and no kubeadm flags file."""
    environment: dict[str, str] = {}
    given_by: dict[str, str] = {}
    exec_start: str | None = None
    exec_source = ""
    env_files: list[str] = []
    for path in _unit_files(files):
        text, _, shown = files.read(path)
        if text is None:
            continue
        for key, value in _unit_settings(text):
            if key == "Environment":
                for name, setting in _assignments(value):
                    environment[name], given_by[name] = setting, shown
            elif key == "EnvironmentFile":
                env_files.append(value.removeprefix("-"))
            elif key == "ExecStart":
                exec_start, exec_source = (value or None), shown  # an empty ExecStart= resets the list
    if exec_start is None:
        if files.read(KUBEADM_FLAGS)[0] is None:
            return None, {}
        # No unit under the root but kubeadm's flags: the command line kubeadm's drop-in would give
        exec_start = "kubelet $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS"
        env_files = [KUBEADM_FLAGS, *EXTRA_ARGS_FILES]
        exec_source = "kubeadm's kubelet drop-in"
    for path in env_files:  # systemd: variables from EnvironmentFile= override Environment=
        text, _, shown = files.read(path)
        for name, setting in _environment_file(text or ""):
            environment[name], given_by[name] = setting, shown
    used = [m.group(1) or m.group(2) for m in _VARIABLE.finditer(exec_start)]
    command = _VARIABLE.sub(lambda m: environment.get(m.group(1) or m.group(2), ""), exec_start)
    sources = {flag: exec_source for flag in _flags(exec_start)}
    for name in used:
        for flag in _flags(environment.get(name, "")):
            sources[flag] = given_by[name]
    return command, sources


def _unit_files(files: NodeFiles) -> list[str]:
    """kubelet.service from the first unit dir that has it, then its drop-ins ordered by name (systemd's order)."""
    paths = []
    for folder in UNIT_DIRS:
        if files.is_file(f"{folder}/kubelet.service"):
            paths.append(f"{folder}/kubelet.service")
            break
    drop_ins: dict[str, str] = {}
    for folder in UNIT_DIRS:
        for name in files.listdir(f"{folder}/kubelet.service.d")[:MAX_DROP_INS]:
            if name.endswith(".conf"):
                drop_ins.setdefault(name, f"{folder}/kubelet.service.d/{name}")
    return paths + [drop_ins[name] for name in sorted(drop_ins)]


def _unit_settings(text: str) -> list[tuple[str, str]]:
    """(key, value) of a unit file's [Service] lines, continuation lines joined."""
    settings = []
    section = ""
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            settings.append((key.strip(), value.strip()))
    return settings


def _assignments(text: str) -> list[tuple[str, str]]:
    """NAME=value pairs of an Environment= value or an environment file's line, quotes removed."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return []
    return [tuple(w.split("=", 1)) for w in words if "=" in w and w.split("=", 1)[0].isidentifier()]  # type: ignore[misc]


def _environment_file(text: str) -> list[tuple[str, str]]:
    """NAME=value lines of an EnvironmentFile: the value is the rest of the line, one pair of quotes removed
    (systemd reads `KUBELET_EXTRA_ARGS=--a x --b y` whole, spaces and all)."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        name, equals, value = line.partition("=")
        if not equals or line.startswith(("#", ";")) or not name.strip().isidentifier():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        found.append((name.strip(), value))
    return found


def _flags(command: str | None) -> dict[str, str]:
    """--name=value and --name value flags of a command line; a later one wins, as the kubelet's pflag does."""
    if not command:
        return {}
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    found: dict[str, str] = {}
    for index, word in enumerate(words):
        if not word.startswith("--"):
            continue
        if "=" in word:
            name, value = word.split("=", 1)
        elif index + 1 < len(words) and not words[index + 1].startswith("-"):
            name, value = word, words[index + 1]
        else:
            continue
        found[name] = value
    return found
