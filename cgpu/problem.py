"""One problem cgpu found: a bad input, a failed command or a finding worth a person's attention.

`Problem` is the one type a problem has from where it is found (a spec scan, an engine's
configuration, an image read, the probe's answer, a backend) to where the report is built:
`ReportBuilder.add` takes only this type, and its `as_dict()` is the `{severity, source,
message}` object of the report's JSON. `cgpu.model` validates and serializes it for the library
and `cgpu schema`.

A tuple of three, not a dataclass or a pydantic model: this module is on the CLI's start-up
path, where `dataclasses` and pydantic are not imported (and a `typing.NamedTuple` class costs
ten times as much to create). It unpacks as `severity, source, message`.

The one exception is the in-container probe (`cgpu/gpu_probe/standalone.py`): it is copied into
containers and VMs and runs alone there, so it writes its problems in its own JSON wire format,
which `cgpu.gpu_probe.answer` reads back into this type.
"""

from __future__ import annotations

from cgpu.errors import CgpuValueError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Final, Literal

    Severity = Literal["error", "warning", "info"]
else:
    Severity = str  # a name to import at run time; the Literal is for type checkers

SEVERITIES: Final = ("error", "warning", "info")  # the order problems are shown and counted in
# A problem met where its source is not known yet (reading an image's layers): the caller that
# knows the source (the image check) makes a `Problem` of it.
Note = tuple[Severity, str]


class Problem(tuple[Severity, str, str]):
    """severity: error (something that costs an answer), warning (worth fixing) or info;
    source: the file, command or device it concerns; message: what is wrong and, where cgpu
    knows it, the fix."""

    __slots__ = ()

    def __new__(cls, severity: Severity, source: str, message: str) -> Problem:
        return tuple.__new__(cls, (severity, source, message))

    def __getnewargs__(self) -> tuple[Severity, str, str]:  # pickling: __new__ takes the three
        return (self[0], self[1], self[2])

    def __repr__(self) -> str:
        return f"Problem(severity={self[0]!r}, source={self[1]!r}, message={self[2]!r})"

    @property
    def severity(self) -> Severity:
        return self[0]

    @property
    def source(self) -> str:
        return self[1]

    @property
    def message(self) -> str:
        return self[2]

    def as_dict(self) -> dict[str, str]:
        """The report's JSON object for it."""
        return {"severity": self.severity, "source": self.source, "message": self.message}

    @classmethod
    def from_json(cls, value: object) -> Problem:
        """A problem read back from a file cgpu wrote (a cache): the object `as_dict` gives, or
        the `[severity, source, message]` array JSON makes of the tuple. CgpuValueError (a
        ValueError) for anything
        else (a cache file can hold anything)."""
        if isinstance(value, dict):
            value = [value.get("severity"), value.get("source"), value.get("message")]
        if not isinstance(value, list | tuple) or len(value) != 3:
            raise CgpuValueError("a problem is not a [severity, source, message] triple")
        severity, source, message = value
        if severity not in SEVERITIES or type(source) is not str or type(message) is not str:
            raise CgpuValueError("a problem's severity, source or message is malformed")
        return cls(severity, source, message)
