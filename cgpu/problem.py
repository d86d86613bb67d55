"""One problem cgpu found: a bad input, a failed command or a finding worth a person's attention.

`Problem` is the one type a problem has from where it is found (a spec scan, an engine's
configuration, an image read, the probe's answer, a backend) to where the report is built:
`ReportBuilder.add` takes only this type, and its `as_dict()` is the `{severity, source,
message, kind}` object of the report's JSON. `cgpu.model` validates and serializes it for the
library and `cgpu schema`.

A tuple of three, not a dataclass or a pydantic model: this module is on the CLI's start-up
path, where `dataclasses` and pydantic are not imported (and a `typing.NamedTuple` class costs
ten times as much to create). It unpacks and compares as `severity, source, message`.

Its `kind` (one of `KINDS`) is what a program reads: the NFD `problem=` label, a scheduler, a
test; the message is for a person and may be reworded. It is an attribute beside the tuple, not
a fourth member, so code that unpacks three still works; a sentence is built in one place with
its one kind, so equal texts have equal kinds.

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
    Kind = Literal[
        "invalid-spec",
        "spec-warning",
        "spec-too-new",
        "duplicate-device",
        "library-crash",
        "spec-dir",
        "unreadable-file",
        "skipped-file",
        "no-spec",
        "cdi-off",
        "stale-spec",
        "missing-host-files",
        "driver-mismatch",
        "device-identity",
        "dev-char",
        "risky-edit",
        "unresolvable-device",
        "engine",
        "verify",
        "probe",
        "image",
        "usage",
        "could-not-run",
        "internal-error",
        "other",
    ]
else:
    Severity = Kind = str  # names to import at run time; the Literals are for type checkers

SEVERITIES: Final = ("error", "warning", "info")  # the order problems are shown and counted in

# Every kind a problem has, with what it means: `cgpu schema` lists them, and a kind once
# published keeps its name (labels and schedulers match on it). `Kind` below is the same list.
KINDS: Final = {
    # reading the spec dirs as the engine's CDI library does
    "invalid-spec": "the CDI library rejects this spec file, so it defines no device",
    "spec-warning": "the CDI library reads this spec, but something in it is likely a mistake",
    "spec-too-new": "the spec's cdiVersion is above what the engine accepts, so the engine ignores it",
    "duplicate-device": "two specs define the same device name, so engines drop it",
    "library-crash": "the engine's CDI library crashes on this spec, so no CDI device resolves",
    "spec-dir": "a spec dir is missing, skipped by the engine, or ends the engine's scan of the spec dirs",
    "unreadable-file": "cgpu could not (or would not) read a file the answer depends on",
    "skipped-file": "a file in a spec dir that engines skip (its name is not *.json or *.yaml)",
    "no-spec": "a GPU driver is loaded or a spec dir is given, but no spec defines a device",
    # what a device's container would get
    "cdi-off": "the engine has CDI switched off, or reads no CDI specs at all",
    "stale-spec": "the spec was generated for another NVIDIA driver than the host runs; regenerate it",
    "missing-host-files": "a device's spec names host files that do not exist, so its container cannot start",
    "driver-mismatch": "a container gets a user-space driver that does not match the host's kernel module",
    "device-identity": "a spec pins a device node's type or numbers that are not the host device's; regenerate it",
    "dev-char": "the systemd cgroup driver loses a device's access on daemon-reload: it has no /dev/char link",
    "risky-edit": "a spec edit that changes more than the device: a preloaded library, a hook, a host mount",
    "unresolvable-device": "a device asked for is defined by no spec the engine reads",
    # the engine, the backends and the run
    "engine": "which engine judged the specs, or why its rules or configuration are not known",
    "verify": "what --verify found running a container, or why it could not",
    "probe": "a probe (a VM, a WSL session, the local machine, a container) failed or answered oddly",
    "image": "what a container image brings or lacks, or why it could not be read",
    "usage": "the options given cannot work",
    "could-not-run": "the backend could not answer",
    "internal-error": "a bug in cgpu: please report it",
    "other": "a problem not given a kind of its own yet",
}
# A problem met where its source is not known yet (reading an image's layers): the caller that
# knows the source (the image check) makes a `Problem` of it.
Note = tuple[Severity, str]


class Problem(tuple[Severity, str, str]):
    """severity: error (something that costs an answer), warning (worth fixing) or info;
    source: the file, command or device it concerns; message: what is wrong and, where cgpu
    knows it, the fix; kind: what it is, for a program (one of `KINDS`)."""

    kind: Kind

    def __new__(cls, severity: Severity, source: str, message: str, kind: Kind = "other") -> Problem:
        problem = tuple.__new__(cls, (severity, source, message))
        problem.kind = kind
        return problem

    def __getnewargs__(self) -> tuple[Severity, str, str, Kind]:  # pickling: __new__ takes the four
        return (self[0], self[1], self[2], self.kind)

    def __repr__(self) -> str:
        return f"Problem(severity={self[0]!r}, source={self[1]!r}, message={self[2]!r}, kind={self.kind!r})"

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
        return {"severity": self.severity, "source": self.source, "message": self.message, "kind": self.kind}

    @classmethod
    def from_json(cls, value: object) -> Problem:
        """A problem read back from a file cgpu wrote (a cache): the object `as_dict` gives (its
        `kind` may be absent: written before problems had one), or the `[severity, source,
        message]` array JSON makes of the tuple. CgpuValueError (a ValueError) for anything else
        (a cache file can hold anything)."""
        kind: object = "other"
        if isinstance(value, dict):
            kind = value.get("kind", "other")
            value = [value.get("severity"), value.get("source"), value.get("message")]
        if not isinstance(value, list | tuple) or len(value) != 3:
            raise CgpuValueError("a problem is not a [severity, source, message] triple")
        severity, source, message = value
        if severity not in SEVERITIES or type(source) is not str or type(message) is not str:
            raise CgpuValueError("a problem's severity, source or message is malformed")
        if kind not in KINDS:
            raise CgpuValueError("a problem's kind is not one cgpu knows")
        return cls(severity, source, message, kind)  # type: ignore[arg-type]  # checked: one of KINDS
