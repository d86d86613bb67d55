"""Parsed spec files kept on disk between processes: a CLI run or a fresh agent reads its
specs back as JSON (about 0.1 ms for an 8-GPU spec) instead of parsing YAML (about 4 ms).

An entry is the *validated* parse result of one file (the parsed spec, or the error the
file gets), stored under the cache dir the caller passes (the CDI backend passes cgpu's
per-user cache dir) in `cdi-specs/`, one entry per spec path. It is used only when its key
matches exactly: the path, the file's identity and timestamps (st_dev, st_ino, st_size,
st_mtime_ns, st_ctime_ns), cgpu's version, and the size and mtime of the modules that decide a
parse (so an edited parser or model never reads entries of the old one). A spec read back
is validated again.

Exactness: a file rewritten in place with the same size inside one timestamp tick keeps every
key part but the content (the inode stays, ctime and mtime can be equal on coarse clocks:
jiffies on Linux, seconds on NFS or FAT). As git does for its index ("racy" entries), a file
changed less than RACY_SECONDS before it was read is not stored; a later read stores it. An
edit that keeps size, mtime *and* ctime (ctime cannot be set; only a clock set back or a
filesystem without it) is not detected, as with the in-memory cache.

An optimisation never adds a problem or changes an answer: any failure (no home, read-only or
full disk, a corrupt, truncated or foreign entry) means "parse the file". The directory and
its parent (the cache dir) are created 0700 and used only when each is a real directory owned
by this user and writable by no one else, and an entry only when it is a regular file owned by
this user, opened without following a symlink and without blocking (a FIFO swapped in is
refused, not waited on), so another user cannot plant a parse result or hang a scan.

Pruning: an entry's mtime is its last use (refreshed on a hit at most once a day). After a
scan that stored entries, those unused for PRUNE_DAYS are removed, then the least recently
used beyond MAX_ENTRIES (not counting the files the scan read: the current dirs' specs are all
kept, however many), and temporary files a killed writer left.
"""

from __future__ import annotations

import binascii
import contextlib
import json
import os
import time
from collections.abc import Collection

from cgpu import version
from cgpu.cdi import model, names, parse, versions
from cgpu.cdi.model import ContainerEdits, DeviceNode, Hook, Mount, Spec, SpecDevice
from cgpu.cdi.parse import SpecError
from cgpu.node.files import OpenDir, open_private_directory, read_private, write_private

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

FORMAT = 3
RACY_SECONDS = 2.0
SUBDIR = "cdi-specs"
MAX_ENTRIES = 1024
PRUNE_DAYS = 30
_DAY_NS = 86_400 * 10**9

_code_identity: list[list[int]] = []


def _code() -> list[list[int]]:
    """Size and mtime of the modules whose code decides a parse, read once per process (the
    loaded code is what was there at import)."""
    if not _code_identity:
        for module in (parse, model, names, versions):
            try:
                info = os.stat(module.__file__ or "")
                _code_identity.append([info.st_size, info.st_mtime_ns])
            except OSError:
                _code_identity.append([0, 0])
    return _code_identity


def _key(path: str, info: os.stat_result) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "cgpu": version.__version__,
        "code": _code(),
        "path": path,
        "file": [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns],
    }


def _directory(cache_dir: str, create: bool) -> OpenDir | None:
    """The entries' directory, opened once through the cache dir above it, when both are private
    (`cgpu.node.files`'s rules; created when `create`), else None. Every entry is then listed,
    read, written and removed through that descriptor: a user who may rename entries of a parent
    and swaps a dir for a link after the check redirects nothing."""
    try:
        with open_private_directory(cache_dir, create=create) as parent:
            return open_private_directory(SUBDIR, create=create, parent=parent)
    except OSError:
        return None


def _entry_name(path: str) -> str:
    # One entry per spec path, replaced when the file changes; a (rare) crc collision of two
    # paths only makes them evict each other, as the full path is part of the key.
    return f"{binascii.crc32(path.encode('utf-8', 'surrogateescape')):08x}.json"


def load(cache_dir: str, path: str, info: os.stat_result, priority: int) -> Spec | SpecError | None:
    """The stored parse result of the file `info` describes, or None (no usable entry)."""
    directory = _directory(cache_dir, create=False)
    if directory is None:
        return None
    try:
        with directory:
            data = read_private(
                _entry_name(path), limit=parse.MAX_SPEC_BYTES * 2, touch_after_ns=_DAY_NS, directory=directory
            )
    except OSError:
        return None  # absent, or not a private regular file of this user's: parse instead
    try:
        entry = json.loads(data)
        if entry["key"] != _key(path, info):
            return None
        if "error" in entry:
            error = entry["error"]
            message, by_library, crash = error["message"], error["by_library"], error["crash"]
            if type(message) is not str or type(by_library) is not bool or type(crash) is not bool:
                return None
            return SpecError(path, message, by_library=by_library, crash=crash)
        spec = decode_spec(entry["spec"], path, priority)
        parse.revalidate(spec)
        return spec
    except SpecError:
        return None  # a stored spec that no longer validates: not ours to trust
    except Exception:  # a corrupt or foreign entry fails in any way (KeyError, TypeError...): parse instead
        return None


def store(cache_dir: str, path: str, info: os.stat_result, read_info: os.stat_result, result: Spec | SpecError) -> bool:
    """Keep the parse result of a file read from a handle whose fstat is `read_info`; silently
    skipped (False) when that is not the file `info` describes, or it changed too recently."""
    if (read_info.st_ino, read_info.st_dev, read_info.st_size, read_info.st_mtime_ns, read_info.st_ctime_ns) != (
        info.st_ino,
        info.st_dev,
        info.st_size,
        info.st_mtime_ns,
        info.st_ctime_ns,
    ):
        return False
    if time.time_ns() - max(info.st_mtime_ns, info.st_ctime_ns) < RACY_SECONDS * 1e9:
        return False
    entry: dict[str, Any] = {"key": _key(path, info)}
    if isinstance(result, SpecError):
        entry["error"] = {"message": result.message, "by_library": result.by_library, "crash": result.crash}
    else:
        entry["spec"] = encode_spec(result)
    try:
        data = json.dumps(entry, separators=(",", ":")).encode()
    except ValueError:  # defensive: parsed specs hold only JSON values, and the cache must never break a scan
        return False
    directory = _directory(cache_dir, create=True)
    if directory is None:
        return False
    try:
        with directory:
            write_private(_entry_name(path), data, directory=directory)  # atomic: the old entry or the new one
    except OSError:
        return False
    return True


def prune(cache_dir: str, keep: Collection[str] = ()) -> None:
    """Remove entries unused for PRUNE_DAYS, then the least recently used beyond MAX_ENTRIES,
    and temporary files older than a minute (a writer killed between write and rename). The
    entries of the spec paths in `keep` (the files the scan just read) are never removed for the
    limit, which becomes max(MAX_ENTRIES, len(keep)): a node with more specs keeps all of its own."""
    directory = _directory(cache_dir, create=False)
    if directory is None:
        return
    with directory:
        _prune_in(directory, {_entry_name(path) for path in keep})


def _prune_in(directory: OpenDir, kept: set[str]) -> None:
    now = time.time_ns()
    entries: list[tuple[int, str]] = []
    try:
        for item in directory.entries():
            info = item.stat(follow_symlinks=False)
            if item.name.endswith(".tmp"):
                if now - info.st_mtime_ns > 60 * 10**9:
                    _remove(directory, item.name)
            elif now - info.st_mtime_ns > PRUNE_DAYS * _DAY_NS:
                _remove(directory, item.name)
            elif item.name not in kept:
                entries.append((info.st_mtime_ns, item.name))
    except OSError:
        return
    entries.sort(reverse=True)
    for _, name in entries[max(MAX_ENTRIES - len(kept), 0) :]:
        _remove(directory, name)


def _remove(directory: OpenDir, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(directory.at(name), dir_fd=directory.fd)


# --- the model as JSON: rows in the dataclasses' field order (model.py is part of the key).
# Equal edits and device nodes are stored once and read back as one shared object (an index
# and its UUID alias have the same edits): fewer objects to build, the same values.


class _Tables:
    def __init__(self) -> None:
        self.nodes: dict[DeviceNode, int] = {}
        self.edits: dict[Any, int] = {}
        self.edit_rows: list[list[Any]] = []

    def node(self, node: DeviceNode) -> int:
        return self.nodes.setdefault(node, len(self.nodes))

    def edits_index(self, edits: ContainerEdits) -> int:
        try:
            known = self.edits.get(edits)
        except TypeError:  # edits holding dicts (intelRdt, netDevices) are not hashable: stored apiece
            known, edits_key = None, object()
        else:
            edits_key = edits
        if known is None:
            known = self.edits[edits_key] = len(self.edit_rows)
            self.edit_rows.append(
                [
                    edits.env,
                    [self.node(node) for node in edits.device_nodes],
                    [[m.host_path, m.container_path, m.type, m.options] for m in edits.mounts],
                    [None if h is None else [h.hook_name, h.path, h.args, h.env, h.timeout] for h in edits.hooks],
                    edits.additional_gids,
                    edits.intel_rdt,
                    edits.net_devices,
                ]
            )
        return known


def encode_spec(spec: Spec) -> dict[str, Any]:
    """`spec` as JSON values (the path and priority left out): the disk cache's entry."""
    tables = _Tables()
    devices = [[d.name, d.annotations, tables.edits_index(d.edits)] for d in spec.devices]
    edits = tables.edits_index(spec.edits)
    return {
        "version": spec.version,
        "kind": spec.kind,
        "annotations": spec.annotations,
        "warnings": spec.warnings,
        "edits": edits,
        "devices": devices,
        "edit_table": tables.edit_rows,
        "node_table": [
            [n.path, n.host_path, n.type, n.major, n.minor, n.file_mode, n.permissions, n.uid, n.gid]
            for n in tables.nodes
        ],
    }


def decode_spec(data: dict[str, Any], path: str, priority: int) -> Spec:
    """The spec `encode_spec` gave `data` for, read from `path` at `priority`."""
    nodes = [DeviceNode(*row) for row in data["node_table"]]
    edits = [
        ContainerEdits(
            env=tuple(env),
            device_nodes=tuple(nodes[index] for index in node_indexes),
            mounts=tuple(Mount(host, container, kind, tuple(options)) for host, container, kind, options in mounts),
            hooks=tuple(
                None if h is None else Hook(h[0], h[1], tuple(h[2]), tuple(h[3]), h[4])  # type: ignore[misc]
                for h in hooks
            ),
            additional_gids=tuple(gids),
            intel_rdt=intel_rdt,
            net_devices=tuple(net_devices),
        )
        for env, node_indexes, mounts, hooks, gids, intel_rdt, net_devices in data["edit_table"]
    ]
    return Spec(
        path=path,
        version=data["version"],
        kind=data["kind"],
        devices=tuple(SpecDevice(name, edits[index], annotations) for name, annotations, index in data["devices"]),
        edits=edits[data["edits"]],
        annotations=data["annotations"],
        priority=priority,
        warnings=tuple(data["warnings"]),
    )
