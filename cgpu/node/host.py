"""The host filesystem a CDI spec is checked against (`--root`), read safely.

Every path a spec names is a host path; under a root other than `/` it is looked up inside
that root, with symlinks resolved *inside* it (an absolute link target or a `..` never
leaves the root). Results are memoised for one probe: host checks are redone every call.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import stat
from collections.abc import Callable

from cgpu.node.files import NotRegularFileError, open_regular
from cgpu.options import DEFAULT_ROOT
from cgpu.patterns import lazy

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, TypeVar

MAX_SYMLINKS = 40
_NOT_REGULAR = ", not a regular file"
MAX_SMALL_FILE = 64 * 1024  # ICD manifests, .icd files, sysfs values: anything larger is not one

_NVRM_VERSION = lazy(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")
_BARE_VERSION = lazy(r"^\s*(\d+\.\d+(?:\.\d+)?)\s*$")
_KFD_PROPERTY = lazy(r"(?m)^(gfx_target_version|drm_render_minor) (\d{1,10})$")
# Where the running NVIDIA kernel driver says its version, first found wins.
DRIVER_VERSION_FILES = ("/proc/driver/nvidia/version", "/sys/module/nvidia/version")


# A path from a spec may hold a NUL byte, which no file name can: the OS calls raise ValueError
# for it, and such a path is simply not there.
_NO_SUCH_PATH = (OSError, ValueError)


def _file_type(path: str) -> int | None:
    """S_IFMT of the path itself (a symlink is a symlink), or None when there is nothing."""
    try:
        return stat.S_IFMT(os.lstat(path).st_mode)
    except _NO_SUCH_PATH:
        return None


def _followed_type(path: str) -> int | None:
    try:
        return stat.S_IFMT(os.stat(path).st_mode)
    except _NO_SUCH_PATH:
        return None


def _link_target(path: str) -> str | None:
    try:
        return os.readlink(path)
    except _NO_SUCH_PATH:
        return None


def _sorted_listing(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except _NO_SUCH_PATH:
        return []


def _small_text(path: str, follow_links: bool = True) -> tuple[str | None, str | None]:
    try:
        # a FIFO or device here would hang or act: never opened, never read
        with open_regular(path, follow_links=follow_links) as handle:
            data = handle.read(MAX_SMALL_FILE + 1)
    except NotRegularFileError as exc:
        what = (exc.strerror or "").removeprefix("not a regular file (").removesuffix(")")
        return None, f"is {what}{_NOT_REGULAR}"
    except _NO_SUCH_PATH as exc:
        return None, f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
    if len(data) > MAX_SMALL_FILE:
        return None, f"is larger than {MAX_SMALL_FILE} bytes"
    return data.decode("utf-8", errors="replace"), None


def _small_text_inside(path: str) -> tuple[str | None, str | None]:
    """`_small_text` of a path whose links were resolved inside the root: a link there now was
    swapped in since, and is not followed out of it."""
    return _small_text(path, follow_links=False)


if TYPE_CHECKING:
    Read = Callable[[str], Any]
    _Answer = TypeVar("_Answer")


class HostTrace:
    """What one probe asked the host: each answer, and each filesystem read behind them with its result."""

    __slots__ = ("answers", "reads")

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], Any] = {}
        self.reads: list[tuple[Read, str, Any]] = []


def _clean(path: str) -> str:
    """An absolute, normalised path; `..` stops at `/` (normpath keeps a leading `//`, so strip it first)."""
    return posixpath.normpath("/" + path.lstrip("/"))


class HostFS:
    """Read-only view of the host filesystem under `root`.

    Every answer is memoised for this probe and kept in a trace with the filesystem reads it
    took (lstat, stat, readlink, listdir, read): `replay(trace)` makes the same reads afresh and
    says whether every result is unchanged (then every answer is: they are computed from nothing
    else), so a caller can reuse what it concluded from them.
    """

    def __init__(self, root: str = DEFAULT_ROOT) -> None:
        self.given_root = root
        self.root = os.path.abspath(root)
        self._plain = self.root == os.path.abspath(os.sep)
        self._resolved: dict[str, str | None] = {}  # path -> real file, for the walk inside the root
        self._modes: dict[str, int] = {}  # real file -> st_mode, as the walk saw it
        self.trace = HostTrace()
        self._memo = self.trace.answers

    def replay(self, trace: HostTrace) -> bool:
        """Make every read of `trace` again; True (and its answers are this probe's) when all
        results are unchanged."""
        for read, arg, result in trace.reads:
            if read(arg) != result:
                return False
        self._memo.update(trace.answers)
        if trace is not self.trace:  # made again: this probe's trace holds them too (once each)
            made = {(read, arg) for read, arg, _ in self.trace.reads}
            self.trace.reads.extend(entry for entry in trace.reads if (entry[0], entry[1]) not in made)
        return True

    def _read(self, read: Callable[[str], _Answer], arg: str) -> _Answer:
        result = read(arg)
        self.trace.reads.append((read, arg, result))
        return result

    def _ask(self, query: str, arg: str) -> Any:
        key = (query, arg)
        if key not in self._memo:
            self._memo[key] = getattr(self, "_" + query)(arg)
        return self._memo[key]

    def exists(self, path: str) -> bool:
        return self._ask("kind", path) is not None

    def is_dir(self, path: str) -> bool:
        kind: str | None = self._ask("kind", path)
        return kind == "dir"

    @property
    def real_root(self) -> bool:
        """The host itself (`/`), not a tree of stand-in files under `--root`."""
        return self._plain

    def is_device_node(self, path: str) -> bool:
        """A character or block device or a FIFO, the path itself (lstat: a symlink is not one): what
        the CDI library's deviceInfoFromPath accepts as a device node."""
        device: bool = self._ask("device", path)
        return device

    def listdir(self, path: str) -> list[str]:
        names: list[str] = self._ask("listdir", path)
        return names

    def read_small(self, path: str) -> tuple[str | None, str | None]:
        """(text, None) or (None, why not): a small text file, decoded leniently."""
        answer: tuple[str | None, str | None] = self._ask("read_small", path)
        return answer

    def refused_files(self) -> list[tuple[str, str]]:
        """(path, why) for each host file this probe wanted to read that is a FIFO, socket,
        device or directory: not opened (it could block or act), and a sign of an odd host."""
        found = []
        for (query, arg), answer in list(self._memo.items()):
            if query == "read_small" and answer[0] is None and answer[1].endswith(_NOT_REGULAR):
                found.append((arg, answer[1]))
        return found

    def read_json(self, path: str) -> tuple[Any, str | None]:
        text, why = self.read_small(path)
        if text is None:
            return None, why
        try:
            return json.loads(text), None
        except ValueError as exc:
            return None, f"is not valid JSON ({exc})"

    # --- the raw questions ----------------------------------------------------------------------
    def _kind(self, path: str) -> str | None:
        """ "dir", "file" (anything else that exists) or None: one stat, after the walk inside the root."""
        real = self.resolve(path)
        if real is None:
            return None
        mode = self._modes.get(real)
        if mode is None:
            mode = self._read(_followed_type, real)
            if mode is None:
                return None
        return "dir" if stat.S_ISDIR(mode) else "file"

    def _device(self, path: str) -> bool:
        real = self.resolve(path) if self._plain else None  # under --root only existence counts
        mode = self._read(_file_type, real) if real is not None else None
        return mode is not None and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode))

    def resolve(self, path: str) -> str | None:
        """The real file for an absolute host path (symlinks resolved inside the root), or None."""
        if self._plain:
            return _clean(path)  # a relative path in a spec is not relative to cgpu's working directory
        return self._resolve_inside(_clean(path), 0)

    def _resolve_inside(self, path: str, hops: int) -> str | None:
        # `path` is normalised and absolute; its parent is resolved first (memoised), so the
        # spec's many files in one library folder cost one lstat each.
        if path == "/":
            return self.root
        if path in self._resolved:
            return self._resolved[path]
        parent, _, name = path.rpartition("/")
        real_parent = self._resolve_inside(parent or "/", hops)
        real: str | None = None
        if real_parent is not None:
            candidate = real_parent + "/" + name  # the root is absolute, without a trailing slash
            mode = self._read(_file_type, candidate)
            if mode is not None and stat.S_ISLNK(mode):
                target = self._read(_link_target, candidate)
                if target is not None and hops < MAX_SYMLINKS:
                    # A relative target starts at the link's real folder; `..` stops at the root.
                    inside = "/" + os.path.relpath(real_parent, self.root).replace(os.sep, "/")
                    joined = target if target.startswith("/") else posixpath.join(inside, target)
                    real = self._resolve_inside(_clean(joined), hops + 1)
            elif mode is not None:
                real = candidate
                self._modes[real] = mode
        self._resolved[path] = real
        return real

    def _listdir(self, path: str) -> list[str]:
        real = self.resolve(path)
        return self._read(_sorted_listing, real) if real is not None else []

    def _read_small(self, path: str) -> tuple[str | None, str | None]:
        real = self.resolve(path)
        if real is None:
            return None, "does not exist"
        return self._read(_small_text if self._plain else _small_text_inside, real)

    def nvidia_driver_version(self) -> tuple[str | None, str | None]:
        """The running NVIDIA kernel driver version and the file it was read from."""
        for path, pattern in zip(DRIVER_VERSION_FILES, (_NVRM_VERSION, _BARE_VERSION), strict=True):
            text, _ = self.read_small(path)
            if text is not None:
                match = pattern.search(text)
                if match:
                    return match.group(1), path
        return None, None

    def render_node_vendor(self, node_name: str) -> str | None:
        """PCI vendor id (`0x10de`) of a DRM render node such as `renderD128`, from sysfs."""
        text, _ = self.read_small(f"/sys/class/drm/{node_name}/device/vendor")
        if text is None:
            return None
        value = text.strip().lower()
        return value if re.fullmatch(r"0x[0-9a-f]{4}", value) else None

    def render_node_driver(self, node_name: str) -> str | None:
        """The kernel driver bound to a DRM render node (`amdgpu`, `nouveau`, `nvidia`), from the
        `sys/class/drm/<node>/device/driver` link's name."""
        driver: str | None = self._ask("driver", node_name)
        return driver

    def _driver(self, node_name: str) -> str | None:
        device = self.resolve(f"/sys/class/drm/{node_name}/device")
        if device is None:
            return None
        target = self._read(_link_target, device + "/driver")
        return posixpath.basename(target.rstrip("/")) if target else None

    def kfd_gfx_targets(self) -> dict[int, int]:
        """`gfx_target_version` of each GPU in amdkfd's topology, by its `drm_render_minor` (128 for
        renderD128); CPU nodes (version 0) left out. The kernel writes both in each node's
        `properties` (amdkfd `kfd_topology.c`, `node_show`)."""
        targets: dict[int, int] = {}
        folder = "/sys/class/kfd/kfd/topology/nodes"
        for node in self.listdir(folder):
            text, _ = self.read_small(f"{folder}/{node}/properties")
            values = dict(_KFD_PROPERTY.findall(text or ""))
            version, minor = values.get("gfx_target_version"), values.get("drm_render_minor")
            if version and minor and int(version) > 0:
                targets[int(minor)] = int(version)
        return targets

    def display(self, path: str) -> str:
        """How to name a host path in a message: as the spec names it, inside the root when not `/`."""
        return path if self._plain else posixpath.join(self.given_root, path.lstrip("/"))
