"""`cgpu watch`: keep an answer file and/or an NFD feature file current as the node changes.

It probes once, then again when what decides the answer may have changed: a file added, removed
or edited in a spec dir, a new NVIDIA driver (`/proc/driver/nvidia/version` under the root), and
at every interval (which also renews the feature file's expiry). Spec dirs are watched with
inotify where the kernel has it (through inotify_simple); everywhere, every POLL_S seconds, a
cheap fingerprint of the same inputs (directory listings with each file's identity and times,
the driver version text) is compared, which covers inotify's gaps: procfs, a spec dir that does
not exist yet, platforms without inotify. Bursts of changes are coalesced (QUIET_S of calm, at
most BURST_S of waiting), so a hundred edits cost a handful of probes. Between wake-ups the
process sleeps in the kernel: ~0 CPU.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import select
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

from cgpu.apis import API_ORDER

POLL_S: Final = 2.0  # fingerprint check; also how soon a driver change is seen
QUIET_S: Final = 0.2  # a burst of changes ends after this much calm ...
BURST_S: Final = 1.0  # ... or after this long, whichever comes first
DRIVER_VERSION: Final = "proc/driver/nvidia/version"
_MAX_VERSION_BYTES: Final = 4096

Probe = Callable[[], dict[str, Any]]
Log = Callable[[str], None]


def fingerprint(spec_dirs: Sequence[str], root: str) -> tuple[Any, ...]:
    """What the answer depends on, cheaply: each spec dir's files with identity and times, and
    the NVIDIA driver version text. Equal fingerprints mean nothing watched changed."""
    dirs: list[Any] = []
    for directory in spec_dirs:
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            dirs.append((directory, exc.errno))
            continue
        files: list[Any] = []
        for name in names:
            try:
                info = os.stat(os.path.join(directory, name))
            except OSError as exc:
                files.append((name, exc.errno))
                continue
            files.append((name, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
        dirs.append((directory, tuple(files)))
    try:
        with open(os.path.join(root, DRIVER_VERSION), "rb") as handle:
            driver: bytes | int | None = handle.read(_MAX_VERSION_BYTES)
    except FileNotFoundError:
        driver = None
    except OSError as exc:
        driver = exc.errno
    return tuple(dirs), driver


class Wakeup:
    """Sleeps until a spec dir changes (inotify) or the timeout passes."""

    def __init__(self, spec_dirs: Sequence[str]) -> None:
        self._inotify: Any = None
        if not sys.platform.startswith("linux"):
            return
        try:
            from inotify_simple import INotify, flags
        except ImportError:  # not installed: polling alone
            return
        try:
            inotify = INotify()
        except OSError:  # out of inotify instances: polling alone
            return
        mask = (
            flags.CREATE
            | flags.DELETE
            | flags.MODIFY
            | flags.CLOSE_WRITE
            | flags.MOVED_FROM
            | flags.MOVED_TO
            | flags.ATTRIB
            | flags.DELETE_SELF
            | flags.MOVE_SELF
        )
        for directory in spec_dirs:
            with contextlib.suppress(OSError):  # missing now: the fingerprint sees it appear
                inotify.add_watch(directory, mask)
        self._inotify = inotify

    @property
    def uses_inotify(self) -> bool:
        return self._inotify is not None

    def wait(self, timeout: float) -> None:
        """Return after `timeout` seconds, or once a burst of spec-dir events has calmed down."""
        if self._inotify is None:
            time.sleep(max(timeout, 0))
            return
        if not self._readable(timeout):
            return
        burst_ends = time.monotonic() + BURST_S
        self._drain()
        while time.monotonic() < burst_ends and self._readable(QUIET_S):
            self._drain()

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None

    def _readable(self, timeout: float) -> bool:
        ready, _, _ = select.select([self._inotify.fileno()], [], [], max(timeout, 0))
        return bool(ready)

    def _drain(self) -> None:
        self._inotify.read(timeout=0)


def summary(report: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The part of a report whose change is worth a log line: each API's state."""
    return tuple((api, report["apis"][api]["state"]) for api in API_ORDER)


def describe(report: dict[str, Any]) -> str:
    provided = ", ".join(report["containers"]) or "none"
    unknown = [api for api in API_ORDER if report["apis"][api]["state"] == "unknown"]
    return f"containers get: {provided}" + (f"; unknown: {', '.join(unknown)}" if unknown else "")


def publish(report: dict[str, Any], *, answer_file: str | None, nfd_file: str | None, expiry: float) -> None:
    """Write the answer file (the JSON report) and the NFD feature file, each atomically."""
    from cgpu.files import write_atomic

    if answer_file:
        from cgpu.report import to_json

        write_atomic(answer_file, (to_json(report) + "\n").encode())
    if nfd_file:
        from cgpu.fleet.nfd import feature_file

        expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=expiry)
        write_atomic(nfd_file, feature_file(report, expires=expires).encode())


def watch(
    probe: Probe,
    *,
    spec_dirs: Sequence[str],
    root: str,
    answer_file: str | None,
    nfd_file: str | None,
    interval: float,
    expiry: float,
    log: Log,
    rounds: int | None = None,
) -> None:
    """Probe and publish, then again on every change and interval; runs until interrupted
    (or for `rounds` probes, for tests). Ctrl-C and SIGTERM unwind through here: a file being
    written is left as it was, its temporary file removed."""
    wakeup = Wakeup(spec_dirs)
    log(
        f"watching {', '.join(spec_dirs) or 'no spec dir'} "
        f"({'inotify' if wakeup.uses_inotify else f'polling every {POLL_S:g} s'}), "
        f"the driver version under {root}, and every {interval:g} s"
    )
    last = None
    try:
        for _ in _probes(wakeup, spec_dirs, root, interval, rounds):
            report = probe()
            publish(report, answer_file=answer_file, nfd_file=nfd_file, expiry=expiry)
            if summary(report) != last:  # log changes of answer, not every refresh
                last = summary(report)
                log(describe(report))
    finally:
        wakeup.close()


def _probes(wakeup: Wakeup, spec_dirs: Sequence[str], root: str, interval: float, rounds: int | None) -> Iterator[None]:
    """Yields each time a probe is due."""
    done = 0
    while rounds is None or done < rounds:
        seen = fingerprint(spec_dirs, root)  # before the probe: a change during it is seen next round
        yield
        done += 1
        due = time.monotonic() + interval
        while (now := time.monotonic()) < due:
            wakeup.wait(min(POLL_S, due - now))
            if fingerprint(spec_dirs, root) != seen:
                break
