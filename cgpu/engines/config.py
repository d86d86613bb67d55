"""What an engine's configuration says about CDI: whether it is on, and which spec dirs it reads.

Read from the files as the engine reads them (docs/cdi.md "Engines: as installed and
configured"): containerd's config.toml and its `imports`, CRI-O's crio.conf and crio.conf.d,
Docker's daemon.json, podman's containers.conf files and their .d dirs. Every file is read
through `Files` (under `--root` only the root's files, symlinks resolved inside it, a size cap,
never a FIFO), and every bad file is a problem naming it and what is wrong with it.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
from collections.abc import Callable

from cgpu.errors import CgpuValueError
from cgpu.problem import Problem, Severity

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

MAX_CONFIG_BYTES = 1 << 20  # a config file above 1 MiB is not one an engine was given
MAX_IMPORTS = 64
MAX_DROP_INS = 256


class Config:
    """The CDI part of one engine's configuration."""

    __slots__ = ("default_runtime", "enabled", "file", "problems", "runtime_file", "setting", "spec_dirs")

    def __init__(self) -> None:
        self.enabled: bool | None = None  # None: the engine's default for its version decides
        self.spec_dirs: list[str] | None = None  # None: the defaults
        self.setting = ""  # the setting and file that turn CDI on, for the message when it is off
        self.file = ""  # the file to change for it, as shown
        self.default_runtime: str | None = None  # the OCI runtime containers get unless they ask for another
        self.runtime_file = ""  # where that is set
        self.problems: list[Problem] = []


# Files: read(path) -> (text or None, why not or None, shown path); listdir(path) -> names
if TYPE_CHECKING:
    Reader = Callable[[str], tuple[str | None, str | None, str]]
    Lister = Callable[[str], list[str]]


def parse_toml(text: str) -> dict[str, Any]:
    """A TOML document (tomllib, tomli on Python 3.10): imported only when a file must be parsed."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib as toml
    else:  # the same parser, from PyPI
        import tomli as toml  # type: ignore[import-not-found,unused-ignore]
    try:
        data: dict[str, Any] = toml.loads(text)
    except RecursionError:
        raise CgpuValueError("nested too deeply") from None
    except toml.TOMLDecodeError as exc:
        raise CgpuValueError(str(exc)) from None
    return data


def _spec_dirs_setting(table: dict[str, Any], key: str, shown: str, config: Config, *, quoted: bool = False) -> None:
    """The spec dirs `key` of an engine's config table sets, if it sets them; a value that is not a
    list of paths is an error on the file `shown` (the engine refuses to start with it)."""
    if key not in table:
        return
    dirs = _string_list(table[key])
    if dirs is None:
        name = f'"{key}"' if quoted else key
        config.problems.append(Problem("error", shown, f"{name} is not a list of paths"))
    else:
        config.spec_dirs = dirs


def _string_list(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _toml_file(read: Reader, path: str, config: Config, severity: Severity = "error") -> dict[str, Any] | None:
    text, why, shown = read(path)
    if text is None:
        if why is not None:
            config.problems.append(
                Problem(severity, shown, f"cgpu could not read this engine configuration file: {why}")
            )
        return None
    try:
        document = parse_toml(text)
    except ValueError as exc:
        config.problems.append(Problem(severity, shown, f"this engine configuration file is not valid TOML: {exc}"))
        return None
    return document


def _table(document: dict[str, Any], *keys: str) -> dict[str, Any] | None:
    node: Any = document
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node if isinstance(node, dict) else None


def _imports(read: Reader, listdir: Lister, path: str, document: dict[str, Any], config: Config) -> list[str]:
    """The files a containerd config imports: paths relative to its folder, globs expanded in name order."""
    imports = document.get("imports", [])
    if not isinstance(imports, list):
        config.problems.append(Problem("error", read(path)[2], "imports is not a list of paths"))
        return []
    found = []
    for pattern in imports[:MAX_IMPORTS]:
        if not isinstance(pattern, str):
            continue
        pattern = pattern if pattern.startswith("/") else posixpath.join(posixpath.dirname(path), pattern)
        folder, name = posixpath.split(pattern)
        if any(c in name for c in "*?["):
            found += [posixpath.join(folder, n) for n in sorted(listdir(folder)) if fnmatch.fnmatchcase(n, name)]
        else:
            found.append(pattern)
    return found


def containerd(read: Reader, listdir: Lister, path: str, major: int | None) -> Config:
    """containerd's CRI plugin: `enable_cdi` (1.7: off by default; 2.x: on) and `cdi_spec_dirs`, in
    `[plugins."io.containerd.grpc.v1.cri"]` (config version 2), `[plugins.cri]` (version 1) or
    `[plugins.'io.containerd.cri.v1.runtime']` (version 3, containerd 2.x); `imports` merged over
    the main file in order (containerd `cmd/containerd/server/config`: LoadConfig, mergeConfig)."""
    config = Config()
    main = _toml_file(read, path, config)
    v3 = major is not None and major >= 2
    table = "io.containerd.cri.v1.runtime" if v3 else "io.containerd.grpc.v1.cri"
    config.file = read(path)[2]
    config.setting = f"enable_cdi = true in [plugins.{json.dumps(table)}] of {config.file}"
    if main is None:
        if config.problems:
            config.problems.append(
                Problem("error", read(path)[2], "containerd refuses to start with a config file it cannot parse")
            )
        return config
    documents = [(path, main)]
    pending = _imports(read, listdir, path, main, config)
    loaded = {path}
    while pending and len(loaded) <= MAX_IMPORTS:  # imports of imports too, each file once, in order
        target = pending.pop(0)
        if target in loaded:
            continue
        loaded.add(target)
        text, why, shown = read(target)
        if text is None and why is None:
            config.problems.append(Problem("error", shown, "this imported config file does not exist"))
            continue
        document = _toml_file(read, target, config)
        if document is not None:
            documents.append((target, document))
            pending += _imports(read, listdir, target, document, config)
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
            found = _table(document, *keys)
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
            _spec_dirs_setting(found, "cdi_spec_dirs", shown, config)
            runtime = _table(found, "containerd")
            if runtime is not None and isinstance(runtime.get("default_runtime_name"), str):
                config.default_runtime, config.runtime_file = runtime["default_runtime_name"], shown
            break
    return config


def crio(read: Reader, listdir: Lister, path: str, drop_in_dir: str) -> Config:
    """CRI-O: CDI always on; `[crio.runtime] cdi_spec_dirs` in crio.conf, then each
    crio.conf.d/*.conf in name order, a later file's value winning (CRI-O `pkg/config`)."""
    config = Config()
    files = [path] + [posixpath.join(drop_in_dir, n) for n in sorted(listdir(drop_in_dir)) if n.endswith(".conf")]
    for source in files[: MAX_DROP_INS + 1]:
        document = _toml_file(read, source, config)
        if document is None:
            continue
        runtime = _table(document, "crio", "runtime")
        if runtime is not None and isinstance(runtime.get("default_runtime"), str):
            config.default_runtime, config.runtime_file = runtime["default_runtime"], read(source)[2]
        if runtime is not None:
            _spec_dirs_setting(runtime, "cdi_spec_dirs", read(source)[2], config)
    if config.problems:
        config.problems.append(
            Problem("error", read(path)[2], "CRI-O refuses to start with a config file it cannot parse")
        )
    config.enabled = True
    return config


def podman(read: Reader, listdir: Lister, files: list[str], drop_in_dirs: list[str]) -> Config:
    """podman: CDI always on; `[engine] cdi_spec_dirs` from containers.conf files and their .d dirs,
    later ones winning (containers/common `pkg/config`)."""
    config = Config()
    ordered = list(files)
    for folder in drop_in_dirs:
        ordered += [posixpath.join(folder, n) for n in sorted(listdir(folder)) if n.endswith(".conf")][:MAX_DROP_INS]
    for source in ordered:
        document = _toml_file(read, source, config)
        if document is None:
            continue
        engine = _table(document, "engine")
        if engine is not None:
            _spec_dirs_setting(engine, "cdi_spec_dirs", read(source)[2], config)
    config.enabled = True
    return config


def docker(read: Reader, path: str) -> Config:
    """Docker Engine's daemon.json: `"features": {"cdi": …}` (off before 28.2 unless true, on from
    28.2 unless false: moby `cmd/dockerd/daemon.go`) and `"cdi-spec-dirs"`."""
    config = Config()
    text, why, shown = read(path)
    config.file = shown
    config.setting = f'"features": {{"cdi": true}} in {shown}'
    if text is None:
        if why is not None:
            config.problems.append(Problem("error", shown, f"cgpu could not read Docker's daemon configuration: {why}"))
        return config
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        config.problems.append(
            Problem("error", shown, f"this daemon.json is not valid JSON ({exc}): dockerd refuses to start with it")
        )
        return config
    if not isinstance(document, dict):
        config.problems.append(
            Problem("error", shown, "this daemon.json is not a JSON object: dockerd refuses to start")
        )
        return config
    features = document.get("features")
    if isinstance(features, dict) and "cdi" in features:
        if isinstance(features["cdi"], bool):
            config.enabled = features["cdi"]
        else:
            config.problems.append(
                Problem("error", shown, f'"features": {{"cdi": {features["cdi"]!r}}} is not a boolean')
            )
    if isinstance(document.get("default-runtime"), str):
        config.default_runtime, config.runtime_file = document["default-runtime"], shown
    _spec_dirs_setting(document, "cdi-spec-dirs", shown, config, quoted=True)
    return config


NVIDIA_RUNTIME_CONFIGS = (
    "/etc/nvidia-container-runtime/config.toml",
    "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml",  # NVIDIA's GPU Operator
)
NVIDIA_MODES = ("auto", "legacy", "cdi", "csv", "jit-cdi")


def nvidia_runtime(read: Reader, runtime: str, set_in: str) -> tuple[dict[str, Any], list[Problem]]:
    """NVIDIA's runtime as the engine's default runtime: its mode (`[nvidia-container-runtime] mode`,
    default "auto"; the GPU Operator's `nvidia-cdi` and `nvidia-legacy` runtimes fix it), what a
    container must ask for and which driver capability each API needs (nvidia-container-toolkit
    `cmd/nvidia-container-runtime/README.md`: NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES,
    default `utility,compute`; `compute` for CUDA and OpenCL, `graphics` for Vulkan)."""
    problems: list[Problem] = []
    mode: str | None = {"nvidia-cdi": "cdi", "nvidia-legacy": "legacy"}.get(runtime)
    mode_from: str | None = f"the runtime's name {runtime}" if mode else None
    if mode is None:
        for path in NVIDIA_RUNTIME_CONFIGS:
            text, why, shown = read(path)
            if text is None and why is None:
                continue
            mode_from = shown
            if text is None:
                problems.append(Problem("warning", shown, f"cgpu could not read NVIDIA's runtime configuration: {why}"))
                break
            try:
                document = parse_toml(text)
            except ValueError as exc:
                problems.append(Problem("warning", shown, f"NVIDIA's runtime configuration is not valid TOML: {exc}"))
                break
            section = _table(document, "nvidia-container-runtime")
            value = section.get("mode", "auto") if section is not None else "auto"
            if isinstance(value, str) and value in NVIDIA_MODES:
                mode = value
            else:
                problems.append(
                    Problem("warning", shown, f"[nvidia-container-runtime] mode {value!r} is not one cgpu knows")
                )
            break
        else:
            mode, mode_from = "auto", None  # no configuration file: the runtime's default
    facts = {
        "runtime": runtime,
        "configured_in": set_in,
        "mode": mode,
        "mode_from": mode_from,
        "requires_env": "NVIDIA_VISIBLE_DEVICES",
        "default_capabilities": ["compute", "utility"],
        "capabilities": {"cuda": "compute", "opencl": "compute", "vulkan": "graphics"},
    }
    return facts, problems
