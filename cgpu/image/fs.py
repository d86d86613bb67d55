"""An image's root filesystem, read without running or extracting it.

Two kinds of tree: the layers of an image (tar streams applied in order, with whiteouts, into
an in-memory index of path -> entry) and a rootfs directory on disk. Symlinks are always
resolved inside the image root, the way the kernel would inside the container: an absolute
target starts at the image root and `..` stops there. Nothing is written outside a temp dir
and no host file outside the rootfs is ever read.

Of the file contents, the tar index keeps only what the checks read (small config files,
package databases, ICD manifests) and the first bytes of every file (for ELF headers).
"""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import dataclass, field
from typing import IO

from cgpu.image.tarstream import PATH_MAX, READ_ERRORS, Member, TarReader, decompressed
from cgpu.node.bounds import Deadline as Deadline  # the image check's names for them too
from cgpu.node.bounds import DeadlineExceeded as DeadlineExceeded
from cgpu.node.bounds import ImageReadError as ImageReadError
from cgpu.problem import Note, Severity

HEAD_BYTES = 64  # what Tree.head() gives: enough for an ELF header's class, endianness and machine
_ELF_KEPT = 20  # of a larger file in a layer, only an ELF identification and machine are kept (memory)
MAX_SYMLINK_HOPS = 40  # what the kernel follows before ELOOP
_MAX_NOTES = 50  # per-member warnings kept; the rest are counted


@dataclass(frozen=True)
class Limits:
    """Caps that keep a hostile or huge image from eating the disk, memory or the afternoon."""

    max_members: int = 400_000  # tar members over all layers (real images: tens of thousands; ~200 MB at the cap)
    max_total_bytes: int = 64 * 1024**3  # uncompressed bytes over all layers; also an engine's export
    max_kept_bytes: int = 512 * 1024**2  # file contents kept in memory, over all files
    max_file_bytes: int = 256 * 1024**2  # one kept file (an rpm database is tens of MB)
    max_layers: int = 500  # layers one manifest may list
    max_path_depth: int = 256  # components of a member name


@dataclass(slots=True)
class Entry:
    kind: str  # "file", "dir", "symlink", "other"
    size: int = 0
    target: str = ""  # symlink target, as stored
    data: bytes | None = None  # whole content, for the files the checks read
    head: bytes = b""  # a layer file's first bytes: all of a small one, the ELF header start of a larger one


@dataclass
class Layer:
    """One layer tar, read: applied to a tree as many times as a manifest lists it."""

    name: str
    entries: dict[str, Entry] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)  # lower-layer paths hidden with everything below them
    opaque: set[str] = field(default_factory=set)  # dirs whose lower-layer contents are hidden


def keep_content(path: str) -> bool:
    """Files whose whole content the checks read (path relative to the root, no leading /)."""
    name = posixpath.basename(path)
    if "vulkan" in path and name.endswith(".json"):
        return True
    if name.startswith(("rpmdb.sqlite", "versionlock.")) or name == "os-release":
        return True
    if path.startswith("etc/ld.so.conf") or (path.startswith("etc/yum.repos.d/") and name.endswith(".repo")):
        return True
    # what `probe --image` reads: the users and groups, OpenCL vendor ICDs, the ROCm release file
    if path in ("etc/passwd", "etc/group") or (path.startswith("etc/OpenCL/vendors/") and name.endswith(".icd")):
        return True
    if path.startswith("opt/rocm") and path.endswith(".info/version"):
        return True
    return path in ("var/lib/dpkg/status", "lib/apk/db/installed", "usr/lib/sysimage/libdnf5/nevras.toml")


def normalize_member(name: str) -> tuple[str | None, str]:
    """A tar member name as a root-relative path, or (None, why) when it escapes the root."""
    cleaned = name.replace("\\", "/") if "\x00" not in name else ""
    if not cleaned:
        return None, "an empty or NUL-containing name"
    absolute = cleaned.startswith("/")
    path = posixpath.normpath("/" + cleaned.lstrip("/")).lstrip("/")
    parts = cleaned.lstrip("/").split("/")
    if ".." in parts:
        # normpath would clamp it at the root; a name that climbs is hostile, not a path in the image
        return None, "a name that climbs out of the root with '..'"
    if path in ("", "."):
        return "", ""
    return path, "absolute" if absolute else ""


class Tree:
    """Path lookups inside an image root; subclasses say how to stat, list and read."""

    def __init__(self, deadline: Deadline | None = None) -> None:
        self.notes: list[Note] = []  # met while reading; the image check makes Problems of them
        self.deadline = deadline or Deadline(None)  # the whole check's, for whoever reads on

    # --- to implement -------------------------------------------------------------
    def _lstat(self, path: str) -> Entry | None:
        raise NotImplementedError

    def _list(self, path: str) -> list[str]:
        raise NotImplementedError

    def _read(self, path: str, entry: Entry, limit: int) -> bytes:
        raise NotImplementedError

    # --- shared -------------------------------------------------------------------
    def resolve(self, path: str, *, follow: bool = True) -> tuple[str, Entry | None]:
        """(resolved root-relative path, its entry or None): symlinks followed inside the root.

        Linear in the length of the path and of the targets met: the parts still to walk are a
        stack, and each step extends the resolved prefix instead of joining all of it again.
        A path or link target longer than PATH_MAX, or more than 40 links, resolves to nothing,
        as the kernel's ENAMETOOLONG and ELOOP would.
        """
        if len(path) > PATH_MAX:
            return path.strip("/")[:PATH_MAX], None
        pending = [p for p in reversed(path.split("/")) if p not in ("", ".")]  # the next part is last
        done: list[str] = []  # the resolved prefixes, each extending the one before
        hops = 0
        while pending:
            part = pending.pop()
            if part == "..":
                if done:
                    done.pop()
                continue
            current = f"{done[-1]}/{part}" if done else part
            entry = self._lstat(current)
            if entry is None:
                return "/".join([current, *reversed(pending)]), None
            if entry.kind == "symlink" and (pending or follow):
                hops += 1
                if hops > MAX_SYMLINK_HOPS or len(entry.target) > PATH_MAX:
                    return current, None
                if entry.target.startswith("/"):
                    done = []
                pending.extend(p for p in reversed(entry.target.split("/")) if p not in ("", "."))
                continue
            if pending and entry.kind != "dir":
                return "/".join([current, *reversed(pending)]), None
            done.append(current)
        final = done[-1] if done else ""
        return final, self._lstat(final) if done else Entry("dir")

    def lookup(self, path: str) -> tuple[str, Entry | None]:
        return self.resolve(path, follow=True)

    def exists(self, path: str) -> bool:
        return self.lookup(path)[1] is not None

    def is_file(self, path: str) -> bool:
        entry = self.lookup(path)[1]
        return entry is not None and entry.kind == "file"

    def listdir(self, path: str) -> list[str]:
        resolved, entry = self.lookup(path)
        if entry is None or entry.kind != "dir":
            return []
        return sorted(self._list(resolved))

    def read(self, path: str, limit: int = 1024**2) -> bytes:
        """A file's content (symlinks followed); ImageReadError when missing or not kept."""
        resolved, entry = self.lookup(path)
        if entry is None:
            asked = path.strip("/")
            via = f"/{asked} points to /{resolved}, which" if resolved != asked else f"/{asked}"
            raise ImageReadError(f"{via} does not exist in the image")
        if entry.kind != "file":
            raise ImageReadError(f"/{resolved} is not a regular file")
        if entry.size > limit:
            raise ImageReadError(f"/{resolved} is {entry.size} bytes, more than the {limit} read")
        return self._read(resolved, entry, limit)

    def head(self, path: str) -> bytes:
        resolved, entry = self.lookup(path)
        if entry is None or entry.kind != "file":
            return b""
        return entry.head if entry.head else self._read(resolved, entry, HEAD_BYTES)[:HEAD_BYTES]


class DirTree(Tree):
    """A rootfs directory on disk; every component is lstat'ed, so no host symlink is followed."""

    def __init__(self, root: str, deadline: Deadline | None = None) -> None:
        super().__init__(deadline)
        self.root = os.path.abspath(root)
        if not os.path.isdir(self.root):
            raise ImageReadError(f"{root} is not a directory")

    def _host(self, path: str) -> str:
        return os.path.join(self.root, *path.split("/")) if path else self.root

    def _lstat(self, path: str) -> Entry | None:
        try:
            st = os.lstat(self._host(path))
        except (OSError, ValueError):
            return None
        if stat.S_ISLNK(st.st_mode):
            try:
                return Entry("symlink", target=os.readlink(self._host(path)))
            except OSError:
                return None
        if stat.S_ISDIR(st.st_mode):
            return Entry("dir")
        if stat.S_ISREG(st.st_mode):
            return Entry("file", size=st.st_size)
        return Entry("other")

    def _list(self, path: str) -> list[str]:
        try:
            return os.listdir(self._host(path))
        except OSError:
            return []

    def _read(self, path: str, entry: Entry, limit: int) -> bytes:
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        try:
            fd = os.open(self._host(path), flags)
        except OSError as exc:
            raise ImageReadError(f"/{path}: {exc.strerror or exc}") from None
        with os.fdopen(fd, "rb") as f:
            return f.read(limit)


@dataclass
class _Budget:
    limits: Limits
    members: int = 0
    total: int = 0
    kept: int = 0


class LayerTree(Tree):
    """The union of an image's layers, applied bottom to top with OCI whiteouts."""

    def __init__(self, limits: Limits | None = None, deadline: Deadline | None = None) -> None:
        super().__init__(deadline)
        self.entries: dict[str, Entry] = {}
        self._children: dict[str, list[str]] | None = None
        self._budget = _Budget(limits or Limits())
        self._unsaid = 0  # per-member warnings past _MAX_NOTES

    def add_layer(self, stream: IO[bytes], name: str) -> None:
        """Apply one layer tar (plain, gzip, bzip2 or xz) on top of the ones before."""
        self.apply(self.read_layer(stream, name))

    def read_layer(self, stream: IO[bytes], name: str) -> Layer:
        """Read one layer tar into a Layer, within the limits and the deadline."""
        layer = Layer(name)
        try:
            reader = TarReader(
                decompressed(stream), max_size=self._budget.limits.max_total_bytes, tick=self.deadline.check
            )
            for member in reader:
                self._add_member(reader, member, layer)
        except READ_ERRORS as exc:
            raise ImageReadError(f"layer {name}: unreadable tar ({_why(exc)})") from None
        if self._unsaid:
            self.notes.append(("warning", f"layer {name}: {self._unsaid} more members like these; ignored"))
            self._unsaid = 0
        return layer

    def apply(self, layer: Layer) -> None:
        if self.entries and (layer.removed or layer.opaque):
            hidden = [path for path in self.entries if _hidden(path, layer.removed, layer.opaque)]
            for path in hidden:  # in place: a copy of a big index would double the peak memory
                del self.entries[path]
        self.entries.update(layer.entries)
        self._children = None

    def _note(self, severity: Severity, message: str) -> None:
        if len(self.notes) < _MAX_NOTES:
            self.notes.append((severity, message))
        else:
            self._unsaid += 1

    def _add_member(self, reader: TarReader, member: Member, layer: Layer) -> None:
        budget = self._budget
        budget.members += 1
        budget.total += member.size
        if budget.members > budget.limits.max_members:
            raise ImageReadError(f"the image has more than {budget.limits.max_members} files; stopped reading")
        if budget.total > budget.limits.max_total_bytes:
            raise ImageReadError(f"the image holds more than {budget.limits.max_total_bytes} bytes; stopped reading")
        shown = member.name if len(member.name) <= 200 else f"{member.name[:200]}..."
        if len(member.name) > PATH_MAX or member.name.count("/") >= budget.limits.max_path_depth:
            self._note(
                "warning",
                f"layer {layer.name}: member {shown!r} is longer than {PATH_MAX} bytes or deeper than "
                f"{budget.limits.max_path_depth} folders; ignored",
            )
            return
        path, note = normalize_member(member.name)
        if path is None:
            self._note("warning", f"layer {layer.name}: member {shown!r} is {note}; ignored")
            return
        if note == "absolute":
            self._note(
                "info", f"layer {layer.name}: member {shown!r} has an absolute name; read relative to the image root"
            )
        if not path:
            return
        parent, base = posixpath.split(path)
        if base == ".wh..wh..opq":
            layer.opaque.add(parent)
            return
        if base.startswith(".wh."):
            layer.removed.add(posixpath.join(parent, base[4:]))
            return
        if member.kind == "dir":
            entry = Entry("dir")
        elif member.kind == "symlink":
            if len(member.linkname) > PATH_MAX:
                self._note(
                    "warning",
                    f"layer {layer.name}: symlink /{path} has a target longer than {PATH_MAX} bytes; "
                    "treated as broken, as the kernel would",
                )
            entry = Entry("symlink", target=member.linkname)
        elif member.kind == "hardlink":
            hardlink = self._hardlink(member, path, layer)
            if hardlink is None:
                return
            entry = hardlink
        elif member.kind == "file":
            entry = self._file(reader, member, path)
        else:
            entry = Entry("other")
        if entry.kind != "dir":
            layer.removed.add(path)  # a non-directory hides whatever a lower layer had below this path
        layer.entries[path] = entry

    def _file(self, reader: TarReader, member: Member, path: str) -> Entry:
        entry = Entry("file", size=member.size)
        if member.size == 0:
            return entry
        budget = self._budget
        keep = keep_content(path) and member.size <= budget.limits.max_file_bytes
        if keep and budget.kept + member.size > budget.limits.max_kept_bytes:
            self._note(
                "warning", f"/{path}: not read, the image's config files exceed {budget.limits.max_kept_bytes} bytes"
            )
            keep = False
        if keep:
            entry.data = reader.read(member.size)
            entry.head = entry.data[:HEAD_BYTES]
            budget.kept += len(entry.data)
        else:
            head = reader.read(HEAD_BYTES)
            entry.head = head if member.size <= HEAD_BYTES else head[:_ELF_KEPT] if head[:4] == b"\x7fELF" else b""
        return entry

    def _hardlink(self, member: Member, path: str, layer: Layer) -> Entry | None:
        target, note = normalize_member(member.linkname)
        source = None if not target else layer.entries.get(target) or self.entries.get(target)
        shown = member.linkname if len(member.linkname) <= 200 else f"{member.linkname[:200]}..."
        if target is None:
            self._note("warning", f"layer {layer.name}: hardlink /{path} -> {shown!r} is {note}; ignored")
            return None
        if source is None or source.kind != "file":
            self._note(
                "warning",
                f"layer {layer.name}: hardlink /{path} -> {shown!r} names no earlier file in the image; ignored",
            )
            return None
        return Entry("file", size=source.size, data=source.data, head=source.head)

    def _lstat(self, path: str) -> Entry | None:
        entry = self.entries.get(path)
        if entry is None and path in self._child_map():
            return Entry("dir")  # a parent the tar never listed on its own
        return entry

    def _list(self, path: str) -> list[str]:
        return list({posixpath.basename(child) for child in self._child_map().get(path, ())})

    def _child_map(self) -> dict[str, list[str]]:
        """Folder -> the paths in it. The paths are the index's own strings (a reference each, not a
        copy of every name: with 400,000 files that is 60 MB); a folder may list one twice."""
        if self._children is None:
            children: dict[str, list[str]] = {}
            for path in self.entries:
                while path:
                    parent = posixpath.dirname(path)
                    known = parent in children  # then its own parents are listed already
                    children.setdefault(parent, []).append(path)
                    if known:
                        break
                    path = parent
            self._children = children
        return self._children

    def head(self, path: str) -> bytes:
        entry = self.lookup(path)[1]
        return entry.head if entry is not None and entry.kind == "file" else b""

    def _read(self, path: str, entry: Entry, limit: int) -> bytes:
        if entry.size <= len(entry.head):
            return entry.head[:limit]
        if entry.data is None:
            raise ImageReadError(f"/{path}: cgpu does not keep this file's content")
        return entry.data[:limit]


def _hidden(path: str, removed: set[str], opaque: set[str]) -> bool:
    """Is a lower-layer path hidden by this layer's whiteouts or replacements?"""
    if path in removed:
        return True
    parent = path
    while parent:
        parent = posixpath.dirname(parent)
        if parent in removed or parent in opaque:
            return True
    return False


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
