"""The host filesystem a CDI spec is checked against (`--root`), read safely.

Every path a spec names is a host path; under a root other than `/` it is looked up inside
that root, with symlinks resolved *inside* it (an absolute link target or a `..` never
leaves the root). Results are memoised for one probe: host checks are redone every call.
"""

from __future__ import annotations

import errno
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
    from typing import IO, Any, TypeVar

MAX_SYMLINKS = 40  # Linux's bound on links in one path walk (ELOOP)
PATH_MAX = 4096  # Linux's bound on a path, its terminating NUL included (ENAMETOOLONG)
_NOT_REGULAR = ", not a regular file"
MAX_SMALL_FILE = 64 * 1024  # ICD manifests, .icd files, sysfs values: anything larger is not one

_BARE_VERSION = lazy(r"^\s*(\d+\.\d+(?:\.\d+)?)\s*$")
_KFD_PROPERTY = lazy(r"(?m)^(gfx_target_version|drm_render_minor) (\d{1,10})$")


def _dotted_version(text: str, start: int) -> str | None:
    """`\\d+\\.\\d+(?:\\.\\d+)?` matched at `start` (longest), or None."""
    end, parts = start, 0
    while parts < 3:
        digits = end
        while digits < len(text) and text[digits].isdecimal():
            digits += 1
        if digits == end:
            break
        parts, end = parts + 1, digits
        if parts == 3 or end >= len(text) or text[end] != "." or not text[end + 1 : end + 2].isdecimal():
            break
        end += 1
    return text[start:end] if parts >= 2 else None


def nvrm_version(text: str) -> str | None:
    """The driver version in /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX Open Kernel Module for
    x86_64  580.65.06  Release Build ..."): the regex `Kernel Module(?: for \\S+)?\\s+(\\d+\\.\\d+(?:\\.\\d+)?)`
    searched, as string work (on every run)."""
    found = text.find("Kernel Module")
    while found != -1:
        after = found + len("Kernel Module")
        starts = [after]
        if text.startswith(" for ", after) and after + 5 < len(text) and not text[after + 5].isspace():
            end = after + 5
            while end < len(text) and not text[end].isspace():
                end += 1
            starts.insert(0, end)  # the optional group taken first, as the regex tries it
        for start in starts:
            blank = start
            while blank < len(text) and text[blank].isspace():
                blank += 1
            version = _dotted_version(text, blank) if blank > start else None
            if version is not None:
                return version
        found = text.find("Kernel Module", found + 1)
    return None


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


def _device_owner(path: str) -> tuple[int, int, int] | None:
    """(permission bits, uid, gid) of a character or block device node itself, or None for anything else."""
    try:
        info = os.lstat(path)
    except _NO_SUCH_PATH:
        return None
    if not (stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)):
        return None
    return stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid


def _type_or_error(path: str) -> int:
    """S_IFMT of the path itself, or the negated errno of its lstat (ENOENT for a NUL in it)."""
    try:
        return stat.S_IFMT(os.lstat(path).st_mode)
    except OSError as exc:
        return -(exc.errno or errno.ENOENT)
    except ValueError:
        return -errno.ENOENT


def _followed_type(path: str) -> int | None:
    try:
        return stat.S_IFMT(os.stat(path).st_mode)
    except _NO_SUCH_PATH:
        return None


def _device_number(path: str) -> tuple[str, int, int] | None:
    """("c" or "b", major, minor) of the device the path names (links followed), or None when it is
    not a character or block device: the numbers a container's node must carry to reach it."""
    try:
        info = os.stat(path)
    except _NO_SUCH_PATH:
        return None
    return _numbers(info)


def _device_number_inside(path: str) -> tuple[str, int, int] | None:
    """`_device_number` of a path whose links were resolved inside the root (a link now is not followed)."""
    try:
        info = os.lstat(path)
    except _NO_SUCH_PATH:
        return None
    return _numbers(info)


def _numbers(info: os.stat_result) -> tuple[str, int, int] | None:
    if stat.S_ISCHR(info.st_mode):
        kind = "c"
    elif stat.S_ISBLK(info.st_mode):
        kind = "b"
    else:
        return None
    return kind, os.major(info.st_rdev), os.minor(info.st_rdev)


def parse_proc_devices(text: str) -> dict[str, dict[str, int]]:
    """/proc/devices as {"c": {name: major}, "b": {...}}: the majors the kernel gave each driver (the
    first of a name wins; a line that is not `MAJOR NAME` is skipped)."""
    found: dict[str, dict[str, int]] = {"c": {}, "b": {}}
    section: dict[str, int] | None = None
    for line in text.splitlines():
        line = line.strip()
        if line.lower().startswith("character devices"):
            section = found["c"]
        elif line.lower().startswith("block devices"):
            section = found["b"]
        elif section is not None:
            number, _, name = line.partition(" ")
            name = name.strip()
            if number.isascii() and number.isdigit() and name and len(number) < 8:
                section.setdefault(name, int(number))
    return found


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


def _listing_inside(real: str) -> list[str]:
    """The sorted names in a dir whose links were resolved inside the root: opened once, never
    through a link swapped in since."""
    fd = os.open(real, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def _sorted_listing_inside(path: str) -> list[str]:
    try:
        return _listing_inside(path)
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


def _path_error(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)


class NodeFiles:
    """The node's files under `root` (`--root`; `/`: this machine's own, resolved by the OS).

    Under another root every symbolic link is resolved *inside* it, at every component of a
    path, absolute target or relative, as the node's kernel would resolve it with the root as
    `/`: an absolute target or a `..` never leaves the root. The walk is iterative (a path of
    thousands of components costs no recursion), and bounded as the kernel bounds it: at most
    MAX_SYMLINKS links (ELOOP) and PATH_MAX bytes of path (ENAMETOOLONG). Each file's lstat and
    link target is read once per view (`_lstat_mode` and `_link` are what a subclass records).

    Two kinds of path: a *node path* (`/var/run/cdi`, what the node's own programs name) and a
    *machine path* (`ROOT/var/run/cdi`, where that name is on the machine cgpu runs on). `real`
    maps the first to the real machine file; the `lstat`, `stat`, `listdir`, `realpath` and
    `open_regular` methods take a machine path, and resolve it inside the root when it is under
    the root (else, as on `/`, the OS resolves it), so a reader names files as it always has.
    """

    def __init__(self, root: str = DEFAULT_ROOT) -> None:
        self.given_root = root
        self.root = os.path.abspath(root)
        self._plain = self.root == os.path.abspath(os.sep)
        self._modes: dict[str, int] = {}  # machine path -> S_IFMT of its lstat, or its negated errno
        self._links: dict[str, str | None] = {}  # machine path -> its link target
        # node dir -> its walk from the root: (its link-free node path, the links followed), or (None, errno)
        self._dirs: dict[str, tuple[str | None, int]] = {}

    @property
    def real_root(self) -> bool:
        """The host itself (`/`), not a tree of stand-in files under `--root`."""
        return self._plain

    # --- what a subclass may record -----------------------------------------------------------
    def _lstat_mode(self, real: str) -> int:
        """S_IFMT of `real` itself, or the negated errno of its lstat."""
        if real not in self._modes:
            self._modes[real] = self._read(_type_or_error, real)
        return self._modes[real]

    def _link(self, real: str) -> str | None:
        if real not in self._links:
            self._links[real] = self._read(_link_target, real)
        return self._links[real]

    def _read(self, read: Callable[[str], _Answer], arg: str) -> _Answer:
        return read(arg)

    # --- node paths ---------------------------------------------------------------------------
    def real(self, path: str, *, follow_last: bool = True) -> str:
        """The machine path of the node path `path`, every link resolved inside the root (the last
        component too when `follow_last`): no component of the result is a link (as read now).
        Raises OSError as the kernel would: ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG."""
        path = _clean(path)
        found = self._real(path, follow_last)
        if isinstance(found, int):
            raise _path_error(found, path)
        return found

    def _real(self, path: str, follow_last: bool) -> str | int:
        """`real` of a clean path, or the errno it fails with (a missing file is common: no exception)."""
        if self._plain:
            return path
        if len(path.encode("utf-8", "surrogateescape")) >= PATH_MAX:
            return errno.ENAMETOOLONG
        parent, _, name = path.rpartition("/")
        if not name:  # the root itself
            return self.root
        # The parent dir's walk once per view: a spec's 30 libraries in one dir share it
        walked = self._dirs.get(parent)
        if walked is None:
            walked = self._walk("", parent.split("/")[::-1], 0, True)
            if walked[0] and not stat.S_ISDIR(self._lstat_mode(self.root + walked[0])):
                walked = (None, errno.ENOTDIR)
            self._dirs[parent] = walked
        done, hops = walked
        if done is None:
            return hops
        done, code = self._walk(done, [name], hops, follow_last)
        return code if done is None else self.root + done

    def _walk(self, done: str, pending: list[str], hops: int, follow_last: bool) -> tuple[str | None, int]:
        """(the link-free node path, "" for the root; the links followed so far) after walking the
        components on the stack `pending` (the next last) from `done` with `hops` links followed;
        (None, errno) where the walk fails."""
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                done = done.rpartition("/")[0]  # stops at the root
                continue
            candidate = self.root + done + "/" + name
            if not pending and not follow_last:
                done += "/" + name  # the caller asks the OS about the last component itself
                break
            mode = self._lstat_mode(candidate)
            if mode < 0:
                return None, -mode
            if stat.S_ISLNK(mode):
                hops += 1
                target = self._link(candidate)
                if hops > MAX_SYMLINKS:
                    return None, errno.ELOOP
                if not target:
                    return None, errno.ENOENT
                if target.startswith("/"):
                    done = ""
                pending.extend(target.split("/")[::-1])
                continue
            if pending and not stat.S_ISDIR(mode):
                return None, errno.ENOTDIR
            done += "/" + name
        return done, hops

    def node_path(self, machine_path: str) -> str | None:
        """The node path a machine path names, when it is under the root (None: outside it, or on `/`)."""
        if self._plain:
            return None
        full = os.path.abspath(machine_path)
        if full == self.root:
            return "/"
        if not full.startswith(self.root + "/"):
            return None
        return full[len(self.root) :]

    def display(self, path: str) -> str:
        """How to name a node path in a message: as the node names it, inside the root when not `/`."""
        return path if self._plain else posixpath.join(self.given_root, path.lstrip("/"))

    # --- machine paths, resolved inside the root when under it -----------------------------------
    def _machine(self, path: str, follow_last: bool) -> tuple[str, bool]:
        """(the path to ask the OS, whether it was resolved here: then the OS must follow no link)."""
        node = self.node_path(path)
        if node is None:
            return path, False
        return self.real(node, follow_last=follow_last), True

    def lstat(self, path: str) -> os.stat_result:
        real, _ = self._machine(path, False)
        return os.lstat(real)

    def stat(self, path: str) -> os.stat_result:
        real, inside = self._machine(path, True)
        return os.stat(real, follow_symlinks=not inside)

    def realpath(self, path: str) -> str:
        """The real file's machine path (`os.path.realpath` inside the root); `path` when unresolvable."""
        try:
            real, inside = self._machine(path, True)
        except OSError:
            return path
        return real if inside else os.path.realpath(path)

    def entries(self, path: str) -> list[str]:
        """The names in a dir, sorted (`os.listdir`)."""
        real, inside = self._machine(path, True)
        return _listing_inside(real) if inside else sorted(os.listdir(real))

    def open_regular(self, path: str) -> IO[bytes]:
        """`cgpu.node.files.open_regular` of a machine path, resolved inside the root when under it."""
        real, inside = self._machine(path, True)
        return open_regular(real, follow_links=not inside)


class HostFS(NodeFiles):
    """Read-only view of the host filesystem under `root` (the node's file view, `NodeFiles`).

    Every answer is memoised for this probe and kept in a trace with the filesystem reads it
    took (lstat, stat, readlink, listdir, read): `replay(trace)` makes the same reads afresh and
    says whether every result is unchanged (then every answer is: they are computed from nothing
    else), so a caller can reuse what it concluded from them.
    """

    def __init__(self, root: str = DEFAULT_ROOT) -> None:
        super().__init__(root)
        self._resolved: dict[str, str | None] = {}  # node path -> real file
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

    def is_device_node(self, path: str) -> bool:
        """A character or block device or a FIFO, the path itself (lstat: a symlink is not one): what
        the CDI library's deviceInfoFromPath accepts as a device node."""
        device: bool = self._ask("device", path)
        return device

    def device_number(self, path: str) -> tuple[str, int, int] | None:
        """("c" or "b", major, minor) of the host's device node at `path` (`st_rdev`), or None where
        there is none or it is another kind of file (the stand-in files of a test tree under --root)."""
        numbers: tuple[str, int, int] | None = self._ask("numbers", path)
        return numbers

    def link_target(self, path: str) -> str | None:
        """What the symlink at `path` names, as written (None: not a link, or no such path); the
        components before it resolved inside the root. systemd masks a unit with a link to /dev/null."""
        target: str | None = self._ask("symlink", path)
        return target

    def driver_majors(self) -> dict[str, dict[str, int]]:
        """The majors /proc/devices gives each driver, {"c": {"nvidia-uvm": 509, ...}, "b": {...}}:
        empty where the node has no readable /proc/devices."""
        majors: dict[str, dict[str, int]] = self._ask("majors", "/proc/devices")
        return majors

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
        if self._plain:  # the OS follows the links: the type of what the path names
            mode = self._read(_followed_type, real)
            if mode is None:
                return None
        else:  # no component is a link: its own type, as the walk read it
            mode = self._lstat_mode(real)
        return "dir" if stat.S_ISDIR(mode) else "file"

    def _device(self, path: str) -> bool:
        real = self.resolve(path) if self._plain else None  # under --root only existence counts
        mode = self._read(_file_type, real) if real is not None else None
        return mode is not None and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode))

    def _numbers(self, path: str) -> tuple[str, int, int] | None:
        real = self.resolve(path)
        if real is None:
            return None
        return self._read(_device_number if self._plain else _device_number_inside, real)

    def _symlink(self, path: str) -> str | None:
        try:
            real = self.real(path, follow_last=False)
        except OSError:
            return None
        if not self._plain:
            mode = self._lstat_mode(real)  # a negated errno where there is nothing
            if mode < 0 or not stat.S_ISLNK(mode):
                return None
        return self._read(_link_target, real)

    def _majors(self, path: str) -> dict[str, dict[str, int]]:
        text, _ = self.read_small(path)
        return parse_proc_devices(text or "")

    def resolve(self, path: str) -> str | None:
        """The real file for an absolute host path (symlinks resolved inside the root), or None."""
        path = _clean(path)  # a relative path in a spec is not relative to cgpu's working directory
        if path not in self._resolved:
            found = self._real(path, True)
            self._resolved[path] = None if isinstance(found, int) else found
        return self._resolved[path]

    def _listdir(self, path: str) -> list[str]:
        real = self.resolve(path)
        if real is None:
            return []
        return self._read(_sorted_listing if self._plain else _sorted_listing_inside, real)

    def _read_small(self, path: str) -> tuple[str | None, str | None]:
        real = self.resolve(path)
        if real is None:
            return None, "does not exist"
        return self._read(_small_text if self._plain else _small_text_inside, real)

    def nvidia_driver_version(self) -> tuple[str | None, str | None]:
        """The running NVIDIA kernel driver version and the file it was read from."""
        text, _ = self.read_small(DRIVER_VERSION_FILES[0])
        version = nvrm_version(text) if text is not None else None
        if version is not None:
            return version, DRIVER_VERSION_FILES[0]
        text, _ = self.read_small(DRIVER_VERSION_FILES[1])
        match = _BARE_VERSION.search(text) if text is not None else None
        return (match.group(1), DRIVER_VERSION_FILES[1]) if match else (None, None)

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

    def device_owner(self, path: str) -> tuple[int, int, int] | None:
        """(permission bits, uid, gid) of the host's device node at `path`, or None where the path is no
        character or block device (a placeholder file under a fake root): what runc gives a node the spec
        leaves unowned, and what a rootless container opens through its bind mount."""
        owner: tuple[int, int, int] | None = self._ask("device_owner", path)
        return owner

    def _device_owner(self, path: str) -> tuple[int, int, int] | None:
        real = self.resolve(path)
        return self._read(_device_owner, real) if real is not None else None
