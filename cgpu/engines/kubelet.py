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
# containerd's socket unless their configuration says `container-runtime-endpoint` or, for k3s, `docker` (its
# embedded cri-dockerd, which wins over an endpoint) (k3s-io/k3s pkg/agent/config/config.go; rancher/rke2 shares
# the code). Their configuration is the CLI flags' names in config.yaml and config.yaml.d/*.yaml|*.yml, and the
# flags on their unit's command line, which override the files' values (pkg/configfilearg/parser.go Parse).
EMBEDDING = (
    (
        "k3s",
        ("/usr/local/bin/k3s",),
        "/etc/rancher/k3s/config.yaml",
        ("k3s.service", "k3s-agent.service"),
        "unix:///run/k3s/cri-dockerd/cri-dockerd.sock",
    ),
    (
        "rke2",
        ("/var/lib/rancher/rke2/bin/containerd", "/usr/local/bin/rke2", "/usr/bin/rke2"),
        "/etc/rancher/rke2/config.yaml",
        ("rke2-server.service", "rke2-agent.service"),
        None,  # RKE2 drops k3s's docker flag
    ),
)
EMBEDDED_CONTAINERD = "unix:///run/k3s/containerd/containerd.sock"
_YAML_KEY = re.compile(r"^(container-runtime-endpoint|docker):[ \t]*[\"']?([^\s\"'#]*)", re.MULTILINE)
# k0s runs the kubelet itself and writes its config (containerRuntimeEndpoint) to /run/k0s/kubelet/config.yaml at
# start; its own containerd's socket unless the worker's `--cri-socket=remote:<endpoint>` names another
# (k0sproject/k0s pkg/component/worker/kubelet.go, pkg/config/cli.go; k0s's runtime docs)
K0S_BINARIES = ("/usr/local/bin/k0s", "/var/lib/k0s/bin/containerd")
K0S_KUBELET_CONFIG = "/run/k0s/kubelet/config.yaml"
K0S_UNITS = ("k0sworker.service", "k0scontroller.service")
K0S_CONTAINERD = "unix:///run/k0s/containerd.sock"
# MicroK8s's kubelite reads the kubelet's flags from the snap's args/kubelet, one per line, with ${SNAP_COMMON}
# in them (canonical/microk8s microk8s-resources/default-args/kubelet)
MICROK8S_BINARY = "/snap/microk8s/current/bin/containerd"
MICROK8S_KUBELET_ARGS = "/var/snap/microk8s/current/args/kubelet"
MICROK8S_CONTAINERD = "unix:///var/snap/microk8s/common/run/containerd.sock"
_SNAP_VARIABLES = {
    "SNAP": "/snap/microk8s/current",
    "SNAP_DATA": "/var/snap/microk8s/current",
    "SNAP_COMMON": "/var/snap/microk8s/common",
}


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
    """The runtime the kubelet inside k3s, RKE2, k0s or MicroK8s is given, where one is installed; None else."""
    for name, binaries, config, units, docker in EMBEDDING:
        if any(files.is_file(binary) for binary in binaries):
            return _rancher_runtime(files, name, config, units, docker)
    if any(files.is_file(binary) for binary in K0S_BINARIES):
        return _k0s_runtime(files)
    text, _, shown = files.read(MICROK8S_KUBELET_ARGS)
    if text is not None or files.is_file(MICROK8S_BINARY):
        args = " ".join((text or "").splitlines())
        for key, value in _SNAP_VARIABLES.items():
            args = args.replace("${" + key + "}", value)
        endpoint = _flags(args).get("--container-runtime-endpoint")
        if endpoint:
            return _runtime(_with_scheme(endpoint), shown)
        return _runtime(MICROK8S_CONTAINERD, "MicroK8s's own containerd (its default)")
    return None


def _rancher_runtime(
    files: NodeFiles, name: str, config: str, units: tuple[str, ...], docker: str | None
) -> dict[str, str]:
    """k3s's or RKE2's runtime: their config files in order (a later file, or a later line, wins), then the
    flags on their unit's command line."""
    command, unit_shown = _service_command(files, units)
    flags = _flags(command)
    config = flags.get("--config") or config
    endpoint, docker_on, source, docker_source = None, False, "", ""
    folder = config + ".d"
    names = sorted(n for n in files.listdir(folder)[:MAX_DROP_INS] if n.lower().endswith((".yaml", ".yml")))
    for path in [config, *(f"{folder}/{n}" for n in names)]:
        text, _, shown = files.read(path)
        for key, value in _YAML_KEY.findall(text or ""):
            if key == "container-runtime-endpoint" and value:
                endpoint, source = value, shown
            elif key == "docker":
                docker_on, docker_source = value.lower() == "true", shown
    words = _words(command)
    if "--container-runtime-endpoint" in flags:
        endpoint, source = flags["--container-runtime-endpoint"], unit_shown
    if "--docker" in words or flags.get("--docker", "").lower() == "true":
        docker_on, docker_source = True, unit_shown
    elif flags.get("--docker", "").lower() == "false":
        docker_on = False
    if docker is not None and docker_on:  # k3s: docker mode wins over an endpoint
        return _runtime(docker, docker_source)
    if endpoint:
        return _runtime(_with_scheme(endpoint), source)
    return _runtime(EMBEDDED_CONTAINERD, f"{name}'s own containerd (its default)")


def _k0s_runtime(files: NodeFiles) -> dict[str, str]:
    """k0s's runtime: the kubelet config it wrote at its last start where the root has it, else the worker's
    --cri-socket, else its own containerd."""
    text, _, shown = files.read(K0S_KUBELET_CONFIG)
    match = _YAML_ENDPOINT.search(text or "") or _JSON_ENDPOINT.search(text or "")
    if match:
        return _runtime(match.group(1), shown)
    command, unit_shown = _service_command(files, K0S_UNITS)
    socket = _flags(command).get("--cri-socket", "")
    if socket.startswith("remote:"):
        return _runtime(_with_scheme(socket.removeprefix("remote:")), unit_shown)
    return _runtime(K0S_CONTAINERD, "k0s's own containerd (its default)")


def _service_command(files: NodeFiles, units: tuple[str, ...]) -> tuple[str | None, str]:
    """The ExecStart of the first of these units the node has (its drop-ins applied), and the file that gave it."""
    for unit in units:
        paths = _unit_files(files, unit)
        if not paths or not paths[0].endswith(f"/{unit}"):
            continue  # drop-ins without their unit: systemd has no such service
        command, source = None, ""
        for path in paths:
            text, _, shown = files.read(path)
            for key, value in _unit_settings(text or ""):
                if key == "ExecStart":
                    command, source = (value or None), shown
        return command, source
    return None, ""


def _with_scheme(endpoint: str) -> str:
    return endpoint if "://" in endpoint else f"unix://{endpoint}"


def _words(command: str | None) -> list[str]:
    if not command:
        return []
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


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


def _unit_files(files: NodeFiles, unit: str = "kubelet.service") -> list[str]:
    """The unit from the first unit dir that has it, then its drop-ins ordered by name (systemd's order)."""
    paths = []
    for folder in UNIT_DIRS:
        if files.is_file(f"{folder}/{unit}"):
            paths.append(f"{folder}/{unit}")
            break
    drop_ins: dict[str, str] = {}
    for folder in UNIT_DIRS:
        for name in files.listdir(f"{folder}/{unit}.d")[:MAX_DROP_INS]:
            if name.endswith(".conf"):
                drop_ins.setdefault(name, f"{folder}/{unit}.d/{name}")
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
