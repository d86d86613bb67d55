"""Discovery of spec files and the device table an engine builds from them
(pkg/cdi/spec-dirs.go `scanSpecDirs`, pkg/cdi/cache.go `refresh`).

What cgpu decided where the library's behaviour is an accident rather than a rule:
- A spec dir is walked as filepath.Walk walks it in every released library (<= v1.1.0): a
  symlinked dir is not entered (skipped with a warning; Docker resolves such links itself and
  would read it), and a spec dir that is itself a *.json or *.yaml file is read as a spec.
  Symlinked spec *files* are followed, as the library does. LIBRARY_MAIN reads dirs with
  os.ReadDir instead: a symlinked dir is followed, and a spec dir it cannot list ends the scan.
- A file the library panics on (SpecError.crash) takes the engine's whole load with it: the
  scan reports the crash and what is lost, and resolves no device at all.
- A name defined twice in one dir is removed even if a later dir also defines it: the
  library deletes conflicting names after reading every dir (pkg/cdi/cache.go `refresh`,
  docs/cdi-reading.md). We
  mimic that and say so on the later file.
- A dir that cannot be listed, which the library skips silently, is a warning here: an engine
  running as root may see specs there that cgpu cannot.
- A spec dir, or an entry of one, whose lstat fails with anything but "not found" (ENOTDIR,
  ELOOP, ENAMETOOLONG, EACCES) ends the library's scan: no later dir is read. cgpu warns with
  the real error, and reads the later dirs only as data (ScanResult.unreached: never injected).
- Messages quote at most an excerpt of a file's content, and none of a file reached through a
  symlink out of a spec dir other users can write (it may be a file only this user can read).
- A spec path that is a FIFO, socket or device is reported, never opened (the library would
  block on a FIFO).
"""

from __future__ import annotations

import _thread
import errno
import os
import stat
from collections import OrderedDict
from collections.abc import Sequence

from cgpu.cdi import spec_cache, versions
from cgpu.cdi.model import ResolvedDevice, ScanResult, Spec
from cgpu.cdi.names import go_quote
from cgpu.cdi.parse import MAX_SPEC_BYTES, SpecError, parse_spec, too_big_message
from cgpu.errors import CgpuError, CgpuTypeError
from cgpu.node.host import NodeFiles
from cgpu.options import DEFAULT_ROOT, DEFAULT_SPEC_DIRS
from cgpu.problem import Kind, Problem, Severity

SPEC_EXTENSIONS = (".json", ".yaml")  # exactly these, case-sensitive: not .yml, not .YAML

# Parsed files by path, valid while (size, mtime, inode, ctime) are unchanged: a second scan
# of unchanged specs re-reads only directory listings and stat results. Behind it, the disk
# cache (spec_cache) serves a new process. Bounded by what the spec dirs hold now, not by
# history: after each scan only the files it read are kept (a long-running watch on a node
# where a DRA driver writes a spec per claim would otherwise keep every claim's spec), however
# many there are (20,000 specs must not thrash it).
PARSE_CACHE_SIZE = 256  # the most kept while one scan runs, beyond the files it has read so far

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any


class _File:
    """One spec file as the reader last read it: its identity, what parsing gave, and what a
    caller worked out from it (`SpecReader.remember`), which goes when the file changes."""

    __slots__ = ("key", "notes", "result")

    def __init__(self, key: str, result: Spec | SpecError) -> None:
        self.key = key  # "size mtime inode ctime library"
        self.result = result
        # name, value, name, value...: a flat tuple, a third of a dict's size (thousands of claim specs)
        self.notes: tuple[Any, ...] = ()

    def note(self, name: str) -> Any:
        notes = self.notes
        for index in range(0, len(notes), 2):
            if notes[index] == name:
                return notes[index + 1]
        return None

    def set_note(self, name: str, value: object) -> None:
        notes = self.notes
        for index in range(0, len(notes), 2):
            if notes[index] == name:
                self.notes = (*notes[: index + 1], value, *notes[index + 2 :])
                return
        self.notes = (*notes, name, value)


class SpecReader:
    """What the reader keeps from one scan to the next, as the CDI library's Cache keeps its specs:
    each spec file's parse result while the file is unchanged, and what a caller worked out from
    that file (`remember`, `recall`: the cdi backend's answers per spec), which goes with the file
    when it changes or leaves the spec dirs. So it holds what the spec dirs hold now, never history.

    `cgpu watch` holds one, a CLI run makes one, a library process keeps one per backend
    (`cgpu.backends.memory`). Library calls from several threads may share one: every change of
    the entries, and every walk over them, holds its lock (parsing happens outside it)."""

    __slots__ = ("_entries", "_kept", "_lock")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._entries: OrderedDict[str, _File] = OrderedDict()
        self._kept = 0  # how many entries the last scan left

    def scan(self, spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS, **options: Any) -> ScanResult:
        """`scan_spec_dirs` through this reader."""
        return scan_spec_dirs(spec_dirs, reader=self, **options)

    def clear(self) -> None:
        """Forget everything: the next scan reads every file again (from the disk cache, if any)."""
        with self._lock:
            self._entries.clear()
            self._kept = 0

    def forget(self) -> None:
        """Forget what callers remembered of the files (`remember`), keep what parsing gave."""
        with self._lock:
            for entry in self._entries.values():
                entry.notes = ()

    def stats(self) -> dict[str, int]:
        """`files`: spec files kept parsed; `remembered`: what callers keep of them, counted per name."""
        with self._lock:
            entries = list(self._entries.values())
        counts = {"files": len(entries)}
        for entry in entries:
            for name in entry.notes[::2]:
                counts[name] = counts.get(name, 0) + 1
        return counts

    def recall(self, spec: Spec, name: str) -> Any:
        """What was remembered as `name` of `spec`'s file, while it is the file this reader read
        (None: nothing, or the file changed since)."""
        entry = self._entries.get(spec.path)
        if entry is None or not entry.notes or not _same_file(entry.result, spec):
            return None
        return entry.note(name)

    def remember(self, spec: Spec, name: str, value: object) -> None:
        """Keep `value` as `name` of `spec`'s file, for as long as the file is unchanged."""
        entry = self._entries.get(spec.path)
        if entry is None or not _same_file(entry.result, spec):
            return  # changed since (another thread's scan), or read without keeping
        entry.set_note(name, value)

    def recalled(self, name: str) -> list[Any]:
        """Every file's `name`."""
        with self._lock:
            entries = list(self._entries.values())
        found = [entry.note(name) for entry in entries]
        return [value for value in found if value is not None]

    def _read(self, path: str, info: os.stat_result, priority: int, cache: _DiskCache) -> Spec:
        """Parse one spec file (through the caches); raises SpecError."""
        key = f"{info.st_size} {info.st_mtime_ns} {info.st_ino} {info.st_ctime_ns} {cache.library}"
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None and entry.key != key:
                entry = None
            if entry is not None:
                self._entries.move_to_end(path)
        if entry is not None:
            result = entry.result
        else:
            if info.st_size > MAX_SPEC_BYTES:
                raise SpecError(path, too_big_message(info.st_size), by_library=False)
            result = cache.load(path, info, priority) or _parse_file(path, info, priority, cache)
            cache.read.add(path)
            with self._lock:
                self._entries[path] = _File(key, result)
                self._entries.move_to_end(path)
                # beyond what the last scan kept (all of which this scan may still read: evicting one
                # of those would evict the next file ahead, and so on, re-reading every later file)
                if len(self._entries) > PARSE_CACHE_SIZE + len(cache.read) + self._kept:
                    self._entries.popitem(last=False)
        cache.read.add(path)
        if isinstance(result, SpecError):
            raise result
        if result.priority == priority:
            return result
        placed: Spec = result.replace(priority=priority)  # read from another spec dir's place in the order
        return placed

    def _keep_only(self, read: set[str]) -> None:
        """After a scan: only the files it read (the spec dirs' current files) stay."""
        with self._lock:
            for stale in [path for path in self._entries if path not in read]:
                del self._entries[stale]
            self._kept = len(self._entries)


def _same_file(result: Spec | SpecError, spec: Spec) -> bool:
    """`spec` is what the reader read from its file (perhaps placed at another priority)."""
    return result is spec or (isinstance(result, Spec) and result.devices is spec.devices)


class _DiskCache:
    """The disk cache of one scan (none without a cache dir), and whether it stored anything."""

    def __init__(self, cache_dir: str | os.PathLike[str] | None, library: str, files: NodeFiles) -> None:
        self.directory = None if cache_dir is None else os.fspath(cache_dir)
        self.files = files  # how the spec files are opened (under --root: inside the root)
        self.library = library
        self.stored = False
        self.read: set[str] = set()  # every spec path this scan read (the current spec dirs' files)

    def load(self, path: str, info: os.stat_result, priority: int) -> Spec | SpecError | None:
        if self.directory is None or self.library != versions.LIBRARY:
            return None
        return spec_cache.load(self.directory, path, info, priority)

    def store(self, path: str, info: os.stat_result, read_info: os.stat_result, result: Spec | SpecError) -> None:
        if self.directory is not None and self.library == versions.LIBRARY:
            self.stored |= spec_cache.store(self.directory, path, info, read_info, result)


def _parse_file(path: str, info: os.stat_result, priority: int, cache: _DiskCache) -> Spec | SpecError:
    """Read and parse one file, and keep the result on disk for the next process."""
    try:
        with cache.files.open_regular(path) as handle:  # swapped for a FIFO since the scan looked: refuse
            data = handle.read(MAX_SPEC_BYTES + 1)
            read_info = os.fstat(handle.fileno())
    except OSError as exc:
        raise SpecError(path, exc.strerror or str(exc), by_library=False) from None
    try:
        result: Spec | SpecError = parse_spec(data, path=path, priority=priority, library=cache.library)
    except SpecError as exc:
        result = exc
    cache.store(path, info, read_info, result)
    return result


def _others_can_write(info: os.stat_result) -> bool:
    """A dir another user can write: group or world write, or another owner than us or root."""
    if os.name != "posix":
        return False
    return bool(info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) or info.st_uid not in (os.geteuid(), 0)


def _leaves_open_dir(directory: str, path: str, dir_info: os.stat_result, files: NodeFiles) -> bool:
    """`path` is a symlink out of `directory`, which other users can write: whoever planted it
    may have pointed it at a file only we can read, so no message may quote its content."""
    if not _others_can_write(dir_info):
        return False
    return os.path.dirname(files.realpath(path)) != files.realpath(directory)


class _StopScan(CgpuError):
    """scanSpecDirs returns here: v1.1.0 where filepath.Walk's lstat of a spec dir or of an
    entry fails with anything but "not found", main where os.ReadDir fails. `files`: what the
    scan read before (the entries ahead of a failing one); the caller adds the problem."""

    def __init__(
        self,
        path: str,
        reason: str,
        *,
        severity: Severity = "warning",
        files: list[tuple[str, os.stat_result, bool]] | None = None,
        entry: bool = False,
        error: OSError | None = None,
    ) -> None:
        super().__init__(reason)
        self.path = path
        self.reason = reason
        self.severity = severity
        self.files = files or []
        self.entry = entry  # an entry of the dir, not the dir: the dir's later files are not read either
        self.as_user = error is not None and _refused_as_user(error)


def _os_error(exc: OSError) -> str:
    """An OSError in words and by name: "Not a directory (ENOTDIR)"."""
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


def _refused_as_user(exc: OSError) -> bool:
    """A permission error an engine running as root would not get (cgpu runs as another user)."""
    return exc.errno in (errno.EACCES, errno.EPERM) and os.name == "posix" and os.geteuid() != 0


def _engine_may_read(exc: OSError) -> bool:
    """An error cgpu's read may get where the engine's does not: permission (cgpu not root) or an
    I/O error (cgpu reads the node through a mount, and such errors come and go)."""
    return _refused_as_user(exc) or exc.errno == errno.EIO


def _spec_files(
    directory: str, problems: list[Problem], unreadable: list[str], library: str, files: NodeFiles
) -> list[tuple[str, os.stat_result, bool]]:
    """The spec files of one dir in name order, each with its (followed) stat result and
    whether no message may quote its content (_leaves_open_dir). Raises _StopScan where the
    library's scan of the spec dirs ends. Every path is looked up through `files` (under
    `--root`, links resolved inside the root)."""
    main = library == versions.LIBRARY_MAIN
    try:
        dir_info = (files.stat if main else files.lstat)(directory)
    except FileNotFoundError:
        return []  # a missing dir is normal (/var/run/cdi often is)
    except OSError as exc:
        # filepath.Walk calls the scan's function with the lstat error; it returns every error
        # but fs.ErrNotExist (ENOENT alone), and scanSpecDirs returns it: no later dir is read
        if _engine_may_read(exc):
            unreadable.append(directory)
        raise _StopScan(directory, f"cannot read this spec dir: {_os_error(exc)}", error=exc) from None
    if main and not stat.S_ISDIR(dir_info.st_mode):
        raise _StopScan(directory, "this spec dir is not a directory", severity="error")
    if not stat.S_ISDIR(dir_info.st_mode) and directory.endswith(SPEC_EXTENSIONS):
        # filepath.Walk calls its function for a root that is not a dir, and the library reads
        # it as a spec (following a symlink)
        try:
            parent_info = files.stat(os.path.dirname(directory) or ".")
        except OSError:
            parent_info = dir_info
        return _spec_file(
            os.path.dirname(directory) or ".", directory, dir_info, problems, unreadable, parent_info, files
        )
    if stat.S_ISLNK(dir_info.st_mode):
        problems.append(
            Problem(
                "warning",
                directory,
                (
                    f"this spec dir is a symlink (to {files.realpath(directory)}): engines whose CDI library "
                    "is <= 1.1.0 (podman, containerd, CRI-O) do not read a symlinked spec dir, so cgpu skips it "
                    "too; Docker resolves the link and would read it. Point the engine at the real dir"
                ),
                "spec-dir",
            )
        )
        return []
    if not stat.S_ISDIR(dir_info.st_mode):
        problems.append(Problem("warning", directory, "this spec dir is not a directory; skipped", "spec-dir"))
        return []
    try:
        entries = files.entries(directory)
    except OSError as exc:
        message = (
            f"cannot list this spec dir ({exc.strerror or exc}); engines running as root may read "
            "specs here that cgpu cannot see"
        )
        unreadable.append(directory)  # what it holds is not known: the APIs it may decide are unknown
        if main:
            raise _StopScan(directory, message) from None
        problems.append(Problem("warning", directory, message, "spec-dir"))  # Walk ignores a dir it cannot list
        return []
    found: list[tuple[str, os.stat_result, bool]] = []
    for name in entries:
        spec_name = name.endswith(SPEC_EXTENSIONS)
        if main and not spec_name:
            continue  # os.ReadDir: no lstat of its own
        path = os.path.join(directory, name)
        try:
            info = files.lstat(path)
        except FileNotFoundError:
            continue  # removed since the listing: Walk skips it too
        except OSError as exc:
            if main:
                problems.append(
                    Problem("error", path, f"cannot read the file: {exc.strerror or exc}", "unreadable-file")
                )
                unreadable.append(path)
                continue
            # Walk lstats every entry, whatever its name, before the scan's function sees the
            # name; that function returns the error, and the walk and the whole scan end there
            if _refused_as_user(exc):
                unreadable.append(path)
            raise _StopScan(
                path, f"cannot read this entry of the spec dir: {_os_error(exc)}", files=found, entry=True, error=exc
            ) from None
        if spec_name and not stat.S_ISDIR(info.st_mode):  # subdirectories are skipped, even if named *.yaml
            found.extend(_spec_file(directory, path, info, problems, unreadable, dir_info, files))
    return found


def _spec_file(
    directory: str,
    path: str,
    info: os.stat_result,
    problems: list[Problem],
    unreadable: list[str],
    dir_info: os.stat_result,
    files: NodeFiles,
) -> list[tuple[str, os.stat_result, bool]]:
    """One spec path (its lstat in `info`) as a list of what to read: empty, with a problem,
    when it is nothing the scan can read."""
    withhold = False
    if stat.S_ISLNK(info.st_mode):
        try:
            info = files.stat(path)
        except FileNotFoundError:
            problems.append(
                Problem(
                    "error",
                    path,
                    "a symlink to a missing file; the CDI library reports it as a spec it cannot load",
                    "invalid-spec",
                )
            )
            return []
        except OSError as exc:
            problems.append(Problem("error", path, f"cannot read the file: {exc.strerror or exc}", "unreadable-file"))
            unreadable.append(path)
            return []
        withhold = _leaves_open_dir(directory, path, dir_info, files)
    if stat.S_ISDIR(info.st_mode):
        problems.append(
            Problem(
                "error", path, "a symlink to a directory; the CDI library fails to read it as a spec", "invalid-spec"
            )
        )
        return []
    if not stat.S_ISREG(info.st_mode):
        problems.append(
            Problem(
                "error",
                path,
                "not a regular file (a FIFO, socket or device); cgpu does not "
                "open it, and an engine reading it could block",
                "unreadable-file",
            )
        )
        return []
    return [(path, info, withhold)]


def scan_spec_dirs(
    spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS,
    *,
    max_version: str | None = None,
    engine_label: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    library: str = versions.LIBRARY,
    root: str | None = None,
    reader: SpecReader | None = None,
) -> ScanResult:
    """Read every spec in the dirs (lowest priority first) with the reference library's rules.

    max_version: the highest cdiVersion the engine accepts (None: newest rules); specs above it
    are dropped with a problem naming both versions and `engine_label` ("podman 4.3.1").
    cache_dir: where parse results are kept between processes (spec_cache; None: not kept).
    library: versions.LIBRARY (what engines ship) or versions.LIBRARY_MAIN.
    root: the node's root (`--root`): a spec dir under it is read as the node reads it, every
    link in the dir's path and to a spec file resolved inside the root (None: this machine's `/`).
    reader: what is kept from one scan to the next (None: nothing, each file read afresh).
    """
    if isinstance(spec_dirs, str):
        raise CgpuTypeError("spec_dirs is a list of directories, not one string")
    problems: list[Problem] = []
    specs: list[Spec] = []
    engine_dropped: list[Spec] = []
    devices: dict[str, ResolvedDevice] = {}
    conflicts: dict[str, int] = {}  # qualified name -> priority of the dir where two files clash
    crashes: list[str] = []
    unreadable: list[str] = []
    engine = engine_label or "the engine"
    files = NodeFiles(root or DEFAULT_ROOT)
    cache = _DiskCache(cache_dir, library, files)
    reader = SpecReader() if reader is None else reader
    stop: _StopScan | None = None
    for priority, directory in enumerate(spec_dirs):
        directory = os.path.normpath(directory)
        try:
            spec_files = _spec_files(directory, problems, unreadable, library, files)
        except _StopScan as stopped:
            stop, spec_files = stopped, stopped.files
        for path, info, withhold in spec_files:
            try:
                spec = reader._read(path, info, priority, cache)
            except SpecError as exc:
                if exc.crash:
                    crashes.append(path)
                elif not exc.by_library:
                    unreadable.append(path)
                kind: Kind = "library-crash" if exc.crash else "invalid-spec" if exc.by_library else "unreadable-file"
                problems.append(Problem("error", path, _rejection(exc, withhold), kind))
                continue
            problems.extend(Problem("warning", path, warning, "spec-warning") for warning in spec.warnings)
            if max_version is not None and (versions.version_key(spec.version) > versions.version_key(max_version)):
                problems.append(
                    Problem(
                        "error",
                        path,
                        (
                            f"cdiVersion {spec.version} is newer than {engine} accepts (at most {max_version}): "
                            f"{engine} ignores this file, so its devices are unresolvable there"
                            f"{_upgrade_fix(engine_label, spec.version, max_version)}"
                        ),
                        "spec-too-new",
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
                        problems.append(Problem("error", other.spec.path, message, "duplicate-device"))
                        problems.append(Problem("error", path, message, "duplicate-device"))
                        conflicts[qualified] = priority
                    continue
                devices[qualified] = ResolvedDevice(qualified, spec, device)
        if stop is not None:
            break
    unreached: dict[str, Spec] = {}
    if stop is not None:
        later = [os.path.normpath(d) for d in spec_dirs[priority + 1 :]]
        if later:  # read as data (by a reader of its own): what the engine would have found there
            beyond = scan_spec_dirs(
                later,
                max_version=max_version,
                engine_label=engine_label,
                cache_dir=cache_dir,
                library=library,
                root=root,
            )
            unreached = {name: found.spec for name, found in beyond.devices.items() if name not in devices}
        problems.append(
            Problem(stop.severity, stop.path, _stop_message(stop, later, unreached, engine, library), "spec-dir")
        )
    if cache.stored and cache.directory is not None:
        spec_cache.prune(cache.directory, keep=cache.read)
    reader._keep_only(cache.read)
    for qualified, conflict_priority in conflicts.items():
        survivor = devices.pop(qualified, None)
        if survivor is not None and survivor.spec.priority > conflict_priority:
            problems.append(
                Problem(
                    "warning",
                    survivor.spec.path,
                    (
                        f"device {go_quote(qualified)} is defined here too, but the CDI library still drops it: "
                        f"two files in {spec_dirs[conflict_priority]} conflict over it, and it removes conflicting "
                        "names after reading every dir. Remove one of the conflicting definitions"
                    ),
                    "duplicate-device",
                )
            )
    if crashes:
        problems.append(Problem("error", crashes[0], _crash_loss(crashes, devices, engine), "library-crash"))
        devices = {}
    return ScanResult(
        devices=devices,
        specs=specs,
        problems=problems,
        engine_dropped=engine_dropped,
        crashed=crashes,
        unreadable=unreadable,
        stopped_at=None if stop is None else stop.path,
        unreached=unreached,
    )


def _stop_message(stop: _StopScan, later: list[str], unreached: dict[str, Spec], engine: str, library: str) -> str:
    """Why the library's scan of the spec dirs ends at `stop.path`, and what the engine loses."""
    if library == versions.LIBRARY_MAIN:
        source = "the CDI library (main) stops its scan here (pkg/cdi/spec-dirs.go scanSpecDirs: os.ReadDir failed)"
    else:
        source = (
            "the CDI library stops its scan here: filepath.Walk's lstat failed with an error other than "
            '"not found", which pkg/cdi/spec-dirs.go scanSpecDirs returns and pkg/cdi/cache.go refresh ignores'
        )
    lost = sorted(unreached)
    shown = ", ".join(lost[:10]) + (f" and {len(lost) - 10} more" if len(lost) > 10 else "")
    what = f"; it injects none of the devices defined there ({shown})" if lost else ""
    dirs = f"no later spec dir ({', '.join(later)}){what}" if later else ""
    if stop.entry:
        tail = f"reads no later file of this dir{' and ' + dirs if dirs else ''}"
    else:
        tail = f"reads {dirs}" if dirs else "would read no later spec dir anyway (this is the last)"
    root = ""
    if stop.as_user:
        root = "; an engine running as root is not refused here, and reads it and the later dirs"
    return f"{stop.reason}: {source}, so {engine} {tail}{root}"


def _rejection(exc: SpecError, withhold: bool) -> str:
    if exc.crash:
        prefix = "the CDI library crashes (panics) on this file"
    elif exc.by_library:
        prefix = "the CDI library rejects this file"
    else:
        prefix = "cgpu cannot read this file"
    if withhold:
        return (
            f"{prefix}; cgpu does not say why: the file is reached through a symlink out of a spec dir other "
            "users can write, so the reason could quote a file that is not theirs to read"
        )
    return f"{prefix}: {exc.message}"


def _crash_loss(crashes: list[str], devices: dict[str, ResolvedDevice], engine: str) -> str:
    """What a panic of the library costs: the engine's load of every spec dir dies with it."""
    lost = sorted(devices)
    shown = ", ".join(lost[:10]) + (f" and {len(lost) - 10} more" if len(lost) > 10 else "")
    what = f"none of the {len(lost)} devices the other files define resolve there ({shown})" if lost else ""
    files = " and ".join(go_quote(path) for path in crashes[:3]) + (" and others" if len(crashes) > 3 else "")
    return (
        f"the CDI library panics on {files}, so {engine}'s load of every spec dir crashes: no CDI device "
        f"resolves there{'; ' + what if what else ''}. Fix or remove the file"
    )


def _upgrade_fix(engine_label: str | None, spec_version: str, max_version: str) -> str:
    """The fix for a spec too new for the engine: the release that reads it, or an older spec."""
    from cgpu.engines.registry import first_release_reading  # the engine's release rows

    name = (engine_label or "").partition(" ")[0]
    first = first_release_reading(name, spec_version)
    older = f"a spec written for cdiVersion {max_version} or older"
    if first is None:
        return f": use {older}"
    return f": upgrade to {name} {first} or later, or use {older}"
