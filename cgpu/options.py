"""Each backend option, declared once: its keyword, flag, type, backends and help.

`OPTIONS` is the one table. From it come the CLI's arguments of `cgpu probe` and `cgpu watch`
(`cgpu.cli`, and so `--help`, the completion scripts and the man page), the library's keyword
checks (`check_keywords`: types and ranges, for `cgpu.probe`; `check_names`: which backend takes
what, for `cgpu.backends.run_backend`) and the flag a usage error names (`flag_of`). `cgpu.probe`
spells its keywords for type checkers; tests/test_options.py holds them equal to the table. The
defaults the options fall back on live here too: the CDI spec dirs, the host root and the range
of a number of seconds.

Imported by the CLI on every start and by the library: it imports `os`, `cgpu.errors` and the
engines' names (`cgpu.engines.registry`, for `--engine`'s help) only, and `check_keywords` raises
KeyError for a keyword the table does not hold (a bug).
"""

from __future__ import annotations

import os

from cgpu.engines.registry import REGISTRY
from cgpu.errors import CgpuTypeError, CgpuValueError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any, Final, Literal

BACKENDS: Final = ("cdi", "wsl", "krunkit", "local")
DEFAULT_SPEC_DIRS: Final = ("/etc/cdi", "/var/run/cdi")  # the CDI defaults, lowest priority first
DEFAULT_ROOT: Final = "/"  # the host filesystem the specs are checked against
MIN_TIMEOUT: Final = 0.0  # a number of seconds must be above this ...
MAX_TIMEOUT: Final = 7 * 24 * 3600.0  # ... and at most a week: beyond that, deadlines overflow the platform's clocks

# What an option's value is; each kind has one CLI form and one library check:
#   text, path: one value (`--engine X`); paths, texts: a repeatable flag, a list keyword
#   (`--spec-dir A --spec-dir B`, spec_dirs=[A, B]); flag: `--verify`, a bool; seconds: a number.
if TYPE_CHECKING:
    Kind = Literal["text", "path", "texts", "paths", "flag", "seconds"]
else:
    Kind = str  # a name to import at run time; the Literal is for type checkers

# The --help group of the options only one backend takes; those of several are listed with the rest.
GROUPS: Final = {"cdi": "cdi backend (Linux)", "wsl": "wsl backend (Windows)", "krunkit": "krunkit backend (macOS)"}


class Option:
    """One backend option: `keyword` is the library's, `flag` (and `short`) the CLI's."""

    __slots__ = ("backends", "flag", "help", "keyword", "kind", "metavar", "short")

    def __init__(
        self,
        keyword: str,
        flag: str,
        kind: Kind,
        backends: Iterable[str],
        *,
        metavar: str | None = None,
        help: str,
        short: str | None = None,
    ) -> None:
        self.keyword = keyword
        self.flag = flag
        self.kind: Kind = kind
        self.backends = tuple(backends)
        self.metavar = metavar
        self.help = help
        self.short = short

    @property
    def group(self) -> str | None:
        """The --help group this option is listed in; None: with the options of every backend."""
        return GROUPS.get(self.backends[0]) if len(self.backends) == 1 else None

    def __repr__(self) -> str:
        return f"Option({self.keyword!r}, {self.flag!r}, {self.kind!r}, {self.backends!r})"


OPTIONS: Final = (
    Option("timeout", "--timeout", "seconds", BACKENDS, metavar="SECONDS", help="limit for each command cgpu runs"),
    Option(
        "probe_image",
        "--probe-image",
        "text",
        ("cdi", "krunkit"),
        metavar="REF",
        help="a local image with python3 that cgpu runs its own probe in (cdi --verify, krunkit); never pulled",
    ),
    Option(
        "spec_dirs",
        "--spec-dir",
        "paths",
        ("cdi",),
        short="-s",
        metavar="DIR",
        help=f"CDI spec directory, repeatable, lowest priority first (default: {', then '.join(DEFAULT_SPEC_DIRS)})",
    ),
    Option(
        "root",
        "--root",
        "path",
        ("cdi",),
        short="-r",
        metavar="DIR",
        help=f"host filesystem the specs are checked against (default: {DEFAULT_ROOT})",
    ),
    Option(
        "engine",
        "--engine",
        "text",
        ("cdi",),
        short="-e",
        metavar="ENGINE@VERSION|auto|none",
        help="whose CDI rules judge the specs: auto (default) the engine installed here or under --root (the "
        f"kubelet's runtime first); {REGISTRY.spoken()}: that one as installed; NAME@VERSION: that "
        "release; none: the newest rules",
    ),
    Option(
        "devices",
        "--device",
        "texts",
        ("cdi",),
        short="-d",
        metavar="NAME",
        help="only these qualified device names (vendor/class=name), repeatable",
    ),
    Option("verify", "--verify", "flag", ("cdi",), help="also run the probe in a real container per device"),
    Option(
        "distro", "--distro", "text", ("wsl",), metavar="NAME", help="the WSL distro of the agent's containers session"
    ),
    Option(
        "machine",
        "--machine",
        "text",
        ("krunkit",),
        metavar="NAME",
        help="the podman machine (libkrun provider) to use",
    ),
    Option(
        "vm_image", "--vm-image", "path", ("krunkit",), metavar="PATH", help="boot this disk image with krunkit instead"
    ),
    Option("refresh", "--refresh", "flag", ("krunkit",), help="ignore the cached answer"),
)


def taken_by(backend: str, table: Sequence[Option] = OPTIONS) -> frozenset[str]:
    """The keywords `backend` takes."""
    return frozenset(option.keyword for option in table if backend in option.backends)


def find(keyword: str, table: Sequence[Option] = OPTIONS) -> Option:
    """The option of a library keyword; KeyError for none."""
    for option in table:
        if option.keyword == keyword:
            return option
    raise KeyError(keyword)


def flag_of(keyword: str, table: Sequence[Option] = OPTIONS) -> str:
    """The CLI flag of a library keyword (`spec_dirs`: `--spec-dir`); the keyword itself for none."""
    return next((option.flag for option in table if option.keyword == keyword), keyword)


def check_names(backend: str, keywords: Iterable[str], table: Sequence[Option] = OPTIONS) -> None:
    """A keyword `backend` does not take is a CgpuTypeError naming it."""
    extra = set(keywords) - taken_by(backend, table)
    if extra:
        raise CgpuTypeError(f"the {backend} backend does not take {', '.join(sorted(extra))}")


def check_keywords(given: Mapping[str, object], table: Sequence[Option] = OPTIONS) -> dict[str, Any]:
    """The library's check of each option's type and range, by its kind (every keyword in
    `given` must be in `table`): the options given, normalized (paths as str, lists as lists,
    seconds as float), without those that count as not given (None, False)."""
    kinds = {option.keyword: option.kind for option in table}
    checked = {name: _CHECKS[kinds[name]](name, value) for name, value in given.items()}
    return {name: value for name, value in checked.items() if value is not None and value is not False}


def in_range(seconds: float) -> bool:
    """Whether a number of seconds is one cgpu takes (NaN is not): the one range check."""
    return MIN_TIMEOUT < seconds <= MAX_TIMEOUT


def range_text() -> str:
    """The range `in_range` checks, in words: "a positive number of seconds, at most 604800"."""
    return f"a positive number of seconds, at most {MAX_TIMEOUT:g}"


# --- the library's checks, one per kind: a wrong type would otherwise fail deep inside a backend ----


def text(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise CgpuTypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def required_text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise CgpuTypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def path(name: str, value: object) -> str | None:
    return None if value is None else required_path(name, value)


def required_path(name: str, value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        fspath = os.fspath(value)
        if isinstance(fspath, str):
            return fspath
    raise CgpuTypeError(f"{name} must be a str or os.PathLike path, not {type(value).__name__}")


def _sequence(name: str, value: object, what: str) -> Sequence[object] | None:
    from collections.abc import Sequence

    if value is None:
        return None
    if isinstance(value, str | bytes | os.PathLike):
        raise CgpuTypeError(f"{name} must be a list of {what}, not a single {type(value).__name__}: {name}=[{value!r}]")
    if not isinstance(value, Sequence):
        raise CgpuTypeError(f"{name} must be a list of {what}, not {type(value).__name__}")
    return value


def paths(name: str, value: object) -> list[str] | None:
    items = _sequence(name, value, "paths")
    return None if items is None else [required_path(f"{name}[{i}]", item) for i, item in enumerate(items)]


def texts(name: str, value: object) -> list[str] | None:
    items = _sequence(name, value, "str")
    return None if items is None else [required_text(f"{name}[{i}]", item) for i, item in enumerate(items)]


def flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise CgpuTypeError(f"{name} must be True or False, not {type(value).__name__} {value!r}")
    return value


def seconds(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CgpuTypeError(f"{name} must be a number of seconds (int or float), not {type(value).__name__} {value!r}")
    if not in_range(value):
        raise CgpuValueError(f"{name} must be {range_text()}, not {value!r}")
    return float(value)


_CHECKS: Final = {"text": text, "path": path, "texts": texts, "paths": paths, "flag": flag, "seconds": seconds}
