"""Opening files cgpu did not write (spec files, host files under --root, image blobs)."""

from __future__ import annotations

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
