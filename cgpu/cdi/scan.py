"""Discovery of spec files and the device table an engine builds from them
(pkg/cdi/spec-dirs.go `scanSpecDirs`, pkg/cdi/cache.go `refresh`).

What cgpu decided where the library's behaviour is an accident rather than a rule:
- A spec dir that is itself a symlink is skipped with a warning, as filepath.Walk in every
  released library (<= 1.1.0) skips it; Docker resolves such links itself and would read it.
  Symlinked spec *files* are followed, as the library does.
- A name defined twice in one dir is removed even if a later dir also defines it: the
  library deletes conflicting names after reading every dir (reference/cdi.md §3.1). We
  mimic that and say so on the later file.
- An unreadable dir, which the library skips silently, is a warning here: an engine running
  as root may see specs there that cgpu cannot.
- A spec path that is a FIFO, socket or device is reported, never opened (the library would
  block on a FIFO).
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections import OrderedDict
from collections.abc import Sequence

from cgpu.cdi import spec_cache, versions
from cgpu.cdi.model import ResolvedDevice, ScanResult, Spec
from cgpu.cdi.names import go_quote
from cgpu.cdi.parse import MAX_SPEC_BYTES, SpecError, parse_spec
from cgpu.files import open_regular

DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
SPEC_EXTENSIONS = (".json", ".yaml")  # exactly these, case-sensitive: not .yml, not .YAML

# Parsed files by path, valid while (size, mtime, inode, ctime) are unchanged: a second scan
# of unchanged specs re-reads only directory listings and stat results. Behind it, the disk
# cache (spec_cache) serves a new process.
PARSE_CACHE_SIZE = 256
_parse_cache: OrderedDict[str, tuple[tuple[int, int, int, int], Spec | SpecError]] = OrderedDict()


def clear_parse_cache() -> None:
    _parse_cache.clear()


def _read_spec(path: str, info: os.stat_result, priority: int) -> Spec:
    """Parse one spec file (through the cache); raises SpecError."""
    key = (info.st_size, info.st_mtime_ns, info.st_ino, info.st_ctime_ns)
    cached = _parse_cache.get(path)
    if cached is not None and cached[0] == key:
        _parse_cache.move_to_end(path)
        result = cached[1]
    elif info.st_size > MAX_SPEC_BYTES:
        raise SpecError(
            path,
            f"the file is {info.st_size:,} bytes; cgpu reads spec files up to {MAX_SPEC_BYTES // (1024 * 1024)} MiB",
            by_library=False,
        )
    else:
        result = spec_cache.load(path, info, priority) or _parse_file(path, info, priority)
        _parse_cache[path] = (key, result)
        if len(_parse_cache) > PARSE_CACHE_SIZE:
            _parse_cache.popitem(last=False)
    if isinstance(result, SpecError):
        raise result
    return result if result.priority == priority else dataclasses.replace(result, priority=priority)


def _parse_file(path: str, info: os.stat_result, priority: int) -> Spec | SpecError:
    """Read and parse one file, and keep the result on disk for the next process."""
    try:
        with open_regular(path) as handle:  # swapped for a FIFO since the scan looked: refuse, don't hang
            data = handle.read(MAX_SPEC_BYTES + 1)
            read_info = os.fstat(handle.fileno())
    except OSError as exc:
        raise SpecError(path, exc.strerror or str(exc), by_library=False) from None
    try:
        result: Spec | SpecError = parse_spec(data, path=path, priority=priority)
    except SpecError as exc:
        result = exc
    spec_cache.store(path, info, read_info, result)
    return result


def _spec_files(directory: str, problems: list[tuple[str, str, str]]) -> list[tuple[str, os.stat_result]]:
    """The spec files of one dir in name order, each with its (followed) stat result."""
    try:
        dir_info = os.lstat(directory)
    except FileNotFoundError:
        return []  # a missing dir is normal (/var/run/cdi often is)
    except OSError as exc:
        problems.append(("warning", directory, f"cannot read this spec dir: {exc.strerror or exc}"))
        return []
    if stat.S_ISLNK(dir_info.st_mode):
        problems.append(
            (
                "warning",
                directory,
                (
                    f"this spec dir is a symlink (to {os.path.realpath(directory)}): engines whose CDI library "
                    "is <= 1.1.0 (podman, containerd, CRI-O) do not read a symlinked spec dir, so cgpu skips it "
                    "too; Docker resolves the link and would read it. Point the engine at the real dir"
                ),
            )
        )
        return []
    if not stat.S_ISDIR(dir_info.st_mode):
        problems.append(("warning", directory, "this spec dir is not a directory; skipped"))
        return []
    try:
        entries = sorted(os.listdir(directory))
    except OSError as exc:
        problems.append(
            (
                "warning",
                directory,
                (
                    f"cannot list this spec dir ({exc.strerror or exc}); engines running as root may read "
                    "specs here that cgpu cannot see"
                ),
            )
        )
        return []
    files = []
    for name in entries:
        if not name.endswith(SPEC_EXTENSIONS):
            continue
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode):
                continue  # subdirectories are skipped, even if named *.yaml
            if stat.S_ISLNK(info.st_mode):
                info = os.stat(path)
        except FileNotFoundError:
            problems.append(
                ("error", path, "a symlink to a missing file; the CDI library reports it as a spec it cannot load")
            )
            continue
        except OSError as exc:
            problems.append(("error", path, f"cannot read the file: {exc.strerror or exc}"))
            continue
        if stat.S_ISDIR(info.st_mode):
            problems.append(("error", path, "a symlink to a directory; the CDI library fails to read it as a spec"))
        elif not stat.S_ISREG(info.st_mode):
            problems.append(
                (
                    "error",
                    path,
                    "not a regular file (a FIFO, socket or device); cgpu does not "
                    "open it, and an engine reading it could block",
                )
            )
        else:
            files.append((path, info))
    return files


def scan_spec_dirs(
    spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS, *, max_version: str | None = None, engine_label: str | None = None
) -> ScanResult:
    """Read every spec in the dirs (lowest priority first) with the reference library's rules.

    max_version: the highest cdiVersion the engine accepts (None: newest rules); specs above it
    are dropped with a problem naming both versions and `engine_label` ("podman 4.3.1").
    """
    if isinstance(spec_dirs, str):
        raise TypeError("spec_dirs is a list of directories, not one string")
    problems: list[tuple[str, str, str]] = []
    specs: list[Spec] = []
    engine_dropped: list[Spec] = []
    devices: dict[str, ResolvedDevice] = {}
    conflicts: dict[str, int] = {}  # qualified name -> priority of the dir where two files clash
    engine = engine_label or "the engine"
    for priority, directory in enumerate(spec_dirs):
        directory = os.path.normpath(directory)
        for path, info in _spec_files(directory, problems):
            try:
                spec = _read_spec(path, info, priority)
            except SpecError as exc:
                prefix = "the CDI library rejects this file" if exc.by_library else "cgpu cannot read this file"
                problems.append(("error", path, f"{prefix}: {exc.message}"))
                continue
            problems.extend(("warning", path, warning) for warning in spec.warnings)
            if max_version is not None and (versions.version_key(spec.version) > versions.version_key(max_version)):
                problems.append(
                    (
                        "error",
                        path,
                        (
                            f"cdiVersion {spec.version} is newer than {engine} accepts (at most {max_version}): "
                            f"{engine} ignores this file, so its devices are unresolvable there"
                        ),
                    )
                )
                engine_dropped.append(spec)
                continue
            specs.append(spec)
            for device in spec.devices:
                qualified = f"{spec.kind}={device.name}"
                other = devices.get(qualified)
                if other is not None and other.spec.priority >= priority:
                    if other.spec.priority == priority:
                        message = (
                            f"conflicting device {go_quote(qualified)} (specs {go_quote(path)}, "
                            f"{go_quote(other.spec.path)}): "
                            "two files in the same spec dir define it, so engines drop it entirely"
                        )
                        problems.append(("error", other.spec.path, message))
                        problems.append(("error", path, message))
                        conflicts[qualified] = priority
                    continue
                devices[qualified] = ResolvedDevice(qualified, spec, device)
    for qualified, conflict_priority in conflicts.items():
        survivor = devices.pop(qualified, None)
        if survivor is not None and survivor.spec.priority > conflict_priority:
            problems.append(
                (
                    "warning",
                    survivor.spec.path,
                    (
                        f"device {go_quote(qualified)} is defined here too, but the CDI library still drops it: "
                        f"two files in {spec_dirs[conflict_priority]} conflict over it, and it removes conflicting "
                        "names after reading every dir. Remove one of the conflicting definitions"
                    ),
                )
            )
    return ScanResult(devices=devices, specs=specs, problems=problems, engine_dropped=engine_dropped)
