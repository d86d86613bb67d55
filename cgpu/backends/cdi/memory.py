"""What the cdi backend keeps from one probe to the next in one process: the spec reader (each spec
file's parse result, and the answers worked out from it), the host reads those answers were
judged with, and what the last probe worked out from all its answers together (`Kept`). `cgpu
watch` holds one, a CLI run makes one, a library process keeps one (`cgpu.backends.memory("cdi")`)."""

from __future__ import annotations

import _thread

from cgpu.cdi.scan import SpecReader
from cgpu.node.host import HostFS, HostTrace

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Hashable
    from typing import Any, TypeVar

    from cgpu.backends.cdi.device import DeviceAnswer

    _Value = TypeVar("_Value")


class Kept:
    """What one probe worked out from all its device answers and the host (the node's facts, who may
    open the nodes, the names a pod asks for), each by name with the key of the other inputs it took:
    a later probe with the same answers in the same generation takes it from here. A new one keeps
    nothing from before."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[str, tuple[Hashable, Any]] = {}

    def get(self, name: str, key: Hashable, work: Callable[[], _Value]) -> _Value:
        """`name`'s value worked out with `key`, else `work()`, kept. Kept values are shared by the
        probes that take them: a caller puts a copy (`fresh`) in its report, never the value."""
        found = self._values.get(name)
        if found is not None and found[0] == key:
            value: _Value = found[1]
            return value
        value = work()
        self._values[name] = (key, value)
        return value


def fresh(value: Any) -> Any:
    """A copy of JSON data's dicts and lists (a kept value, for one report)."""
    if type(value) is dict:
        return {key: fresh(item) for key, item in value.items()}
    if type(value) is list:
        return [fresh(item) for item in value]
    return value


class Memory:
    """The reader, and which of the answers it keeps per file still hold: those judged in the
    current `generation`, which lasts while every host read of the last probe (under one root)
    gives the same result again. A probe `begin`s (False: another thread's probe has it; that one
    judges every device and keeps nothing), reads `generation(host)`, `keep`s its host reads and
    `end`s in a `finally`."""

    __slots__ = ("_generation", "_kept", "_kept_for", "_lock", "_root", "_trace", "reader")

    def __init__(self) -> None:
        self.reader = SpecReader()
        self._lock = _thread.allocate_lock()
        self._root: str | None = None
        self._trace: HostTrace | None = None
        self._generation = object()
        self._kept = Kept()
        self._kept_for: tuple[object, list[DeviceAnswer]] = (self._generation, [])

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

    def kept(self, answers: list[DeviceAnswer], generation: object) -> Kept:
        """What the last probe worked out from all its answers, where those were these same objects
        (each device's spec, entry, findings and what blocks it) judged in this `generation`; else a
        new `Kept` that this probe fills for the next."""
        kept_in, last = self._kept_for
        if kept_in is not generation or len(last) != len(answers) or not all(map(_same_answer, answers, last)):
            self._kept, self._kept_for = Kept(), (generation, answers)
        return self._kept

    def forget(self) -> None:
        """Forget the answers, keep the parsed specs: the next probe judges every device again."""
        self.reader.forget()
        self._forget_host()

    def clear(self) -> None:
        """Forget every spec and answer: the next probe is a new process's (bar the disk cache)."""
        self.reader.clear()
        self._forget_host()

    def _forget_host(self) -> None:
        self._root = self._trace = None
        self._generation = object()
        self._kept, self._kept_for = Kept(), (self._generation, [])

    def stats(self) -> dict[str, int]:
        """The reader's counts (`files`, and per file `answers`, `risky`) and the host reads kept."""
        return {**self.reader.stats(), "host_reads": len(self._trace.reads) if self._trace is not None else 0}


def _same_answer(one: DeviceAnswer, other: DeviceAnswer) -> bool:
    device, before = one.device, other.device
    return (
        device.spec is before.spec
        and device.device is before.device
        and device.qualified_name == before.qualified_name
        and one.findings is other.findings
        and one.missing is other.missing
        and one.same is other.same
        and one.mismatch == other.mismatch
        and one.risky is other.risky
    )


def new_memory() -> Memory:
    """What the cdi backend offers `cgpu.backends.Backend.new_memory`."""
    return Memory()
