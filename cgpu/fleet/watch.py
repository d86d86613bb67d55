"""`cgpu watch`: keep an answer file, an NFD feature file and a metrics file current as the node changes.

It probes once, then again when what decides the answer may have changed, as the backend says
(`cgpu.backends.Watching`, after each probe): a file added, removed or edited in a spec dir, a
host file's text (the NVIDIA driver version under the root), an engine's file (its binary, package
database or configuration), SIGHUP, and at every interval (which also renews the feature file's
expiry). Spec dirs are watched with inotify where the kernel has it (through inotify_simple): a dir
that does not exist yet, or is removed, is looked for every POLL_S seconds and put under inotify
once it is there. Every POLL_S seconds what inotify cannot see is compared with a cheap
fingerprint: the host files (procfs and sysfs have no inotify) and the engines' files, each watched
dir's identity (a dir replaced or a link retargeted), and, where inotify is missing, the dirs'
listings with each file's identity and times. Bursts of changes are coalesced (QUIET_S of calm, at
most BURST_S of waiting), so a hundred edits cost a handful of probes. Between wake-ups the process
sleeps in the kernel: ~0 CPU.

Writes never end it: a file that cannot be written is named in one log line with the reason, the
other files are still kept current, and the write is tried again at the next wake-up.

Signals: SIGHUP probes again at once. SIGTERM and SIGINT end it at once: during a probe they
interrupt it (every `finally` runs); during a write they are held until the write is whole, so no
temporary file is left; a signal whose exception some code swallowed is still seen at the next
step. Handlers only set flags and wake the sleep through signal.set_wakeup_fd.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from cgpu.apis import API_ORDER
from cgpu.options import DEFAULT_ROOT

if TYPE_CHECKING:
    from cgpu.backends import AnswerInputs, Watching

POLL_S: Final = 2.0  # fingerprint check; also how soon a driver change or a new spec dir is seen
# Engine files (binaries, package databases, configuration) change with an upgrade or an admin's edit, and
# there may be dozens: stat them less often than the spec dirs and the driver version are looked at.
ENGINE_POLL_S: Final = 10.0
QUIET_S: Final = 0.2  # a burst of changes ends after this much calm ...
BURST_S: Final = 1.0  # ... or after this long, whichever comes first
MIN_INTERVAL_S: Final = 1.0
NFD_RATE_S: Final = 1.0  # nfd-worker (>= v0.19) acts on at most one features.d event a second

Probe = Callable[[], dict[str, Any]]
Log = Callable[[str], None]


def host_fingerprint(root: str, host_files: Sequence[str], engine_files: Sequence[str] = ()) -> tuple[Any, ...]:
    """Host files under `root`, looked up as the probe does (links resolved inside the root, a
    FIFO or device refused unopened): `host_files` by their text (at most 64 KiB: procfs and sysfs
    keep no useful times), `engine_files` by their identity (stat only)."""
    if not host_files and not engine_files:
        return ()
    from cgpu.node.host import HostFS

    host = HostFS(root)
    texts = tuple(host.read_small(path) for path in host_files)
    identities = []
    for path in engine_files:
        real = host.resolve(path)
        try:
            info = os.stat(real) if real is not None else None
        except (OSError, ValueError):
            info = None
        identities.append(None if info is None else (info.st_ino, info.st_size, info.st_mtime_ns, info.st_mode))
    return texts, tuple(identities)


def dir_fingerprint(directory: str) -> Any:
    """A dir's listing with each file's identity and times (stat does not open, so a FIFO is harmless)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        return exc.errno
    files: list[Any] = []
    for name in names:
        try:
            info = os.stat(os.path.join(directory, name))
        except OSError as exc:
            files.append((name, exc.errno))
            continue
        files.append((name, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
    return tuple(files)


def _identity(directory: str) -> tuple[int, int] | None:
    try:
        info = os.stat(directory)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if os.path.isdir(directory) else None


class Wakeup:
    """Sleeps until a spec dir changes (inotify), a signal arrives (`signal_fd`) or the timeout passes,
    and keeps each spec dir under inotify while it exists. `host_files` and `engine_files` (host
    paths under `root`) are polled: see `host_fingerprint`."""

    def __init__(
        self,
        spec_dirs: Sequence[str],
        root: str = DEFAULT_ROOT,
        *,
        signal_fd: int | None = None,
        host_files: Sequence[str] = (),
        engine_files: Sequence[str] = (),
    ) -> None:
        self.spec_dirs = list(spec_dirs)
        self.root = root
        self.host_files = list(host_files)
        self.engine_files = list(engine_files)
        self._signal_fd = signal_fd
        self._inotify: Any = None
        self._mask = 0
        self._watches: dict[str, int] = {}  # dir -> watch descriptor (two dirs of one inode share one)
        self._identities: dict[str, tuple[int, int] | None] = {}
        self._seen: Any = None
        self._engines: Any = None  # the engine files' identities when last looked at
        self._engines_due = 0.0  # when they are looked at next (time.monotonic)
        self.newly_watched: list[str] = []
        if sys.platform.startswith("linux"):
            try:
                from inotify_simple import INotify, flags
            except ImportError:  # not installed: polling alone
                pass
            else:
                try:
                    self._inotify = INotify()
                except OSError:  # out of inotify instances: polling alone
                    self._inotify = None
                self._mask = (
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
        for directory in self.spec_dirs:
            self._add(directory)
        self.newly_watched.clear()

    @property
    def uses_inotify(self) -> bool:
        return self._inotify is not None

    def watched(self) -> list[str]:
        return [d for d in self.spec_dirs if d in self._watches]

    def describe(self) -> str:
        if not self.spec_dirs:
            return "no spec dir"
        if not self.uses_inotify:
            return f"{', '.join(self.spec_dirs)} (polling every {POLL_S:g} s)"
        parts = [
            f"{d} (inotify)" if d in self._watches else f"{d} (not there yet: looked for every {POLL_S:g} s)"
            for d in self.spec_dirs
        ]
        return ", ".join(parts)

    def _add(self, directory: str) -> bool:
        if self._inotify is None or directory in self._watches:
            return False
        identity = _identity(directory)
        if identity is None:
            return False
        try:
            descriptor = self._inotify.add_watch(directory, self._mask)
        except OSError:  # gone again, or out of watches: polled
            return False
        self._watches[directory] = descriptor
        self._identities[directory] = identity
        self.newly_watched.append(directory)
        return True

    def set_spec_dirs(self, spec_dirs: Sequence[str]) -> bool:
        """Watch these dirs from now on (the judging engine's, learned by the last probe); True
        when they changed."""
        if list(spec_dirs) == self.spec_dirs:
            return False
        self.spec_dirs = list(spec_dirs)
        for directory in list(self._watches):
            if directory not in self.spec_dirs:
                self._drop(directory)
        for directory in self.spec_dirs:
            self._add(directory)
        self.newly_watched.clear()
        return True

    def set_inputs(self, inputs: AnswerInputs) -> bool:
        """Watch what the backend says the last answer depends on from now on; True when the
        spec dirs changed (the files polled are taken as they are)."""
        self.host_files = list(inputs.host_files)
        self.engine_files = list(inputs.engine_files)
        return self.set_spec_dirs(inputs.spec_dirs)

    def _drop(self, directory: str) -> None:
        descriptor = self._watches.pop(directory, None)
        self._identities.pop(directory, None)
        if descriptor is not None and descriptor not in self._watches.values():
            with contextlib.suppress(OSError):  # already gone with the dir
                self._inotify.rm_watch(descriptor)

    def snapshot(self) -> None:
        """Remember the polled part of the inputs (before a probe: a change during it is seen next)."""
        self._seen = self._polled(engines_now=True)

    def _polled(self, *, engines_now: bool = False) -> Any:
        unwatched = [d for d in self.spec_dirs if d not in self._watches]
        now = time.monotonic()
        if engines_now or now >= self._engines_due:
            self._engines = host_fingerprint(self.root, (), self.engine_files)
            self._engines_due = now + ENGINE_POLL_S
        files = host_fingerprint(self.root, self.host_files)
        return tuple((d, dir_fingerprint(d)) for d in unwatched), files, self._engines

    def poll(self) -> bool:
        """What inotify cannot see changed: the host or engine files, a dir appeared, replaced or went
        away (which puts it under inotify, or takes it off), or, without inotify, a dir's files."""
        changed = False
        for directory in list(self._watches):
            if _identity(directory) != self._identities.get(directory):  # replaced, or a link retargeted
                self._drop(directory)
                changed = True
        for directory in self.spec_dirs:
            changed |= self._add(directory)
        now = self._polled()
        if now != self._seen:
            changed = True
        return changed

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds; True once a burst of spec-dir events has calmed down,
        False on a timeout or a signal."""
        fds = [fd for fd in (self._signal_fd, self._inotify.fileno() if self._inotify else None) if fd is not None]
        if not fds:
            time.sleep(max(timeout, 0))
            return False
        if not self._ready(fds, timeout):
            return False
        if not self._events():
            return False
        burst_ends = time.monotonic() + BURST_S
        while time.monotonic() < burst_ends and self._ready(fds, QUIET_S):
            if not self._events():
                break
        return True

    def _ready(self, fds: list[int], timeout: float) -> bool:
        ready, _, _ = select.select(fds, [], [], max(timeout, 0))
        return bool(ready)

    def _events(self) -> bool:
        """Read what inotify has; False when a signal woke the sleep instead (its byte drained)."""
        if self._signal_fd is not None:
            woke = False
            with contextlib.suppress(OSError):
                while os.read(self._signal_fd, 512):
                    woke = True
            if woke:
                return False
        if self._inotify is None:
            return False
        from inotify_simple import flags

        events = self._inotify.read(timeout=0)
        for event in events:
            if event.mask & (flags.IGNORED | flags.DELETE_SELF | flags.MOVE_SELF):
                for directory in [d for d, wd in self._watches.items() if wd == event.wd]:
                    self._drop(directory)  # the dir went away: looked for again at each poll
        return bool(events)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None


# --- signals ----------------------------------------------------------------------------------


class Control:
    """SIGTERM, SIGINT and SIGHUP for one `watch` run (main thread only; elsewhere nothing is
    installed and the caller's own handling stays)."""

    def __init__(self, terminated: type[BaseException]) -> None:
        self._terminated = terminated
        self.stop: int | None = None
        self.hup = False
        self._holding = False
        self.fd: int | None = None
        self._write_fd: int | None = None
        self._previous: dict[int, Any] = {}
        self._previous_wakeup: int | None = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        wanted = [signal.SIGTERM, signal.SIGINT]
        if hasattr(signal, "SIGHUP"):
            wanted.append(signal.SIGHUP)
        if hasattr(os, "pipe") and os.name == "posix":
            read_fd, write_fd = os.pipe()
            os.set_blocking(read_fd, False)
            os.set_blocking(write_fd, False)
            self.fd, self._write_fd = read_fd, write_fd
            self._previous_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        for signum in wanted:
            self._previous[signum] = signal.signal(signum, self._handler)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if self._write_fd is not None:
            signal.set_wakeup_fd(self._previous_wakeup if self._previous_wakeup is not None else -1)
            for fd in (self.fd, self._write_fd):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self.fd = self._write_fd = None

    def _handler(self, signum: int, _frame: object) -> None:
        if signum == getattr(signal, "SIGHUP", None):
            self.hup = True
            return
        if self.stop is not None:
            return  # the first one is being acted on: a second must not cut the clean-up short
        self.stop = signum
        if not self._holding:
            raise self._exception()

    def _exception(self) -> BaseException:
        return self._terminated() if self.stop == signal.SIGTERM else KeyboardInterrupt()

    def check(self) -> None:
        """Raise for a stop signal that arrived (also one whose exception some code swallowed)."""
        if self.stop is not None:
            raise self._exception()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """SIGTERM and SIGINT recorded, not raised, inside; acted on at the end."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        self.check()


# --- the output files -----------------------------------------------------------------------------


class Output:
    """One file `watch` keeps current: `name` says which in log lines (and in the metrics)."""

    __slots__ = ("failing", "path")
    name = ""
    rate_limited = False  # its dir is watched by a reader that acts on at most one event a second

    def __init__(self, path: str) -> None:
        self.path = path
        self.failing: str | None = None  # why the last write failed; None when it succeeded

    def data(self, report: dict[str, Any], publisher: Publisher) -> bytes | Iterator[bytes]:
        raise NotImplementedError


class AnswerOutput(Output):
    __slots__ = ()
    name = "answer"

    def data(self, report: dict[str, Any], publisher: Publisher) -> bytes | Iterator[bytes]:
        from cgpu.report import json_chunks

        return json_chunks(report)  # streamed: 20,000 devices are 16 MiB of JSON


class FeatureOutput(Output):
    __slots__ = ()
    name = "NFD feature"
    rate_limited = True  # nfd-worker (>= v0.19): NFD_RATE_S

    def data(self, report: dict[str, Any], publisher: Publisher) -> bytes | Iterator[bytes]:
        from cgpu.fleet.nfd import feature_file

        expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=publisher.expiry)
        return feature_file(report, expires=expires).encode()


class MetricsOutput(Output):
    __slots__ = ()
    name = "metrics"

    def data(self, report: dict[str, Any], publisher: Publisher) -> bytes | Iterator[bytes]:
        from cgpu.fleet.metrics import metrics_text

        assert publisher.finished is not None
        finished_at, duration = publisher.finished
        writes = {o.name: o.failing is None for o in publisher.outputs if o is not self}
        return metrics_text(report, finished_at=finished_at, duration=duration, writes=writes).encode()


class Publisher:
    """Writes each output file atomically; a failed write is logged once (and again when the
    reason changes), the others are still written, and `retry` writes the last answer again."""

    def __init__(
        self,
        *,
        answer_file: str | None,
        nfd_file: str | None,
        metrics_file: str | None = None,
        expiry: float,
        log: Log,
    ) -> None:
        # the answer after the feature file (once it is there, the other was tried: a probe's whole
        # round), the metrics last (they say how the others' writes went)
        kinds: list[tuple[type[Output], str | None]] = [
            (FeatureOutput, nfd_file),
            (AnswerOutput, answer_file),
            (MetricsOutput, metrics_file),
        ]
        self.outputs = [kind(path) for kind, path in kinds if path]
        self.expiry = expiry
        self._log = log
        self._last: dict[str, Any] | None = None
        self.finished: tuple[float, float] | None = None  # the last probe's (end, duration)
        self._nfd_not_before = 0.0

    def prepare(self) -> None:
        """Remove what a killed run left, and make the private temporary dirs now: a dir created
        in features.d is an event nfd-worker rate-limits together with the first write's."""
        # Each writer imported now, not after the first probe: a module made among a probe's
        # objects keeps the memory around it from going back to the kernel.
        from cgpu.fleet.metrics import metrics_text  # noqa: F401
        from cgpu.fleet.nfd import feature_file  # noqa: F401
        from cgpu.node.files import TEMP_DIR, remove_stale_temporaries, temp_dir, write_atomic  # noqa: F401
        from cgpu.report import json_chunks  # noqa: F401

        for output in self.outputs:
            removed = remove_stale_temporaries(output.path)
            if removed:
                self._log(f"removed {removed} temporary file(s) a stopped run left for {output.path}")
            directory = os.path.dirname(os.path.abspath(output.path))
            existed = os.path.lexists(os.path.join(directory, TEMP_DIR))
            with contextlib.suppress(OSError):  # reported by the write that needs it
                temp_dir(directory)
                if not existed and output.rate_limited:
                    self._nfd_not_before = time.monotonic() + NFD_RATE_S

    def settle(self) -> None:
        """Once, right after the temporary dir was made in features.d: wait out nfd-worker's
        rate limit, so that the first write's event is not the one it drops (interruptible)."""
        wait = self._nfd_not_before - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self._nfd_not_before = 0.0

    @property
    def failing(self) -> bool:
        return any(output.failing for output in self.outputs)

    def publish(self, report: dict[str, Any], *, finished_at: float, duration: float) -> None:
        self.finished = (finished_at, duration)
        for output in self.outputs:
            self._write(output, report)
        # kept only for a write to retry: a report lists every device (20,000 DRA claims: ~20 MB)
        self._last = report if self.failing else None

    def retry(self) -> None:
        if self._last is not None:
            for output in self.outputs:
                if output.failing:
                    self._write(output, self._last)
            if not self.failing:
                self._last = None

    def _write(self, output: Output, report: dict[str, Any]) -> None:
        from cgpu.node.files import write_atomic, write_failure

        try:
            write_atomic(output.path, output.data(report, self))
        except (OSError, ValueError) as exc:
            why = write_failure(output.path, exc) if isinstance(exc, OSError) else str(exc)
            if why != output.failing:
                self._log(f"cannot write the {output.name} file {output.path}: {why}; trying again at the next wake-up")
            output.failing = why
            return
        if output.failing:
            self._log(f"wrote the {output.name} file {output.path} again")
        output.failing = None


# --- the loop -------------------------------------------------------------------------------------


def summary(report: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The part of a report whose change is worth a log line: each API's state."""
    return tuple((api, report["apis"][api]["state"]) for api in API_ORDER)


def describe(report: dict[str, Any]) -> str:
    provided = ", ".join(report["containers"]) or "none"
    unknown = [api for api in API_ORDER if report["apis"][api]["state"] == "unknown"]
    return f"containers get: {provided}" + (f"; unknown: {', '.join(unknown)}" if unknown else "")


class WatchOptions:
    """How `watch` runs: the spec dirs to watch (before the backend says which; without its
    `inputs`, these alone) and the root the host files are under, the files it keeps (at least
    one), how often it probes at the latest (`interval`, s) and how long the NFD labels live
    (`expiry`, s), where its log lines go, what SIGTERM raises (`terminated`; SIGINT raises
    KeyboardInterrupt), and `rounds`: stop after that many probes (tests; None: until a signal)."""

    __slots__ = (
        "answer_file",
        "expiry",
        "interval",
        "log",
        "metrics_file",
        "nfd_file",
        "root",
        "rounds",
        "spec_dirs",
        "terminated",
    )

    def __init__(
        self,
        *,
        root: str,
        interval: float,
        expiry: float,
        log: Log,
        spec_dirs: Sequence[str] = (),
        answer_file: str | None = None,
        nfd_file: str | None = None,
        metrics_file: str | None = None,
        rounds: int | None = None,
        terminated: type[BaseException] = KeyboardInterrupt,
    ) -> None:
        self.spec_dirs = spec_dirs
        self.root = root
        self.answer_file = answer_file
        self.nfd_file = nfd_file
        self.metrics_file = metrics_file
        self.interval = interval
        self.expiry = expiry
        self.log = log
        self.rounds = rounds
        self.terminated = terminated


def watch(probe: Probe, options: WatchOptions, backend: Watching | None = None) -> None:
    """Probe and publish, then again on every change, SIGHUP and interval; runs until SIGTERM
    (raises `options.terminated`) or SIGINT (KeyboardInterrupt), or for `options.rounds` probes.
    `backend`: what the backend offers a watch (`cgpu.backends.Watching`): what the answer depends
    on, asked before the first probe (None) and after each with its report, and its tidying after
    each probe, once its report is freed and before memory goes back to the kernel."""
    inputs_of = backend.inputs if backend is not None else None
    rounds, log = options.rounds, options.log
    control = Control(options.terminated)
    control.install()
    wakeup: Wakeup | None = None
    try:
        publisher = Publisher(
            answer_file=options.answer_file,
            nfd_file=options.nfd_file,
            metrics_file=options.metrics_file,
            expiry=options.expiry,
            log=log,
        )
        with control.held():
            publisher.prepare()
        wakeup = Wakeup(options.spec_dirs, options.root, signal_fd=control.fd)
        if inputs_of is not None:
            wakeup.set_inputs(inputs_of(None))
        log(f"watching {wakeup.describe()}{_files(wakeup)}, and every {options.interval:g} s")
        last = None
        done = 0
        while rounds is None or done < rounds:
            control.hup = False
            wakeup.snapshot()
            started = time.monotonic()
            report = probe()
            duration = time.monotonic() - started
            control.check()
            publisher.settle()
            with control.held():
                publisher.publish(report, finished_at=time.time(), duration=duration)
            done += 1
            if inputs_of is not None and wakeup.set_inputs(inputs_of(report)):
                log(f"watching the judging engine's spec dirs: {wakeup.describe()}")
            if summary(report) != last:  # log changes of answer, not every refresh
                last = summary(report)
                log(describe(report))
            del report  # not held while asleep (the publisher keeps it only for a failed write)
            _release_memory(backend.tidy if backend is not None else None)
            if rounds is not None and done >= rounds:
                break
            _sleep(wakeup, control, publisher, options.interval, log)
    finally:
        if wakeup is not None:
            wakeup.close()
        control.uninstall()


def _files(wakeup: Wakeup) -> str:
    """The polled files, for the log line: `, 2 host files and 14 engine files under /host`."""
    counts = [(len(wakeup.host_files), "host"), (len(wakeup.engine_files), "engine")]
    shown = [f"{count} {kind} file{'s' if count != 1 else ''}" for count, kind in counts if count]
    return f", {' and '.join(shown)} under {wakeup.root}" if shown else ""


_trim: list[Any] = []


def _release_memory(tidy: Callable[[], None] | None) -> None:
    """Collect what the probe left, let the backend tidy what it keeps (`tidy`: with every
    object of the probe gone), and hand what was freed back to the kernel (glibc keeps a freed
    heap for reuse): the watch's resident size between probes is then that of what it keeps, not
    of the last probe's peak. The last step is Linux's (glibc) only."""
    import gc

    gc.collect()
    if tidy is not None:
        tidy()
    if not sys.platform.startswith("linux"):
        return
    if not _trim:
        try:
            import ctypes

            _trim.append(ctypes.CDLL(None).malloc_trim)
        except (OSError, AttributeError):  # not glibc
            _trim.append(None)
    if _trim[0] is not None:
        _trim[0](0)


def _sleep(wakeup: Wakeup, control: Control, publisher: Publisher, interval: float, log: Log) -> None:
    """Until a probe is due: a change, SIGHUP or the interval. Failed writes are retried at each wake-up."""
    due = time.monotonic() + interval
    while True:
        if control.hup:
            log("SIGHUP: probing again")
            return
        now = time.monotonic()
        if now >= due:
            return
        changed = wakeup.wait(min(POLL_S, due - now))
        control.check()
        if changed or wakeup.poll():
            for directory in wakeup.newly_watched:
                log(f"{directory} is there now: watching it (inotify)")
            wakeup.newly_watched.clear()
            return
        if publisher.failing:
            with control.held():
                publisher.retry()
