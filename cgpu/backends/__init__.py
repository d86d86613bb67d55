"""The backends, one module each, imported only when chosen.

Each module has `probe(report: ReportBuilder, **options) -> None`: it fills the report
and calls `report.failed(...)` when it could not run. Options are the backend's own
options (`cgpu.options.OPTIONS`, the table of them), passed as keywords.

A module may also offer, asked for by name (`Backend`), never by which backend it is:
- `new_memory()`: what it keeps from one probe to the next in one process (an object with
  `clear()` and `stats()`, and optionally `tidy()`, run by `cgpu watch` between probes once a
  probe's objects are freed); its `probe` then takes it as its second argument, positional only
  (`probe(report, memory, /, **options)`: the keywords stay the options'). A library process keeps
  one per backend (`memory(name)`), `cgpu watch` holds its own;
- `answer_inputs(report, **options) -> AnswerInputs`: what an answer for these options depends
  on (`report`: the last answer, None before the first), so that `cgpu watch` probes again when
  any of it changes.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from cgpu.errors import CgpuValueError
from cgpu.options import BACKENDS, check_names, seconds
from cgpu.report import ReportBuilder

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType
    from typing import Any, Protocol

    class Memory(Protocol):
        def clear(self) -> None: ...
        def stats(self) -> dict[str, int]: ...


__all__ = ["BACKENDS", "AnswerInputs", "Backend", "Watching", "default_backend", "memory", "run_backend"]


def default_backend(platform: str = sys.platform) -> str:
    if platform == "win32":
        return "wsl"
    if platform == "darwin":
        return "krunkit"
    return "cdi"


class AnswerInputs:
    """The inputs of one answer: `spec_dirs` as the reader opens them (a file added, removed or
    edited there); host paths under the root: `host_files` compared by their text (procfs and
    sysfs keep no useful times), `engine_files` by their identity (size, times, inode)."""

    __slots__ = ("engine_files", "host_files", "spec_dirs")

    def __init__(self, spec_dirs: list[str], host_files: list[str], engine_files: list[str]) -> None:
        self.spec_dirs = spec_dirs
        self.host_files = host_files
        self.engine_files = engine_files

    def __repr__(self) -> str:
        return f"AnswerInputs({self.spec_dirs!r}, {self.host_files!r}, {self.engine_files!r})"


InputsOf = Callable[["Mapping[str, Any] | None"], AnswerInputs]


class Watching:
    """What a backend offers `cgpu watch` beyond its probe: `inputs`, what the answer depends on
    (asked before the first probe with None, then after each with its report; None: the spec dirs
    given alone are watched), and `tidy`, run between probes once a probe's objects are freed."""

    __slots__ = ("inputs", "tidy")

    def __init__(self, inputs: InputsOf | None = None, tidy: Callable[[], None] | None = None) -> None:
        self.inputs = inputs
        self.tidy = tidy


class Backend:
    """One backend module, and what it offers beyond `probe`."""

    __slots__ = ("module", "name")

    def __init__(self, name: str) -> None:
        if name not in BACKENDS:
            raise CgpuValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
        self.name = name
        self.module: ModuleType = importlib.import_module(f"cgpu.backends.{name}")

    def new_memory(self) -> Memory | None:
        """A new memory of this backend (None: it keeps nothing between probes)."""
        make = getattr(self.module, "new_memory", None)
        return None if make is None else make()

    def watching(self, options: dict[str, Any], memory: object = None) -> Watching:
        """What `cgpu watch` asks of this backend for these options, with `memory` (`new_memory`'s)."""
        from functools import partial

        inputs = getattr(self.module, "answer_inputs", None)
        return Watching(
            inputs=None if inputs is None else partial(inputs, **options), tidy=getattr(memory, "tidy", None)
        )

    def probe(
        self,
        options: dict[str, Any],
        *,
        progress: Callable[[str], None] | None = None,
        memory: object = None,
    ) -> ReportBuilder:
        """Run it; unknown options raise TypeError, a timeout out of range ValueError."""
        check_names(self.name, options)
        seconds("timeout", options.get("timeout"))
        report = ReportBuilder(self.name, progress=progress)
        if memory is not None:
            self.module.probe(report, memory, **options)
        else:
            self.module.probe(report, **options)
        return report


class _Memories:
    """The memory a library process keeps per backend, made on first use."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[str, Memory | None] = {}

    def of(self, backend: Backend) -> Memory | None:
        if backend.name not in self._kept:
            self._kept.setdefault(backend.name, backend.new_memory())
        return self._kept[backend.name]


_PROCESS = _Memories()


def memory(name: str) -> Memory | None:
    """What this process keeps between library calls of backend `name` (`clear()`, `stats()`);
    None: that backend keeps nothing."""
    return _PROCESS.of(Backend(name))


def run_backend(
    name: str,
    options: dict[str, Any],
    *,
    progress: Callable[[str], None] | None = None,
    memory: object = None,
) -> ReportBuilder:
    """Run one backend with `memory` (None: the one this process keeps for it); unknown options
    raise TypeError, a timeout out of range ValueError."""
    backend = Backend(name)
    return backend.probe(options, progress=progress, memory=memory if memory is not None else _PROCESS.of(backend))
