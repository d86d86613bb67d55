"""What the cdi backend keeps from one probe to the next in one process: the spec reader (each spec
file's parse result, and the answers worked out from it), and the host reads those answers were
judged with. `cgpu watch` holds one, a CLI run makes one, a library process keeps one
(`cgpu.backends.memory("cdi")`)."""

from __future__ import annotations

import _thread

from cgpu.cdi.scan import SpecReader
from cgpu.node.host import HostFS, HostTrace


class Memory:
    """The reader, and which of the answers it keeps per file still hold: those judged in the
    current `generation`, which lasts while every host read of the last probe (under one root)
    gives the same result again. A probe `begin`s (False: another thread's probe has it; that one
    judges every device and keeps nothing), reads `generation(host)`, `keep`s its host reads and
    `end`s in a `finally`."""

    __slots__ = ("_generation", "_lock", "_root", "_trace", "reader")

    def __init__(self) -> None:
        self.reader = SpecReader()
        self._lock = _thread.allocate_lock()
        self._root: str | None = None
        self._trace: HostTrace | None = None
        self._generation = object()

    def begin(self) -> bool:
        return self._lock.acquire(blocking=False)

    def end(self) -> None:
        """After a `begin` that returned True."""
        self._lock.release()

    def generation(self, host: HostFS) -> object:
        """What the answers kept for this probe's host are marked with: the last probe's mark when
        every host read it made gives the same result again (its answers hold), else a new one."""
        if self._trace is None or self._root != host.root or not host.replay(self._trace):
            self._generation = object()
        return self._generation

    def keep(self, host: HostFS) -> None:
        """The host reads this probe made (the last probe's among them), for the next to replay."""
        self._root, self._trace = host.root, host.trace

    def forget(self) -> None:
        """Forget the answers, keep the parsed specs: the next probe judges every device again."""
        self.reader.forget()
        self._root = self._trace = None
        self._generation = object()

    def clear(self) -> None:
        """Forget every spec and answer: the next probe is a new process's (bar the disk cache)."""
        self.reader.clear()
        self._root = self._trace = None
        self._generation = object()

    def stats(self) -> dict[str, int]:
        """The reader's counts (`files`, and per file `answers`, `risky`) and the host reads kept."""
        return {**self.reader.stats(), "host_reads": len(self._trace.reads) if self._trace is not None else 0}


def new_memory() -> Memory:
    """What the cdi backend offers `cgpu.backends.Backend.new_memory`."""
    return Memory()
