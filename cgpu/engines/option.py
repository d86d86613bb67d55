"""`--engine`, parsed in one place for the CLI, the library and `--verify`: whose CDI rules judge
the specs. And the host's engine with its version, asked once and remembered for a few minutes.

Kept light (no `cgpu.engines.client`, which imports ~15 ms of modules): the static CDI path runs on
every call of a node agent, and `auto` is its default.
"""

from __future__ import annotations

import json
import os
import time

from cgpu.errors import CgpuTypeError, CgpuValueError
from cgpu.options import DEFAULT_ROOT

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

    from cgpu.engines.installed import InstalledEngine

AUTO, NONE, NAMED = "auto", "none", "named"
# `podman version` costs about 100 ms: its answer is reused while the engine binaries are the
# same files (path, size, mtime) and for at most this long (a Docker daemon can be upgraded or
# stopped while its CLI stays the same).
HOST_ENGINE_SECONDS = 300.0
NO_ENGINE_SECONDS = 30.0  # when none answered: soon asked again (it may have been busy), not on every call
HOST_ENGINE_FILE = "host-engine.json"
MAX_REMEMBERED_BYTES = 64 * 1024  # a few engines and failure messages; anything larger is not ours


class EngineOption:
    """`auto` (the host's engine), `none` (no engine limits) or `named`: NAME@VERSION, or a bare
    NAME for that engine as installed here (its version asked like `auto` does)."""

    __slots__ = ("mode", "name", "version")

    def __init__(self, mode: str, name: str | None = None, version: str | None = None) -> None:
        self.mode = mode
        self.name = name
        self.version = version

    @property
    def live_engine(self) -> str | None:
        """The engine a live run (`--verify`) must use: the named one, else whichever the host has."""
        return self.name if self.mode == NAMED else None

    def __str__(self) -> str:
        if self.mode != NAMED:
            return self.mode
        return f"{self.name}@{self.version}" if self.version else str(self.name)

    def __repr__(self) -> str:
        return f"EngineOption({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EngineOption) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


def parse_engine(value: str | EngineOption | None) -> EngineOption:
    """`None`/"" and "auto" -> the host's engine; "none"; "podman@4.3.1" (name and version checked);
    "podman" (the host's podman). Raises ValueError with the user's message for anything else."""
    if isinstance(value, EngineOption):
        return value
    if value is not None and not isinstance(value, str):
        raise CgpuTypeError(f"engine is a string such as 'podman@4.3.1', 'auto' or 'none', not {type(value).__name__}")
    text = (value or "").strip()
    if text.lower() in ("", AUTO):
        return EngineOption(AUTO)
    if text.lower() == NONE:
        return EngineOption(NONE)
    from cgpu.engines.registry import REGISTRY, max_cdi_version

    name, sep, version = text.partition("@")
    name, version = name.strip().lower(), version.strip()
    found = REGISTRY.find(name) if name else None
    name = found.name if found is not None else name
    if not sep and found is not None:
        return EngineOption(NAMED, name)
    if not sep or not name or not version:
        *first, last = [f"{engine.name}@{engine.example}" for engine in REGISTRY.engines()]
        raise CgpuValueError(
            f"{value!r} is not an engine: expected NAME@VERSION such as {', '.join(first)} or {last}, "
            f"a bare {', '.join(REGISTRY.names)} (the one installed here), or auto, or none"
        )
    max_cdi_version(name, version)  # raises for an engine or version format cgpu has no figure for
    return EngineOption(NAMED, name, version)


# What else decides which engine answers and what it reads: where the clients connect, and the
# configuration files of podman and Docker (a changed one is asked again, not remembered).
ENGINE_ENV = ("DOCKER_HOST", "DOCKER_CONTEXT", "CONTAINER_HOST", "CONTAINER_CONNECTION", "CONTAINERS_CONF")
ENGINE_CONFIGS = (
    "/etc/docker/daemon.json",
    "/etc/containers/containers.conf",
    "/usr/share/containers/containers.conf",
    "~/.config/containers/containers.conf",
    "~/.docker/config.json",
)


def _stat_identity(path: str) -> list[object] | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return [info.st_size, info.st_mtime_ns, info.st_ino]


def host_engines(*, timeout: float, cache_dir: str | None = None) -> tuple[list[tuple[str, str]], list[str]]:
    """(name, version) of each engine on this host that answers, podman first (Docker only when its
    daemon answers); and why an engine that is installed did not answer. Remembered while the
    binaries, their configuration files and DOCKER_HOST / CONTAINER_HOST are the same."""
    found, failures, _ = host_engine_details(timeout=timeout, cache_dir=cache_dir)
    return found, failures


def host_engine_details(
    *, timeout: float, cache_dir: str | None = None
) -> tuple[list[tuple[str, str]], list[str], dict[str, Any]]:
    """`host_engines`, and what the engines said beside their versions: {"docker_cdi_spec_dirs": the
    Docker daemon's CDISpecDirs (empty: CDI off), or absent where it did not say}."""
    import shutil  # here, not on every probe's path: its import (bz2, lzma, zlib with it) is 7.5M instructions

    identity: list[list[object]] = []
    for name in ("podman", "docker"):
        path = shutil.which(name)
        if path is None:
            continue
        info = _stat_identity(path)
        if info is None:
            continue
        identity.append([name, path, *info])
    if not identity:
        return [], [], {}
    identity.append(["env", *(os.environ.get(key) for key in ENGINE_ENV)])
    for config in ENGINE_CONFIGS:
        identity.append([config, _stat_identity(os.path.expanduser(config))])
    if cache_dir is None:
        from cgpu.node.files import default_cache_dir_text

        cache_dir = default_cache_dir_text()
    cache_file = os.path.join(cache_dir, HOST_ENGINE_FILE)
    remembered = _read_remembered(cache_file, identity)
    if remembered is not None:
        return remembered
    from cgpu.engines.client import detect_engines

    engines, failures = detect_engines(timeout=timeout)
    found = [(e.name, e.version) for e in engines]
    details: dict[str, Any] = {}
    for engine in engines:
        if engine.name == "docker" and engine.cdi_spec_dirs is not None:
            details["docker_cdi_spec_dirs"] = list(engine.cdi_spec_dirs)
    _remember(cache_file, identity, found, failures, details)
    return found, failures, details


ENGINES_FILE = "engines.json"
MAX_ENGINES_BYTES = 1 << 20


def _rules_identity() -> list[object]:
    """cgpu's version and the newest change among the engine modules' files: what learning depends on."""
    from cgpu.version import __version__

    package = os.path.dirname(os.path.abspath(__file__))
    with os.scandir(package) as entries:
        newest = max((e.stat().st_mtime_ns for e in entries if e.name.endswith(".py")), default=0)
    return [__version__, newest]


def learn_engines(
    root: str | None, *, timeout: float, cache_dir: str | None = None
) -> tuple[list[InstalledEngine], dict[str, Any]]:
    """Every engine installed under `root` (None: this host), learned from its files
    (`cgpu.engines.installed`), and the node's facts (the kubelet's runtime). Remembered by the identity
    (size, mtime, inode, mode) of every file consulted, absent ones included, and the environment:
    a repeat call stats those files and reads one small file."""
    from cgpu.engines.registry import REGISTRY
    from cgpu.node.files import default_cache_dir_text, private_directory, read_private, write_private

    where = os.path.abspath(root or DEFAULT_ROOT)
    key = {
        "root": where,
        "engines": list(REGISTRY.names),  # an engine added since is looked for
        "env": [os.environ.get(k) for k in (*ENGINE_ENV, "XDG_CONFIG_HOME", "HOME")],
        "path": None if root else os.get_exec_path(),
        "rules": _rules_identity(),  # another cgpu (an upgrade, an edit) learns again
    }
    cache_file = os.path.join(cache_dir or default_cache_dir_text(), ENGINES_FILE)
    from cgpu.engines.installed import InstalledEngine, identity_unchanged, learn

    try:
        private_directory(os.path.dirname(cache_file), create=False)
        data = json.loads(read_private(cache_file, limit=MAX_ENGINES_BYTES))
        if data["key"] == key and identity_unchanged(where, data["node"]["identity"]):
            return [InstalledEngine.from_json(entry) for entry in data["engines"]], data["node"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        pass  # absent, unreadable, unsafe or stale: learn again
    engines, node = learn(where, run_allowed=root is None, timeout=timeout)
    if node.get("cut_short"):
        return engines, node  # learnt in a hurry: not kept
    try:
        facts = [engine.as_json() for engine in engines]
        write_private(cache_file, json.dumps({"key": key, "engines": facts, "node": node}).encode())
    except (OSError, TypeError, ValueError):
        pass  # not kept: learnt again next time
    return engines, node


def _read_remembered(
    cache_file: str, identity: list[list[object]]
) -> tuple[list[tuple[str, str]], list[str], dict[str, Any]] | None:
    """The remembered answer, only from a private cache dir and a file of this user's that no one
    else can write (another user must not choose the engine that judges the specs)."""
    from cgpu.node.files import private_directory, read_private

    try:
        private_directory(os.path.dirname(cache_file), create=False)
        data = json.loads(read_private(cache_file, limit=MAX_REMEMBERED_BYTES))
        found = [(str(name), str(version)) for name, version in data["found"]]
        age = time.time() - float(data["at"])
        if data["identity"] != identity or not 0 <= age < (HOST_ENGINE_SECONDS if found else NO_ENGINE_SECONDS):
            return None
        failures = [str(f) for f in data["failures"]]
        details = data.get("details", {})
        dirs = details.get("docker_cdi_spec_dirs") if isinstance(details, dict) else None
        details = {"docker_cdi_spec_dirs": [str(d) for d in dirs]} if isinstance(dirs, list) else {}
    except (OSError, ValueError, KeyError, TypeError, RecursionError, AttributeError):
        return None  # absent, unreadable, unsafe or not ours: ask the engine
    return found, failures, details


def _remember(
    cache_file: str,
    identity: list[list[object]],
    found: list[tuple[str, str]],
    failures: list[str],
    details: dict[str, Any],
) -> None:
    """Store the answer atomically in the private cache dir; any failure only means asking again."""
    from cgpu.node.files import write_private

    data = {
        "identity": identity,
        "at": time.time(),
        "found": [list(f) for f in found],
        "failures": failures,
        "details": details,
    }
    try:
        write_private(cache_file, json.dumps(data).encode())  # readers see the old file or the new one
    except (OSError, TypeError, ValueError):
        pass
