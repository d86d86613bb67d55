"""Opening files cgpu did not write (spec files, host files under --root, image blobs)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import IO

from cgpu.errors import CgpuError


class NotRegularFileError(CgpuError, OSError):
    def __init__(self, path: str) -> None:
        super().__init__(errno.EINVAL, "not a regular file (a directory, FIFO, socket or device)", path)


def open_regular(path: str) -> IO[bytes]:
    """Open a file for reading, refusing FIFOs, sockets and devices: reading one could block
    forever (a FIFO), never end (/dev/zero) or act on hardware. The non-blocking open is what
    lets a FIFO be looked at without waiting for a writer."""
    nonblocking = getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, os.O_RDONLY | nonblocking)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFileError(path)
        if nonblocking:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def write_atomic(path: str, data: bytes, *, mode: int = 0o644) -> None:
    """Replace `path` with `data` so that a reader sees the old file or the new one, never a
    part: a hidden temporary file in the same directory (readers such as nfd-worker skip hidden
    files), flushed to disk, then renamed over. The temporary file is removed on every failure,
    Ctrl-C and SIGTERM included."""
    import tempfile

    directory, name = os.path.split(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
