"""Where cgpu keeps what it caches: one per-user directory for every cache (parsed CDI specs,
krunkit answers), the key digest that names entries, and the rules every cache keeps so that
no other user can change what cgpu reads back: private 0700 directories owned by the user,
entries that are regular files of the user's, writable by no one else, opened without following
a link or blocking on a FIFO, and size-capped, and written atomically (`write_private`). Every
cache keeps them through this module (the parsed specs, krunkit answers, the engines learned)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping

from cgpu.errors import CgpuError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, TypeAlias

    StrPath: TypeAlias = "str | os.PathLike[str]"


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
    import stat

    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def private_directory(path: StrPath, *, create: bool) -> None:
    """Make sure `path` is a real directory (not a link) owned by this user and writable by no
    one else, creating it 0700 when missing and `create`. Raises FileNotFoundError when missing,
    UnsafeCacheError when it is not private, OSError when it cannot be made."""
    import stat

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
    import stat

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
    (`cgpu.node.files.write_atomic`), its temporary file beside it ending in `.tmp` (each cache's
    pruning removes the ones a killed writer left). Whatever was at `path` is replaced, never
    followed (a link, a FIFO). `durable`: flushed to disk before the rename. Raises OSError
    (UnsafeCacheError among them) when it cannot be written."""
    from cgpu.node.files import write_atomic

    directory = os.path.dirname(os.path.abspath(path))
    private_directory(directory, create=True)
    write_atomic(path, data, mode=0o600, private_dir=directory, durable=durable)


def prune(directory: StrPath, *, older_than: float, suffixes: tuple[str, ...], keep: Callable[[Path], bool]) -> None:
    """Remove this user's regular files in `directory` (a private one) with these suffixes, last
    changed over `older_than` seconds ago and not kept by `keep`. Never follows a link; best effort."""
    import stat
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
