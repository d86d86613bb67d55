"""What bounds a read of untrusted data: one deadline over a whole read, and the error of a file or
database that cannot be read. The node's readers (package databases under --root) and the image
check share them."""

from __future__ import annotations

import time

from cgpu.errors import CgpuError


class ImageReadError(CgpuError):
    """The image (or a file in it) could not be read; str() says what and where."""


class DeadlineExceeded(CgpuError):
    """The check's --timeout passed: not an unreadable file but the end of the whole check."""


class Deadline:
    """One time limit over a whole image check, asked between blocks, members and rows."""

    def __init__(self, seconds: float | None, *, start: float | None = None) -> None:
        """`start`: when the limit began on the monotonic clock (the process's start in the CLI:
        run.limit_start), now by default."""
        self.seconds = seconds
        begun = time.monotonic() if start is None else start
        self._end = begun + seconds if seconds is not None else None

    def left(self) -> float | None:
        return None if self._end is None else max(self._end - time.monotonic(), 0.0)

    def expired(self) -> bool:
        return self._end is not None and time.monotonic() > self._end

    def check(self, doing: str = "") -> None:
        if self.expired():
            raise DeadlineExceeded(
                f"{doing + ': ' if doing else ''}not done within --timeout {self.seconds:g} s; stopped"
            )
