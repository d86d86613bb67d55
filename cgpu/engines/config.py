"""What an engine's configuration says about CDI (`Config`): whether it is on, and which spec dirs it
reads; the readers the engines share (TOML files, their tables, drop-in dirs) and NVIDIA's runtime
configuration, which any engine may name as its default runtime.

Each engine reads its own files as it reads them (docs/cdi.md "Engines: as installed and
configured"), in its module: containerd's config.toml and its `imports`, CRI-O's crio.conf and
crio.conf.d, Docker's daemon.json, podman's containers.conf files and their .d dirs. Every file is
read through `Files` (under `--root` only the root's files, symlinks resolved inside it, a size
cap, never a FIFO), and every bad file is a problem naming it and what is wrong with it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable

from cgpu.errors import CgpuValueError
from cgpu.problem import Problem, Severity

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

MAX_CONFIG_BYTES = 1 << 20  # a config file above 1 MiB is not one an engine was given
MAX_DROP_INS = 256  # the most files cgpu reads of one drop-in dir


class Config:
    """The CDI part of one engine's configuration."""

    __slots__ = (
        "default_runtime",
        "defaulted",
        "enabled",
        "file",
        "files",
        "problems",
        "runtime_file",
        "setting",
        "spec_dirs",
    )

    def __init__(self) -> None:
        self.enabled: bool | None = None  # None: the engine's default for its version decides
        self.spec_dirs: list[str] | None = None  # None: the defaults
        self.setting = ""  # the setting and file that turn CDI on, for the message when it is off
        self.file = ""  # the file to change for it, as shown
        self.default_runtime: str | None = None  # the OCI runtime containers get unless they ask for another
        self.runtime_file = ""  # where that is set
        self.problems: list[Problem] = []
        self.files: list[str] = []  # the configuration files the engine reads, as shown, in its order
        self.defaulted: list[str] = []  # its CDI settings no file sets ("enable_cdi"): the engine's defaults


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


def spec_dirs_setting(table: dict[str, Any], key: str, shown: str, config: Config, *, quoted: bool = False) -> None:
    """The spec dirs `key` of an engine's config table sets, if it sets them; a value that is not a
    list of paths is an error on the file `shown` (the engine refuses to start with it)."""
    if key not in table:
        return
    dirs = string_list(table[key])
    if dirs is None:
        name = f'"{key}"' if quoted else key
        config.problems.append(Problem("error", shown, f"{name} is not a list of paths"))
    else:
        config.spec_dirs = dirs


def string_list(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def toml_file(read: Reader, path: str, config: Config, severity: Severity = "error") -> dict[str, Any] | None:
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


def table(document: dict[str, Any], *keys: str) -> dict[str, Any] | None:
    node: Any = document
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node if isinstance(node, dict) else None


def drop_ins(listdir: Lister, folder: str) -> list[str]:
    """The *.conf files of a drop-in dir, in name order (the order the engines apply them)."""
    return [posixpath.join(folder, name) for name in sorted(listdir(folder)) if name.endswith(".conf")]


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
            section = table(document, "nvidia-container-runtime")
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


class ReadOnce:
    """A file an engine's reader has read already, given to `toml_file` as its `read`."""

    __slots__ = ("shown", "text", "why")

    def __init__(self, text: str | None, why: str | None, shown: str) -> None:
        self.text, self.why, self.shown = text, why, shown

    def __call__(self, path: str) -> tuple[str | None, str | None, str]:
        return self.text, self.why, self.shown
