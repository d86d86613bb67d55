"""A small on-disk cache of answers: JSON dicts stored under a key made of what decides them.

An answer costs a VM boot or a container run, so a doctor run that asks again should read
it back. The key is a JSON-able dict of everything the answer depends on (tool versions,
image digest, VM, host); change any part and it is a different entry. Entries expire after
a time limit and are pruned once they have.

Writes are atomic (`cgpu.node.files.write_private`), and `locked()` serialises two runs that
compute the same key, so the second reads the first's answer instead of booting a second
VM. Nothing here raises for a broken cache: a corrupt file, a read-only directory or a full
disk becomes a warning passed to `warn` and the caller computes a fresh answer.

Only this user can change what is read back (the rules of every cache, `cgpu.node.files`): the cache
root and the entries' directory are private 0700 directories owned by the user; an entry or
lock is used only when it is a regular file of the user's that no one else can write, opened
without following a link or blocking on a FIFO, and an entry over `MAX_ENTRY_BYTES` is not read.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from cgpu.errors import CgpuTypeError
from cgpu.node.files import (
    default_cache_dir,
    key_digest,
    open_private,
    private_directory,
    prune,
    read_private,
    write_private,
)

Warn = Callable[[str, str], None]  # (source, message)

FORMAT = 1
MAX_ENTRY_BYTES = 1 << 20  # a krunkit answer is a few KB
STALE_TEMP_S = 3600.0  # a temp file this old is a write that crashed
_LOCK_POLL_S = 0.05


class AnswerCache:
    """Entries of one kind (`name`) under `directory/name/`, each a file named by its key's hash."""

    def __init__(self, name: str, *, ttl: float, warn: Warn, directory: Path | None = None) -> None:
        self.root = directory or default_cache_dir()
        self.directory = self.root / name
        self.ttl = ttl
        self._warn = warn
        self._warned: set[tuple[str, str]] = set()

    def path(self, key: Mapping[str, Any]) -> Path:
        return self.directory / f"{key_digest(key)}.json"

    def _usable(self, *, create: bool, failing: str) -> bool:
        """Whether the cache root and the entries' directory are private (made when `create`);
        a warning (once per run and reason) when they are not."""
        try:
            private_directory(self.root, create=create)
            private_directory(self.directory, create=create)
            return True
        except OSError as exc:
            if isinstance(exc, FileNotFoundError) and not create:
                return False  # nothing cached yet
            where = exc.filename or str(self.directory)
            message = f"{failing} ({exc.strerror or exc}); checking afresh"
            if (where, message) not in self._warned:
                self._warned.add((where, message))
                self._warn(where, message)
            return False

    def get(self, key: Mapping[str, Any]) -> tuple[dict[str, Any], float] | None:
        """The stored value and when it was stored (epoch seconds), or None when there is no
        fresh entry for exactly this key."""
        path = self.path(key)
        if not self._usable(create=False, failing="the cache directory is not used"):
            return None
        try:
            raw = read_private(path, limit=MAX_ENTRY_BYTES)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._warn(str(path), f"could not read the cached answer ({exc.strerror or exc}); checking afresh")
            return None
        try:
            entry = json.loads(raw)
            stored_at = float(entry["stored_at"])
            value = entry["value"]
            same_key = entry["format"] == FORMAT and entry["key"] == json.loads(json.dumps(key, default=str))
            if not isinstance(value, dict):
                raise CgpuTypeError("value is not an object")
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            self._warn(str(path), f"the cached answer is corrupt ({type(exc).__name__}: {exc}); checking afresh")
            return None
        if not same_key:
            return None
        age = time.time() - stored_at
        if age < -60 or age > self.ttl:  # expired, or stored "in the future" (clock change)
            return None
        return value, stored_at

    def put(self, key: Mapping[str, Any], value: Mapping[str, Any]) -> bool:
        """Store atomically; False (and a warning) when the cache could not be written."""
        path = self.path(key)
        entry = {"format": FORMAT, "key": key, "stored_at": time.time(), "value": value}
        data = json.dumps(entry, indent=1, default=str).encode()
        failing = "could not store the answer in the cache"
        try:
            if not self._usable(create=True, failing=failing):
                return False
            write_private(path, data, durable=True)
        except OSError as exc:
            self._warn(str(path), f"{failing} ({exc.strerror or exc}); the next run will check afresh")
            return False
        self.prune(keep=path)
        return True

    def prune(self, *, keep: Path | None = None) -> None:
        """Remove expired entries, locks unused for as long, and temp files of crashed writes."""
        prune(self.directory, older_than=self.ttl, suffixes=(".json", ".lock"), keep=lambda p: p == keep)
        prune(self.directory, older_than=STALE_TEMP_S, suffixes=(".tmp",), keep=lambda p: False)

    @contextlib.contextmanager
    def locked(self, key: Mapping[str, Any], *, timeout: float) -> Iterator[bool]:
        """Hold this key's lock while computing its answer; yields False (after a warning)
        when the lock could not be had within `timeout` or at all: go on without it."""
        lock_path = self.directory / f"{key_digest(key)}.lock"
        failing = "could not create the cache lock"
        try:
            usable = self._usable(create=True, failing=failing)
            handle = os.fdopen(open_private(lock_path, os.O_RDWR | os.O_CREAT), "r+b") if usable else None
        except OSError as exc:
            self._warn(str(lock_path), f"{failing} ({exc.strerror or exc}); going on without it")
            handle = None
        if handle is None:
            yield False
            return
        with handle:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    _lock(handle)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        self._warn(
                            str(lock_path),
                            f"another cgpu run held this lock for over {timeout:g} s; going on without it",
                        )
                        yield False
                        return
                    time.sleep(_LOCK_POLL_S)
                except OSError as exc:
                    self._warn(str(lock_path), f"could not lock ({exc.strerror or exc}); going on without it")
                    yield False
                    return
            with contextlib.suppress(OSError, NotImplementedError):
                os.utime(handle.fileno())  # in use: not pruned while held
            try:
                yield True
            finally:
                with contextlib.suppress(OSError):
                    _unlock(handle)


def _lock(handle: Any) -> None:
    """Non-blocking exclusive lock; BlockingIOError while someone else holds it."""
    if sys.platform == "win32":
        import msvcrt

        handle.seek(0)
        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except PermissionError as exc:  # msvcrt says EACCES for "locked by another process"
            raise BlockingIOError(str(exc)) from exc
    else:
        import fcntl

        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def _unlock(handle: Any) -> None:
    if sys.platform == "win32":
        import msvcrt

        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
