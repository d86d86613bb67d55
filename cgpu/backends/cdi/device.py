"""What one CDI device gives a container: its findings per API, what blocks it, a driver mismatch."""

from __future__ import annotations

import _thread
from operator import is_ as _is

from cgpu.apis import CONTAINER_APIS
from cgpu.backends.cdi.rules import PARTIAL, PROVIDED, Finding
from cgpu.cdi.model import ResolvedDevice

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

APIS = CONTAINER_APIS  # metal: the report's own evidence


class DeviceAnswer:
    # Plain classes, not dataclasses, in this backend: creating a dataclass costs about a
    # millisecond at import, a visible share of the CLI's start-up (docs/cdi.md#speed).
    __slots__ = ("device", "findings", "mismatch", "missing", "risky", "same")

    def __init__(
        self,
        device: ResolvedDevice,
        findings: dict[str, Finding],
        missing: list[tuple[str, str]],
        mismatch: tuple[str, str, str] | None = None,
        same: object = None,
        risky: Sequence[str] = (),
    ) -> None:
        self.device = device
        self.findings = findings  # may be the same dict as another spec's device: equal findings are one
        # one object for the devices of one spec with the same edits (a GPU's index and UUID
        # names): what a container gets with them is one device
        self.same = findings if same is None else same
        self.mismatch = mismatch  # (user-space version, kernel module version, where it was read)
        self.missing = missing  # (host path, "the mount source /x (for /y) does not exist on the host")
        self.risky = risky  # what its own edits (not its spec's) hand the container too much: `risky_edits`

    @property
    def name(self) -> str:
        return self.device.qualified_name

    @property
    def blocked(self) -> bool:
        return bool(self.missing)

    @property
    def apis(self) -> list[str]:
        if self.blocked:
            return []
        return [api for api in APIS if self.findings[api].state == PROVIDED]

    @property
    def status(self) -> str:
        if self.blocked:
            return "blocked"
        return "partial" if any(f.state == PARTIAL for f in self.findings.values()) else "ok"


class ByIdentity:
    """What the last probe worked out per object (a spec's origin, its edits), for the next probe:
    the reader hands back the same objects while files are unchanged. Kept by id, with the objects
    themselves held (an id names an object only while it lives).

    A probe `begin`s (False: another thread's probe has it; work without it), `keep`s what it used,
    `commit`s, and `end`s in a `finally`. The table is changed in place, so a probe over unchanged
    files leaves no new object behind, and the keys of new objects are made in one run at the end,
    so that 20,000 of them fill a few of CPython's memory pools instead of being spread among the
    probe's short-lived objects (a kept object anywhere in an arena keeps the whole arena, 1 MiB,
    from going back to the kernel)."""

    __slots__ = ("_held", "_lock", "_next", "_next_values", "_values")

    def __init__(self) -> None:
        self._values: dict[int, object] = {}  # id(object) -> what was worked out for it
        self._held: list[object] = []  # the objects whose ids are the keys
        self._next: list[object] = []
        self._next_values: list[object] = []
        self._lock = _thread.allocate_lock()

    def get(self, key: object) -> Any:
        return self._values.get(id(key))

    def values(self) -> Iterable[Any]:
        return self._values.values()

    def __len__(self) -> int:
        return len(self._values)

    def begin(self) -> bool:
        if not self._lock.acquire(blocking=False):
            return False
        self._next, self._next_values = [], []  # what an unfinished probe kept
        return True

    def by_id(self) -> Callable[[int], Any]:
        """`get` by an object's id, for a loop over thousands of objects (no method call each)."""
        return self._values.get

    def keep(self, key: object, value: object) -> None:
        self._next.append(key)
        self._next_values.append(value)

    def keep_all(self, keys: list[object], values: list[object]) -> None:
        self._next.extend(keys)
        self._next_values.extend(values)

    def commit(self) -> None:
        """From now on, exactly what this probe kept (each key once)."""
        held, values = self._next, self._next_values
        self._next, self._next_values = [], []
        table = self._values
        if len(held) == len(table) and all(map(_is, map(table.get, map(id, held)), values)):
            return  # the same objects with the same values: a probe over unchanged files
        self._held = held + self._held  # while the table changes, every key's object is held
        ids = set(map(id, held))
        for stale in [key for key in table if key not in ids]:
            del table[stale]
        for key, value in zip(held, values, strict=True):
            if table.get(id(key)) is not value:
                table[id(key)] = value  # an existing key object stays; a new one is made here
        self._held = held

    def take(self, keys: Sequence[object]) -> list[object]:
        """Let go of `keys` (made anew elsewhere): their values in order, None for a key it lacks."""
        table = self._values
        values = [table.pop(id(key), None) for key in keys]
        gone = set(map(id, keys))
        self._held = [key for key in self._held if id(key) not in gone]
        return values

    def give(self, keys: Sequence[object], values: Sequence[object]) -> None:
        """Keep `values` (`take`'s) by `keys` (the objects made anew from its keys)."""
        for key, value in zip(keys, values, strict=True):
            if value is not None:
                self._values[id(key)] = value
                self._held.append(key)

    def end(self) -> None:
        """After a `begin` that returned True."""
        self._lock.release()

    def clear(self) -> None:
        self._values.clear()
        self._held = []
