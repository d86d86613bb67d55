"""Health of a running `cgpu watch`, for a container's probes: the files it keeps are its
heartbeat. Every probe rewrites them (at least once an --interval), so a file older than a few
intervals means the watch is stuck or cannot write; a file that is there at all means the first
answer has been written (readiness)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

# How far in the future a file's time may be and still count as just written: a file system
# whose clock runs a little ahead of this one (NFS, a VM's shared folder).
FUTURE_SLACK_S = 2.0


def check_age(paths: Sequence[str | None], max_age: float) -> int:
    """0 when every given path is a regular file last written at most `max_age` seconds ago,
    else 1 with one line on stderr per file that is not. A file dated in the future is stale:
    its age says nothing of when the watch last wrote it (the clock was set back, or something
    else set its time)."""
    import stat

    from cgpu.terminal import escape

    bad = 0
    for path in [p for p in paths if p]:
        try:
            info = os.lstat(path)
        except OSError as exc:
            print(f"cgpu watch: {escape(path)}: not written yet ({exc.strerror or exc})", file=sys.stderr)
            bad += 1
            continue
        if not stat.S_ISREG(info.st_mode):
            print(f"cgpu watch: {escape(path)}: not a regular file", file=sys.stderr)
            bad += 1
            continue
        age = time.time() - info.st_mtime
        if age < -FUTURE_SLACK_S:
            message = f"dated {-age:.0f} s in the future: the clock was set back or something else set its time"
            print(f"cgpu watch: {escape(path)}: {message}", file=sys.stderr)
            bad += 1
        elif age > max_age:
            message = f"last written {age:.0f} s ago (more than {max_age:g} s)"
            print(f"cgpu watch: {escape(path)}: {message}", file=sys.stderr)
            bad += 1
    return 1 if bad else 0
