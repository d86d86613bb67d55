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


def private_directory(path: StrPath, *, create: bool) -> None:
    """Make sure `path` is a real directory (not a link) owned by this user and writable by no
    one else, creating it 0700 when missing and `create`. Raises FileNotFoundError when missing,
    UnsafeCacheError when it is not private, OSError when it cannot be made."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if not create:
            raise
        _make_parents(os.path.dirname(os.path.abspath(path)))
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # another run made it meanwhile: checked below like any other
            pass
        info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeCacheError(0, "it is a symbolic link, which cgpu does not follow", os.fspath(path))
    if not stat.S_ISDIR(info.st_mode):
        import errno

        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), os.fspath(path))
    if not is_private(info):
        raise UnsafeCacheError(
            0, "it is owned by another user or writable by others (make it yours, mode 700)", os.fspath(path)
        )


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


def open_private(path: StrPath, flags: int, *, mode: int = 0o600) -> int:
    """A file descriptor for a cache file: never through a symbolic link, never blocking on a
    FIFO, and only a regular file owned by this user and writable by no one else."""
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), mode)
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


def read_private(path: StrPath, *, limit: int, touch_after_ns: int | None = None) -> bytes:
    """A cache file's bytes (see `open_private`), at most `limit` of them: a larger (or sparse
    huge) file is refused before it is read. `touch_after_ns`: refresh the file's mtime when it is
    older than that (a cache pruned by last use: this entry is in use)."""
    fd = open_private(path, os.O_RDONLY)
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


def write_private(path: StrPath, data: bytes, *, durable: bool = False) -> None:
    """Store a cache file: its directory made private when missing (and refused when it is not:
    `private_directory`), the file replaced atomically, mode 0600, through the one writer
    (`write_atomic`), its temporary file beside it ending in `.tmp` (each cache's
    pruning removes the ones a killed writer left). Whatever was at `path` is replaced, never
    followed (a link, a FIFO). `durable`: flushed to disk before the rename. Raises OSError
    (UnsafeCacheError among them) when it cannot be written."""
    directory = os.path.dirname(os.path.abspath(path))
    private_directory(directory, create=True)
    write_atomic(path, data, mode=0o600, private_dir=directory, durable=durable)


def prune(directory: StrPath, *, older_than: float, suffixes: tuple[str, ...], keep: Callable[[Path], bool]) -> None:
    """Remove this user's regular files in `directory` (a private one) with these suffixes, last
    changed over `older_than` seconds ago and not kept by `keep`. Never follows a link; best effort."""
    import time
    from pathlib import Path

    cutoff = time.time() - older_than
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        path = Path(entry.path)
        if (
            path.suffix in suffixes
            and stat.S_ISREG(info.st_mode)
            and is_private(info)
            and info.st_mtime < cutoff
            and not keep(path)
        ):
            try:
                os.unlink(path)
            except OSError:
                pass


# --- replacing a file atomically ---------------------------------------------------------------


def check_target(path: str) -> None:
    """Refuse to replace `path` when it is a symbolic link, a directory, not a regular file or
    (POSIX) another user's: whoever made it so may want cgpu, often root, to act on their behalf."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeTargetError(path, f"it is {_kind(info.st_mode)}, which cgpu does not replace; remove it")
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        raise UnsafeTargetError(
            path, f"it belongs to another user (uid {info.st_uid}), so cgpu does not replace it; remove it"
        )


def temp_dir(directory: str) -> str:
    """The private (0700, this user's, not a link) hidden subdirectory of `directory` that
    write_atomic's temporary files live in, created when missing (`directory` itself never is)."""
    path = os.path.join(directory, TEMP_DIR)
    try:
        os.mkdir(path, 0o700)  # never the directory above: a missing one is the caller's to report
    except FileExistsError:
        pass  # checked like any other
    private_directory(path, create=False)
    return path


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | Iterable[bytes],
    *,
    mode: int = 0o644,
    private_dir: str | None = None,
    durable: bool = True,
) -> None:
    """Replace `path` with `data` so that a reader sees the old file or the new one, never a
    part: the one writer of every file cgpu replaces (watch's answer, NFD and metrics files, and
    through `write_private` every cache entry). The data goes to a new temporary file
    with an unguessable name (created exclusively, never through a link), its mode set on the
    open descriptor, flushed to disk when `durable`, then renamed over `path`. The temporary file
    is removed on every failure, Ctrl-C and SIGTERM included. `data` may come in pieces (an
    iterable of bytes: a large answer written without being built whole).

    In a shared directory (the default) the temporary file is made in the private hidden
    subdirectory TEMP_DIR (a watcher of the directory sees one event, on `path`'s own name), and
    a target that is a link, a directory or another user's file is refused (UnsafeTargetError):
    whoever put it there may want cgpu, often root, to act on their behalf. `private_dir`: the
    directory `path` is in is this user's private one (a cache's, checked by the caller): the
    temporary file is made there (that cache's pruning removes what a killed writer left), and
    whatever is at `path` is replaced, a link or FIFO too (only this user could have put it
    there, and the rename replaces a link itself, never its target)."""
    target = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(target))
    if private_dir is None:
        check_target(target)
    # 64 random bits: unguessable, and two writers (processes or threads) do not collide (O_EXCL
    # would refuse the second rather than share a file)
    temporary = os.path.join(
        temp_dir(directory) if private_dir is None else private_dir, f"{name}.{os.urandom(8).hex()}{TEMP_SUFFIX}"
    )
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(temporary, flags, 0o600)
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
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def remove_stale_temporaries(path: str) -> int:
    """Remove the temporary files a killed writer of `path` left (in TEMP_DIR, and the hidden
    `.NAME.*.tmp` files of earlier versions beside it): this user's regular files only, never
    through a link. Returns how many were removed; best effort."""
    directory, name = os.path.split(os.path.abspath(path))
    removed = 0
    for folder, prefix in ((os.path.join(directory, TEMP_DIR), f"{name}."), (directory, f".{name}.")):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if not (entry.name.startswith(prefix) and entry.name.endswith(TEMP_SUFFIX)):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and (not hasattr(os, "geteuid") or info.st_uid == os.geteuid()):
                    os.unlink(entry.path)
                    removed += 1
            except OSError:
                continue
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
