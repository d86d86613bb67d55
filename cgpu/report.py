"""Building a report: the one place backends put their findings.

The CLI path stays free of pydantic (its import alone costs more than the whole CDI
answer); `cgpu.model` holds the pydantic models that describe this same JSON, and the
tests validate every report a backend builds against them.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator

from cgpu.apis import API_ORDER, IMAGE_NEEDS, METAL_EVIDENCE, State
from cgpu.problem import Kind, Problem, Severity
from cgpu.version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

FORMAT_VERSION = 2  # additive changes keep it; a removed or re-typed field raises it
MAX_TEXT = 2000  # characters of one evidence, problem or reason text; longer ones end in "…"


def cap(text: str) -> str:
    """`text`, cut to MAX_TEXT characters with an ellipsis (a 200,000-`../` path must not become a
    600 KB line; what matters is said at the start)."""
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def to_json(data: Any, *, indent: int | None = 2) -> str:
    """The one serializer of every JSON answer cgpu prints or writes (the report, the image
    check, watch's answer file): always valid UTF-8. A file name's undecodable byte (the lone
    surrogate `os.fsdecode` makes of it) is written as the four characters `\\xNN`, any other
    lone surrogate as `\\uNNNN`: the same text the terminal output shows."""
    text = json.dumps(data, indent=indent)
    if "\\ud" not in text and "\\uD" not in text:  # no surrogate at all: the common case, one scan
        return text
    return json.dumps(_no_surrogates(data), indent=indent)


def json_chunks(data: Any, *, size: int = 1 << 16) -> Iterator[bytes]:
    """`(to_json(data) + "\\n").encode()` in pieces of about `size` bytes, never built whole: a
    report listing 20,000 devices is 16 MiB of JSON, and the encoder's list of its ~1 million
    small strings is what would stay in the process's heap afterwards (fragmented). The one
    difference: a high and a low lone surrogate side by side (never an undecodable byte of a
    file name, which is a low one alone) read back as the character the pair encodes."""
    pending: list[str] = []
    length = 0
    for piece in json.JSONEncoder(indent=2).iterencode(data):
        if "\\ud" in piece or "\\uD" in piece:
            piece = _LONE_SURROGATE_ESCAPE.sub(_escaped_surrogate, piece)
        pending.append(piece)
        length += len(piece)
        if length >= size:
            yield "".join(pending).encode()
            pending, length = [], 0
    pending.append("\n")
    yield "".join(pending).encode()


# In ensure_ascii JSON text: a surrogate pair (a character above U+FFFF: kept), a lone surrogate
# (written as to_json writes it), or any other escape (kept; `\\` too, so `\\udc80` is text)
_LONE_SURROGATE_ESCAPE = re.compile(
    r"\\(u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[dD][89a-fA-F][0-9a-fA-F]{2}|.)"
)


def _escaped_surrogate(match: re.Match[str]) -> str:
    escape = match.group(1)
    if len(escape) != 5:  # a pair, or not a surrogate
        return match.group()
    return json.dumps(_unsurrogate_code(int(escape[1:], 16)))[1:-1]


def to_yaml(data: Any) -> str:
    """The same data as YAML (PyYAML's safe dump, block style, keys in the report's order),
    undecodable bytes written as in `to_json`. A text holding a character Python does not call
    printable (a bidi override, a zero-width space) is written double-quoted with every
    non-ASCII character escaped, as JSON writes it: PyYAML's own escaping stops at control
    characters, so `allow_unicode` would print those raw, reordering or hiding what follows."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def analyze_scalar(self, scalar: str) -> Any:
            analysis = super().analyze_scalar(scalar)
            if _hidden_in_yaml(scalar):  # only double quotes can escape
                analysis.allow_flow_plain = analysis.allow_block_plain = False
                analysis.allow_single_quoted = analysis.allow_block = False
            return analysis

        def write_double_quoted(self, text: str, split: bool = True) -> None:
            self.allow_unicode = not _hidden_in_yaml(text)
            try:
                super().write_double_quoted(text, split)
            finally:
                self.allow_unicode = True

    dumped = yaml.dump(_no_surrogates(data), Dumper=Dumper, sort_keys=False, allow_unicode=True, width=1_000_000)
    return str(dumped)


def _hidden_in_yaml(text: str) -> bool:
    """Whether `text` holds a character PyYAML would print raw though Python does not call it
    printable (PyYAML escapes C0 and C1 controls itself)."""
    return not text.isprintable() and any(ord(c) >= 0xA0 and not c.isprintable() for c in text)


def _unsurrogate(match: re.Match[str]) -> str:
    return _unsurrogate_code(ord(match.group()))


def _unsurrogate_code(code: int) -> str:
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def _no_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return re.sub("[\ud800-\udfff]", _unsurrogate, value)
    if isinstance(value, dict):
        return {_no_surrogates(k): _no_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_no_surrogates(v) for v in value]
    return value


def _utc_now() -> str:
    """Now in UTC to the second, as datetime's isoformat writes it (2025-01-31T12:00:00+00:00),
    without importing datetime (the CLI's start-up path)."""
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


class ReportBuilder:
    """Collects what one backend found; `build()` turns it into the report dict.

    A backend calls `provide`, `absent` or `unknown` for each API it answers for, `device`
    per device it saw, `problem` (or `add`, for problems found elsewhere) for every bad input or
    failed command, and `failed` when it
    could not run at all (the CLI then exits non-zero). An API it says nothing of is absent
    (the backend looked and found nothing), or unknown when the backend could not run; metal
    is always absent.
    """

    def __init__(self, backend: str, *, progress: Callable[[str], None] | None = None) -> None:
        self.backend = backend
        self._progress = progress
        self._evidence: dict[str, str] = {"metal": METAL_EVIDENCE}
        self._states: dict[str, State] = {"metal": "absent"}
        self._image_needs: dict[str, list[str]] = {}
        self.devices: list[dict[str, Any]] = []
        self.engines: list[dict[str, Any]] = []  # cdi: the container engines found, the judging one marked
        self.spec_dirs: list[str] | None = None  # cdi: the spec dirs read, as this machine opened them
        self.nvidia_driver: dict[str, Any] | None = None  # cdi: the host's NVIDIA driver and the CUDA it supports
        self.device_nodes: dict[str, Any] | None = None  # cdi: what the host does with the injected nodes
        self.cdi_refresh: dict[str, Any] | None = None  # cdi: NVIDIA's refresh units on the node
        # cdi: per API, what the container's user must hold to open each node ({node, gids, groups, why})
        self.user_needs: dict[str, list[dict[str, Any]]] = {}
        self.request_paths: list[dict[str, Any]] | None = None  # cdi: what each request style gives
        self.pod_names: list[dict[str, Any]] | None = None  # cdi: the names a pod's request becomes, defined or not
        self.problems: list[Problem] = []
        self.could_not_run = False
        self.bad_usage = False
        self._usage: list[tuple[tuple[str, ...], str]] = []

    def provide(self, api: str, evidence: str, *, image_needs: Iterable[str] = ()) -> None:
        """Containers get `api`; `image_needs`: what the image must bring (`IMAGE_NEEDS` tokens)."""
        needs = list(dict.fromkeys(image_needs))
        unknown = [need for need in needs if need not in IMAGE_NEEDS]
        if unknown:
            raise ValueError(f"unknown image need {unknown[0]!r}")
        self._set(api, "provided", evidence)
        self._image_needs[api] = needs

    def absent(self, api: str, evidence: str) -> None:
        """The backend looked, and containers do not get `api`."""
        self._set(api, "absent", evidence)

    def unknown(self, api: str, evidence: str) -> None:
        """The backend could not tell whether containers get `api` (timeout, crash, unreadable input)."""
        self._set(api, "unknown", evidence)

    def state(self, api: str) -> State | None:
        """What the backend said of `api` so far (None: nothing yet)."""
        return self._states.get(api)

    def _set(self, api: str, state: State, evidence: str) -> None:
        if api not in API_ORDER or api == "metal":
            raise ValueError(f"unknown GPU API name {api!r}" if api not in API_ORDER else "metal is always absent")
        self._states[api] = state
        self._evidence[api] = cap(evidence)
        self._image_needs.pop(api, None)

    def device(self, name: str, apis: list[str] | set[str], /, **details: Any) -> dict[str, Any]:
        reason = details.get("reason")
        if isinstance(reason, str):
            details["reason"] = cap(reason)
        checks = details.get("checks")
        # a copy only where a text is too long: this runs once per device (2,500 in a large spec)
        if isinstance(checks, dict) and max(map(len, checks.values()), default=0) > MAX_TEXT:
            details["checks"] = {k: cap(v) if isinstance(v, str) else v for k, v in checks.items()}
        wanted = set(apis)
        entry = {"name": name, "apis": [a for a in API_ORDER if a in wanted], **details}
        self.devices.append(entry)
        return entry

    def problem(self, severity: Severity, source: str, message: str, kind: Kind = "other") -> None:
        """One problem found here; the same as `add(Problem(severity, source, message, kind))`."""
        self.add(Problem(severity, source, message, kind))

    def add(self, *problems: Problem) -> None:
        """Problems found elsewhere (a scan, an engine's configuration, the probe's answer), in
        order; their texts are capped. Only `Problem`s: a bare tuple or dict is a TypeError."""
        for problem in problems:
            if type(problem) is not Problem:
                raise TypeError(f"a report's problem is a cgpu.problem.Problem, not {type(problem).__name__}")
            source, message = problem.source, problem.message
            if len(source) > MAX_TEXT or len(message) > MAX_TEXT:
                problem = Problem(problem.severity, cap(source), cap(message), problem.kind)
            self.problems.append(problem)

    def failed(self, source: str, message: str, kind: Kind = "could-not-run") -> None:
        """The backend could not answer: an error problem, and the CLI exits non-zero."""
        self.could_not_run = True
        self.problem("error", source, message, kind)

    def usage_error(self, option: str | tuple[str, ...], message: str) -> None:
        """The options given cannot work (a malformed name, conflicting options): exit 2.

        `option`: the keyword(s) at fault as the library names them (`devices`, `engine`); the
        message names neither keyword nor flag, so each caller says it in its own words
        (`usage()`: the library's `engine: ...`, the CLI's `argument --engine: ...`)."""
        options = (option,) if isinstance(option, str) else option
        self._usage.append((options, message))
        self.failed(" and ".join(options), message, "usage")
        self.bad_usage = True

    def usage(self, name: Callable[[str], str] = str) -> list[str]:
        """Each usage error, its option(s) named by `name` (the keyword by default)."""
        return [f"{' and '.join(map(name, options))}: {message}" for options, message in self._usage]

    def progress(self, message: str) -> None:
        if self._progress is not None:
            self._progress(message)

    def build(self) -> dict[str, Any]:
        evidence: dict[str, str] = {}
        apis: dict[str, dict[str, Any]] = {}
        for api in API_ORDER:
            state = self._states.get(api)
            if state is None and self.could_not_run:
                state, text = "unknown", f"unknown: the {self.backend} backend could not run (see problems)"
            elif state is None:
                state, text = "absent", f"not provided: the {self.backend} backend found nothing that gives {api}"
            else:
                text = self._evidence[api]
            evidence[api] = text
            apis[api] = {"state": state, "image_needs": self._image_needs.get(api, []) if state == "provided" else []}
            if self.backend == "cdi":
                apis[api]["user_needs"] = self.user_needs.get(api, [])
        report = {
            "format_version": FORMAT_VERSION,
            "containers": [api for api in API_ORDER if apis[api]["state"] == "provided"],
            "apis": apis,
            "evidence": evidence,
            "backend": self.backend,
            "platform": current_platform(),
            "devices": self.devices,
            "engines": self.engines,
            "nvidia_driver": self.nvidia_driver,
            "device_nodes": self.device_nodes,
            "cdi_refresh": self.cdi_refresh,
            "problems": [problem.as_dict() for problem in self.problems],
            "cgpu_version": __version__,
            "checked_at": _utc_now(),
        }
        if self.spec_dirs is not None:
            report["spec_dirs"] = self.spec_dirs
        if self.request_paths is not None:
            report["request_paths"] = self.request_paths
        if self.pod_names is not None:
            report["pod_names"] = self.pod_names
        return report


def current_platform() -> str:
    """`linux-x86_64`, `darwin-arm64`, `windows-amd64`: OS and machine as the agent names them."""
    if sys.platform == "win32":
        machine = os.environ.get("PROCESSOR_ARCHITECTURE", "unknown")
        return f"windows-{machine.lower()}"
    system = "darwin" if sys.platform == "darwin" else sys.platform.rstrip("0123456789")
    return f"{system}-{os.uname().machine.lower()}"
