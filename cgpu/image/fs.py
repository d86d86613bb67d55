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
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from cgpu.errors import CgpuError

HEAD_BYTES = 64  # enough for an ELF header's class, endianness and machine


class ImageReadError(CgpuError):
    """The image (or a file in it) could not be read; str() says what and where."""


@dataclass(frozen=True)
class Limits:
    """Caps that keep a hostile or huge image from eating the disk, memory or the afternoon."""

    max_members: int = 2_000_000  # tar members over all layers
    max_total_bytes: int = 64 * 1024**3  # uncompressed bytes over all layers
    max_kept_bytes: int = 512 * 1024**2  # file contents kept in memory, over all files
    max_file_bytes: int = 256 * 1024**2  # one kept file (an rpm database is tens of MB)


@dataclass
class Entry:
    kind: str  # "file", "dir", "symlink", "other"
    size: int = 0
    target: str = ""  # symlink target, as stored
    data: bytes | None = None  # whole content, for the files the checks read
    head: bytes = b""  # first HEAD_BYTES bytes of a file


def keep_content(path: str) -> bool:
    """Files whose whole content the checks read (path relative to the root, no leading /)."""
    name = posixpath.basename(path)
    if "vulkan" in path and name.endswith(".json"):
        return True
    if name.startswith(("rpmdb.sqlite", "versionlock.")) or name == "os-release":
        return True
    if path.startswith("etc/ld.so.conf"):
        return True
    return path in ("var/lib/dpkg/status", "lib/apk/db/installed")


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

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []  # (severity, message) met while reading

    # --- to implement -------------------------------------------------------------
    def _lstat(self, path: str) -> Entry | None:
        raise NotImplementedError

    def _list(self, path: str) -> list[str]:
        raise NotImplementedError

    def _read(self, path: str, entry: Entry, limit: int) -> bytes:
        raise NotImplementedError

    # --- shared -------------------------------------------------------------------
    def resolve(self, path: str, *, follow: bool = True) -> tuple[str, Entry | None]:
        """(resolved root-relative path, its entry or None): symlinks followed inside the root."""
        pending = [p for p in path.split("/") if p not in ("", ".")]
        done: list[str] = []
        hops = 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                if done:
                    done.pop()
                continue
            current = "/".join([*done, part])
            entry = self._lstat(current)
            if entry is None:
                return "/".join([current, *pending]), None
            if entry.kind == "symlink" and (pending or follow):
                hops += 1
                if hops > 40:  # what the kernel allows before ELOOP
                    return current, None
                target = entry.target
                if target.startswith("/"):
                    done = []
                pending = [p for p in target.split("/") if p not in ("", ".")] + pending
                continue
            if pending and entry.kind != "dir":
                return "/".join([current, *pending]), None
            done.append(part)
        final = "/".join(done)
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

    def __init__(self, root: str) -> None:
        super().__init__()
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

    def __init__(self, limits: Limits | None = None) -> None:
        super().__init__()
        self.entries: dict[str, Entry] = {}
        self._children: dict[str, set[str]] | None = None
        self._budget = _Budget(limits or Limits())

    def add_layer(self, stream: IO[bytes], name: str) -> None:
        """Apply one layer tar (plain, gzip, bzip2 or xz) on top of the ones before."""
        layer: dict[str, Entry] = {}
        removed: set[str] = set()  # lower-layer paths hidden with everything below them
        opaque: set[str] = set()  # dirs whose lower-layer contents are hidden
        try:
            archive = tarfile.open(fileobj=stream, mode="r:*")  # seekable: skips file data it need not read
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ImageReadError(f"layer {name}: not a tar stream ({_why(exc)})") from None
        try:
            for member in _members(archive, name):
                self._add_member(archive, member, name, layer, removed, opaque)
        except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
            raise ImageReadError(f"layer {name}: unreadable tar ({_why(exc)})") from None
        finally:
            archive.close()
        if removed or opaque:
            self.entries = {path: entry for path, entry in self.entries.items() if not _hidden(path, removed, opaque)}
        self.entries.update(layer)
        self._children = None

    def _add_member(
        self,
        archive: tarfile.TarFile,
        member: tarfile.TarInfo,
        layer_name: str,
        layer: dict[str, Entry],
        removed: set[str],
        opaque: set[str],
    ) -> None:
        budget = self._budget
        budget.members += 1
        budget.total += max(member.size, 0)
        if budget.members > budget.limits.max_members:
            raise ImageReadError(f"the image has more than {budget.limits.max_members} files; stopped reading")
        if budget.total > budget.limits.max_total_bytes:
            raise ImageReadError(f"the image holds more than {budget.limits.max_total_bytes} bytes; stopped reading")
        path, note = normalize_member(member.name)
        if path is None:
            self.problems.append(("warning", f"layer {layer_name}: member {member.name!r} is {note}; ignored"))
            return
        if note == "absolute":
            self.problems.append(
                (
                    "info",
                    f"layer {layer_name}: member {member.name!r} has an absolute name; read relative to the image root",
                )
            )
        if not path:
            return
        parent, base = posixpath.split(path)
        if base == ".wh..wh..opq":
            opaque.add(parent)
            return
        if base.startswith(".wh."):
            removed.add(posixpath.join(parent, base[4:]))
            return
        if member.isdir():
            entry = Entry("dir")
        elif member.issym():
            entry = Entry("symlink", target=member.linkname)
        elif member.islnk():
            hardlink = self._hardlink(member, path, layer_name, layer)
            if hardlink is None:
                return
            entry = hardlink
        elif member.isfile():
            entry = self._file(archive, member, path)
        else:
            entry = Entry("other")
        if entry.kind != "dir":
            removed.add(path)  # a non-directory hides whatever a lower layer had below this path
        layer[path] = entry

    def _file(self, archive: tarfile.TarFile, member: tarfile.TarInfo, path: str) -> Entry:
        entry = Entry("file", size=member.size)
        if member.size == 0:
            return entry
        budget = self._budget
        keep = keep_content(path) and member.size <= budget.limits.max_file_bytes
        if keep and budget.kept + member.size > budget.limits.max_kept_bytes:
            self.problems.append(
                ("warning", f"/{path}: not read, the image's config files exceed {budget.limits.max_kept_bytes} bytes")
            )
            keep = False
        source = archive.extractfile(member)
        if source is None:
            return entry
        if keep:
            entry.data = source.read(member.size)
            entry.head = entry.data[:HEAD_BYTES]
            budget.kept += len(entry.data)
        else:
            entry.head = source.read(HEAD_BYTES)
        return entry

    def _hardlink(self, member: tarfile.TarInfo, path: str, layer_name: str, layer: dict[str, Entry]) -> Entry | None:
        target, note = normalize_member(member.linkname)
        source = None if not target else layer.get(target) or self.entries.get(target)
        if target is None:
            self.problems.append(
                ("warning", f"layer {layer_name}: hardlink /{path} -> {member.linkname!r} is {note}; ignored")
            )
            return None
        if source is None or source.kind != "file":
            self.problems.append(
                (
                    "warning",
                    f"layer {layer_name}: hardlink /{path} -> {member.linkname!r} "
                    "names no earlier file in the image; ignored",
                )
            )
            return None
        return Entry("file", size=source.size, data=source.data, head=source.head)

    def _lstat(self, path: str) -> Entry | None:
        entry = self.entries.get(path)
        if entry is None and path in self._child_map():
            return Entry("dir")  # a parent the tar never listed on its own
        return entry

    def _list(self, path: str) -> list[str]:
        return list(self._child_map().get(path, ()))

    def _child_map(self) -> dict[str, set[str]]:
        if self._children is None:
            children: dict[str, set[str]] = {}
            for path in self.entries:
                while path:
                    parent, base = posixpath.split(path)
                    siblings = children.setdefault(parent, set())
                    if base in siblings:
                        break
                    siblings.add(base)
                    path = parent
            self._children = children
        return self._children

    def _read(self, path: str, entry: Entry, limit: int) -> bytes:
        if entry.size <= len(entry.head):
            return entry.head[:limit]
        if entry.data is None:
            raise ImageReadError(f"/{path}: cgpu does not keep this file's content")
        return entry.data[:limit]


def _members(archive: tarfile.TarFile, name: str) -> Iterator[tarfile.TarInfo]:
    while True:
        member = archive.next()
        if member is None:
            return
        yield member


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
