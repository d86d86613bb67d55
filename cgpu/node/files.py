"""The files cgpu opens and writes: opening files cgpu did not write (spec files, host files
under --root, image blobs) without blocking or acting on a device; the one writer of the files
cgpu replaces (`write_atomic`: watch's answer, NFD feature and metrics files, and every cache
entry through `write_private`); and where cgpu keeps what it caches: one per-user directory for
every cache (parsed CDI specs, krunkit answers, the engines learned), the key digest that names
entries, and the rules every cache keeps so that no other user can change what cgpu reads back:
private 0700 directories owned by the user, entries that are regular files of the user's,
writable by no one else, opened without following a link or blocking on a FIFO, size-capped,
and written atomically."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys

from cgpu.errors import CgpuError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from pathlib import Path
    from typing import IO, Any, TypeAlias

    StrPath: TypeAlias = "str | os.PathLike[str]"

TEMP_DIR = ".cgpu-tmp"  # hidden: nfd-worker and most readers of a dir skip dot-files
TEMP_SUFFIX = ".tmp"


class NotRegularFileError(CgpuError, OSError):
    def __init__(self, path: str, what: str = "a directory, FIFO, socket or device") -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({what})", path)


class UnsafeTargetError(CgpuError, OSError):
    """A file to be replaced that is a link, a directory or another user's: not written."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(errno.EPERM, why, path)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


_reopen_by_fd: list[bool] = []  # [whether /proc/self/fd can reopen an O_PATH descriptor], learned once


def open_regular(path: str, *, follow_links: bool = True) -> IO[bytes]:
    """Open a file for reading, refusing FIFOs, sockets and devices without opening them:
    reading one could block forever (a FIFO), never end (/dev/zero), and opening a device can act
    on hardware. On Linux the path is first opened with O_PATH (which opens nothing), its type
    checked on that descriptor, and only a regular file is then opened, through /proc/self/fd:
    the same inode, so nothing can be swapped in between. Elsewhere a stat comes first and the
    open is non-blocking, its type checked again on the descriptor. `follow_links=False` refuses a
    symbolic link as the last component (a caller that resolved the links itself)."""
    nofollow = 0 if follow_links else getattr(os, "O_NOFOLLOW", 0)
    nonblocking = getattr(os, "O_NONBLOCK", 0)
    o_path = getattr(os, "O_PATH", 0)
    if o_path and _reopen_by_fd != [False]:
        handle = os.open(path, o_path | nofollow)
        try:
            mode = os.fstat(handle).st_mode
            if not stat.S_ISREG(mode):
                raise NotRegularFileError(path, _kind(mode))
            try:
                fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | nonblocking)
            except FileNotFoundError:  # no /proc: the portable way from now on
                if _reopen_by_fd:
                    raise
                _reopen_by_fd.append(False)
                fd = -1
            else:
                if not _reopen_by_fd:
                    _reopen_by_fd.append(True)
        finally:
            os.close(handle)
        if fd >= 0:
            return _checked(fd, path, nonblocking)
    info = os.stat(path, follow_symlinks=follow_links)
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularFileError(path, _kind(info.st_mode))
    return _checked(os.open(path, os.O_RDONLY | nonblocking | nofollow), path, nonblocking)


def _checked(fd: int, path: str, nonblocking: int) -> IO[bytes]:
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(path, _kind(mode))
        if nonblocking:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


# --- where caches are kept, and the rules every cache keeps ------------------------------------


def default_cache_dir() -> Path:
    """`CGPU_CACHE_DIR`, else the platform's per-user cache directory, `cgpu` inside it."""
    from pathlib import Path

    return Path(default_cache_dir_text())


def default_cache_dir_text() -> str:
    """`default_cache_dir()` as a str, without importing pathlib (the CLI's start-up path)."""
    override = os.environ.get("CGPU_CACHE_DIR")
    if override:
        return override
    home = os.path.expanduser("~")  # what Path.home() is
    if sys.platform == "darwin":
        return os.path.join(home, "Library", "Caches", "cgpu")
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
        return os.path.join(base, "cgpu", "Cache")
    base = os.environ.get("XDG_CACHE_HOME")
    if not base or not os.path.isabs(base):  # the XDG spec says to ignore relative paths
        base = os.path.join(home, ".cache")
    return os.path.join(base, "cgpu")


def key_digest(key: Mapping[str, Any]) -> str:
    import hashlib  # here, not at the top: default_cache_dir is on the CLI's start-up path
    import json

    text = json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


# --- the rules every cache keeps: only this user can change what cgpu reads back ---------------


class UnsafeCacheError(CgpuError, OSError):
    """A cache directory or entry that another user could have written (or a link, a FIFO, an
    oversized file): not used."""


def is_private(info: os.stat_result) -> bool:
    """Owned by this user and writable by no one else (Windows: no such owner check)."""
    if sys.platform == "win32":
        return True
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


# --- directories opened once: every entry reached through the descriptor ------------------------

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
# `*at` calls (dir_fd=): every POSIX system; without them (Windows) a directory is used by its path
_AT = hasattr(os, "O_DIRECTORY") and os.open in os.supports_dir_fd and os.rename in os.supports_dir_fd


class OpenDir:
    """A directory opened once (O_DIRECTORY | O_NOFOLLOW) and checked on its descriptor: every entry
    cgpu reads, writes, lists or removes there is reached through that descriptor (`dir_fd=`), so
    a link swapped in for the directory's path after the check redirects nothing. `path` names it
    in messages. Without `*at` calls (Windows) the entries are reached by path."""

    __slots__ = ("fd", "path")

    def __init__(self, path: str, fd: int | None) -> None:
        self.path = path
        self.fd = fd

    def at(self, name: str) -> str:
        """What to pass with `dir_fd=self.fd` for the entry `name`."""
        return name if self.fd is not None else os.path.join(self.path, name)

    def entries(self) -> list[os.DirEntry[str]]:
        with os.scandir(self.fd if self.fd is not None else self.path) as listing:
            return list(listing)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> OpenDir:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _open_dir(path: str, parent: OpenDir | None = None) -> tuple[OpenDir, os.stat_result]:
    """`path` (a name in `parent` when given) opened as a directory, never through a link as its
    last component, with its fstat. Raises OSError; UnsafeCacheError naming a link."""
    shown = path if parent is None else os.path.join(parent.path, path)
    where = path if parent is None else parent.at(path)
    dir_fd = None if parent is None else parent.fd
    if not _AT:
        info = os.lstat(where)
        if stat.S_ISLNK(info.st_mode):
            raise UnsafeCacheError(0, "it is a symbolic link, which cgpu does not follow", shown)
        return OpenDir(shown, None), info
    try:
        fd = os.open(where, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_link(where, dir_fd):
            raise UnsafeCacheError(0, "it is a symbolic link, which cgpu does not follow", shown) from None
        raise
    try:
        return OpenDir(shown, fd), os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def _is_link(path: str, dir_fd: int | None = None) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def open_private_directory(path: StrPath, *, create: bool, parent: OpenDir | None = None) -> OpenDir:
    """The directory `path` (a name in `parent` when given) opened once, when it is a real
    directory (not a link) owned by this user and writable by no one else, created 0700 when
    missing and `create`. Raises FileNotFoundError when missing, UnsafeCacheError when it is not
    private, OSError when it cannot be made."""
    path = os.fspath(path)
    try:
        opened, info = _open_dir(path, parent)
    except FileNotFoundError:
        if not create:
            raise
        if parent is None:
            _make_parents(os.path.dirname(os.path.abspath(path)))
        try:
            os.mkdir(path if parent is None else parent.at(path), 0o700, dir_fd=None if parent is None else parent.fd)
        except FileExistsError:  # another run made it meanwhile: checked below like any other
            pass
        opened, info = _open_dir(path, parent)
    if not stat.S_ISDIR(info.st_mode):
        opened.close()
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), opened.path)
    if not is_private(info):
        opened.close()
        raise UnsafeCacheError(
            0, "it is owned by another user or writable by others (make it yours, mode 700)", opened.path
        )
    return opened


def private_directory(path: StrPath, *, create: bool) -> None:
    """Make sure `path` is a real directory (not a link) owned by this user and writable by no
    one else (`open_private_directory`, closed again)."""
    open_private_directory(path, create=create).close()


def _make_parents(path: str) -> None:
    """Create the missing directories of `path`, each 0700 whatever the umask (with umask 0,
    `mkdir -p` would make `~/.cache` 0777, and another user could move the cache aside).
    Directories that exist are left as they are."""
    missing = []
    while not os.path.lexists(path) and path != os.path.dirname(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:  # another run made it meanwhile
            continue
        os.chmod(directory, 0o700)  # mkdir passes its mode through the umask: one taking the owner bits too


def _in_private_dir(path: StrPath, directory: OpenDir | None, *, create: bool) -> tuple[OpenDir, str, bool]:
    """(the private dir a cache file is in, its name there, whether the dir was opened here: to close)."""
    if directory is not None:
        return directory, os.fspath(path), False
    folder, name = os.path.split(os.path.abspath(path))
    return open_private_directory(folder, create=create), name, True


def open_private(path: StrPath, flags: int, *, mode: int = 0o600, directory: OpenDir | None = None) -> int:
    """A file descriptor for a cache file: reached through its private directory opened once (or
    `directory`, `path` then a name in it), never through a symbolic link, never blocking on a
    FIFO, and only a regular file owned by this user and writable by no one else."""
    folder, name, opened = _in_private_dir(path, directory, create=False)
    try:
        fd = os.open(
            folder.at(name), flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), mode, dir_fd=folder.fd
        )
    finally:
        if opened:
            folder.close()
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not is_private(info):
            raise UnsafeCacheError(0, "it is not a regular file of yours that no one else can write", os.fspath(path))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_private(
    path: StrPath, *, limit: int, touch_after_ns: int | None = None, directory: OpenDir | None = None
) -> bytes:
    """A cache file's bytes (see `open_private`), at most `limit` of them: a larger (or sparse
    huge) file is refused before it is read. `touch_after_ns`: refresh the file's mtime when it is
    older than that (a cache pruned by last use: this entry is in use)."""
    fd = open_private(path, os.O_RDONLY, directory=directory)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if info.st_size > limit:
            raise UnsafeCacheError(0, f"it is {info.st_size} bytes, above the cap of {limit}", os.fspath(path))
        data = handle.read(limit + 1)
        if len(data) > limit:
            raise UnsafeCacheError(0, f"it is above the cap of {limit} bytes", os.fspath(path))
        if touch_after_ns is not None and os.utime in os.supports_fd:
            import time

            if time.time_ns() - info.st_mtime_ns > touch_after_ns:
                os.utime(handle.fileno())
    return data


def write_private(path: StrPath, data: bytes, *, durable: bool = False, directory: OpenDir | None = None) -> None:
    """Store a cache file: its directory (or `directory`, `path` then a name in it) made private
    when missing, opened once and refused when it is not private (`open_private_directory`), the
    file replaced atomically, mode 0600, its temporary file beside it ending in `.tmp` (each
    cache's pruning removes the ones a killed writer left). Whatever was at `path` is replaced,
    never followed (a link, a FIFO). `durable`: flushed to disk before the rename. Raises OSError
    (UnsafeCacheError among them) when it cannot be written."""
    folder, name, opened = _in_private_dir(path, directory, create=True)
    try:
        _replace_at(folder, name, data, mode=0o600, temporaries=folder, durable=durable)
    finally:
        if opened:
            folder.close()


def prune(directory: StrPath, *, older_than: float, suffixes: tuple[str, ...], keep: Callable[[Path], bool]) -> None:
    """Remove this user's regular files in `directory` (a private one, opened once) with these
    suffixes, last changed over `older_than` seconds ago and not kept by `keep`. Never follows a
    link; best effort."""
    import time
    from pathlib import Path

    cutoff = time.time() - older_than
    try:
        folder = open_private_directory(directory, create=False)
    except OSError:
        return
    with folder:
        try:
            entries = folder.entries()
        except OSError:
            return
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            path = Path(directory, entry.name)
            if (
                path.suffix in suffixes
                and stat.S_ISREG(info.st_mode)
                and is_private(info)
                and info.st_mtime < cutoff
                and not keep(path)
            ):
                with contextlib.suppress(OSError):
                    os.unlink(folder.at(entry.name), dir_fd=folder.fd)


# --- replacing a file atomically ---------------------------------------------------------------


def open_output_directory(path: str) -> OpenDir:
    """The directory of a file cgpu replaces (watch's outputs), opened once. A directory that is a
    symbolic link is followed only when no other user could have made or swapped it: the link is
    this user's or root's, in a directory of this user's or root's that no one else can write
    (or sticky); otherwise UnsafeTargetError (whoever swaps an output dir for a link wants root's
    cgpu to write where they choose)."""
    try:
        return _open_dir(path)[0]
    except UnsafeCacheError:
        if not _trusted_link(path):
            raise UnsafeTargetError(
                path,
                "it is a symbolic link another user could have made or swapped, which cgpu does not write "
                "through; name the real directory",
            ) from None
        return _open_dir(os.path.realpath(path))[0]


def _trusted_link(path: str) -> bool:
    if not hasattr(os, "geteuid"):
        return True
    trusted = (os.geteuid(), 0)
    try:
        link = os.lstat(path)
        parent = os.stat(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    open_to_others = parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not parent.st_mode & stat.S_ISVTX
    return link.st_uid in trusted and parent.st_uid in trusted and not open_to_others


def check_target(path: str) -> None:
    """Refuse to replace `path` when it is a symbolic link, a directory, not a regular file or
    (POSIX) another user's: whoever made it so may want cgpu, often root, to act on their behalf."""
    folder, name = os.path.split(os.path.abspath(path))
    with open_output_directory(folder) as opened:
        _check_target_at(opened, name)


def _check_target_at(folder: OpenDir, name: str) -> None:
    path = os.path.join(folder.path, name)
    try:
        info = os.lstat(folder.at(name), dir_fd=folder.fd)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeTargetError(path, f"it is {_kind(info.st_mode)}, which cgpu does not replace; remove it")
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        raise UnsafeTargetError(
            path, f"it belongs to another user (uid {info.st_uid}), so cgpu does not replace it; remove it"
        )


def _temp_dir_at(folder: OpenDir) -> OpenDir:
    """The private hidden TEMP_DIR of an opened output directory, created when missing."""
    try:
        os.mkdir(folder.at(TEMP_DIR), 0o700, dir_fd=folder.fd)  # never the directory above
    except FileExistsError:
        pass  # checked like any other
    return open_private_directory(TEMP_DIR, create=False, parent=folder)


def temp_dir(directory: str) -> str:
    """The private (0700, this user's, not a link) hidden subdirectory of `directory` that
    write_atomic's temporary files live in, created when missing (`directory` itself never is)."""
    with open_output_directory(directory) as folder:
        _temp_dir_at(folder).close()
    return os.path.join(directory, TEMP_DIR)


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | Iterable[bytes],
    *,
    mode: int = 0o644,
    durable: bool = True,
) -> None:
    """Replace `path` with `data` so that a reader sees the old file or the new one, never a
    part: the one writer of every file cgpu replaces in a shared directory (watch's answer, NFD
    and metrics files; a cache's entries go through `write_private`). The directory is opened
    once (`open_output_directory`), and everything after happens through that descriptor: the
    target is checked (a link, a directory or another user's file is refused, UnsafeTargetError:
    whoever put it there may want cgpu, often root, to act on their behalf), the data goes to a
    new temporary file with an unguessable name in the private hidden subdirectory TEMP_DIR (a
    watcher of the directory sees one event, on `path`'s own name), created exclusively, never
    through a link, its mode set on the open descriptor, flushed to disk when `durable`, then
    renamed over `path`. The temporary file is removed on every failure, Ctrl-C and SIGTERM
    included. `data` may come in pieces (an iterable of bytes: a large answer written without
    being built whole)."""
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    with open_output_directory(directory) as folder:
        _check_target_at(folder, name)
        with _temp_dir_at(folder) as temporaries:
            _replace_at(folder, name, data, mode=mode, temporaries=temporaries, durable=durable)


def _replace_at(
    folder: OpenDir, name: str, data: bytes | Iterable[bytes], *, mode: int, temporaries: OpenDir, durable: bool
) -> None:
    """Write `data` to a new temporary file in `temporaries`, then rename it over `name` in `folder`."""
    # 64 random bits: unguessable, and two writers (processes or threads) do not collide (O_EXCL
    # would refuse the second rather than share a file)
    temporary = f"{name}.{os.urandom(8).hex()}{TEMP_SUFFIX}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(temporaries.at(temporary), flags, 0o600, dir_fd=temporaries.fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(data, bytes):
                handle.write(data)
            else:
                for piece in data:
                    handle.write(piece)
            handle.flush()
            if hasattr(os, "fchmod"):
                os.fchmod(handle.fileno(), mode)
            if durable:
                os.fsync(handle.fileno())
        os.replace(temporaries.at(temporary), folder.at(name), src_dir_fd=temporaries.fd, dst_dir_fd=folder.fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporaries.at(temporary), dir_fd=temporaries.fd)
        raise


def remove_stale_temporaries(path: str) -> int:
    """Remove the temporary files a killed writer of `path` left (in TEMP_DIR, and the hidden
    `.NAME.*.tmp` files of earlier versions beside it): this user's regular files only, never
    through a link, each dir opened once. Returns how many were removed; best effort."""
    directory, name = os.path.split(os.path.abspath(path))
    removed = 0
    try:
        folder = open_output_directory(directory)
    except OSError:
        return 0
    with folder:
        try:
            temporaries: OpenDir | None = open_private_directory(TEMP_DIR, create=False, parent=folder)
        except OSError:
            temporaries = None
        places = [(folder, f".{name}.")] + ([(temporaries, f"{name}.")] if temporaries is not None else [])
        for place, prefix in places:
            try:
                entries = place.entries()
            except OSError:
                continue
            for entry in entries:
                if not (entry.name.startswith(prefix) and entry.name.endswith(TEMP_SUFFIX)):
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode) and (not hasattr(os, "geteuid") or info.st_uid == os.geteuid()):
                        os.unlink(place.at(entry.name), dir_fd=place.fd)
                        removed += 1
                except OSError:
                    continue
        if temporaries is not None:
            temporaries.close()
    return removed


def write_failure(path: str, exc: OSError) -> str:
    """Why writing `path` failed, in words (with the errno's own text after them)."""
    if isinstance(exc, CgpuError):
        return exc.strerror or str(exc)
    directory = os.path.dirname(os.path.abspath(path))
    reasons = {
        errno.ENOSPC: "the file system is full",
        errno.EDQUOT: "the disk quota is used up",
        errno.EROFS: "the file system is read-only",
        errno.EACCES: f"permission denied (cgpu cannot write {directory})",
        errno.EPERM: f"operation not permitted in {directory}",
        errno.ENOENT: f"its directory {directory} does not exist",
        errno.ENOTDIR: f"a part of {directory} is not a directory",
        errno.EIO: "an I/O error on the disk",
    }
    why = reasons.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{why} ({text})" if why else text
