"""cgpu: which GPU APIs does a container started here actually get?

Library use (the node agent)::

    import cgpu
    report = cgpu.probe("cdi", spec_dirs=["/etc/cdi", "/var/run/cdi"])
    report.containers, report.apis["cuda"].state, report.evidence["cuda"]
    answer = cgpu.check_image("quay.io/me/venus:latest")
    answer.status, answer.verdict

`cgpu.Report` and `cgpu.ImageCheck` are the pydantic models of those answers (`cgpu.model`),
loaded on first use: the CLI imports this package and must not pay for pydantic.
"""

from __future__ import annotations

import os

from cgpu.errors import CgpuError, CgpuTypeError, CgpuValueError
from cgpu.version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Literal, overload

    from cgpu.model import ImageCheck, Report
else:

    def overload(function: object) -> object:  # typing.overload's effect at run time: none
        return function


__all__ = [
    "CgpuError",
    "CgpuTypeError",
    "CgpuValueError",
    "ImageCheck",
    "ProbeError",
    "Report",
    "__version__",
    "check_image",
    "probe",
]

PathArg = str | os.PathLike[str]  # a path option: a str or a pathlib.Path


class ProbeError(CgpuError):
    """The backend could not run; `.report` still says why, in its problems."""

    def __init__(self, report: Report) -> None:
        errors = [p.message for p in report.problems if p.severity == "error"]
        super().__init__("; ".join(errors) or "the backend could not run")
        self.report = report


def probe(
    backend: str | None = None,
    *,
    spec_dirs: Sequence[PathArg] | None = None,
    root: PathArg | None = None,
    engine: str | None = None,
    devices: Sequence[str] | None = None,
    verify: bool = False,
    probe_image: str | None = None,
    distro: str | None = None,
    machine: str | None = None,
    vm_image: PathArg | None = None,
    refresh: bool = False,
    timeout: float | None = None,
) -> Report:
    """Run a backend (default: this platform's) and return its report.

    backend: "cdi", "wsl", "krunkit" or "local"; None picks this platform's (cdi on Linux,
    wsl on Windows, krunkit on macOS). The options are the CLI's, each taken by some backends:

    - cdi: `spec_dirs` (a list of dirs; default /etc/cdi and /var/run/cdi), `root` (the host
      filesystem the specs are checked against), `engine` ("podman@4.3.1", "auto", "none"),
      `devices` (a list of CDI names, "vendor/class=name"), `verify` (run the probe in a
      container per device), `probe_image` (the image for `verify`);
    - wsl: `distro`;
    - krunkit: `machine`, `vm_image`, `probe_image`, `refresh` (ignore the cached answer);
    - all: `timeout` (seconds, for each command cgpu runs).

    An option the chosen backend does not take is a TypeError (False and None count as not
    given), as is a value of the wrong type: a lone string where a list is expected, a
    `verify` or `refresh` that is not a bool, a `timeout` that is not a number. A value that
    cannot work (a malformed device name, an unknown engine, a timeout that is not positive)
    is a ValueError; each names the keyword, and each is also a `CgpuError`. Raises ProbeError
    (with `.report`) when the backend could not run.
    """
    from cgpu.backends import default_backend, run_backend

    given: dict[str, Any] = {
        "spec_dirs": _paths("spec_dirs", spec_dirs),
        "root": _path("root", root),
        "engine": _text("engine", engine),
        "devices": _texts("devices", devices),
        "verify": _flag("verify", verify),
        "probe_image": _text("probe_image", probe_image),
        "distro": _text("distro", distro),
        "machine": _text("machine", machine),
        "vm_image": _path("vm_image", vm_image),
        "refresh": _flag("refresh", refresh),
        "timeout": _seconds(timeout),
    }
    options = {name: value for name, value in given.items() if value is not None and value is not False}
    name = default_backend() if backend is None else _text("backend", backend)
    from cgpu.model import Report

    builder = run_backend(name or "", options)  # an unknown backend: ValueError; another's option: TypeError
    if builder.bad_usage:
        raise CgpuValueError("; ".join(builder.usage()))
    report = Report.model_validate(builder.build())
    if builder.could_not_run:
        raise ProbeError(report)
    return report


def check_image(ref: str, *, machine: str | None = None, timeout: float | None = None) -> ImageCheck:
    """Would this image get vulkan in a krunkit VM (Mesa's Venus driver)? `cgpu image check`.

    ref: an image in podman's or Docker's storage, or `oci-archive:PATH`, `docker-archive:PATH`,
    `dir:PATH`. machine: also run cgpu's probe in the image inside this krunkit VM. The answer's
    `status` says whether the image was checked (`unreadable`: it could not be read at all) and
    `verdict` answers (yes, no, unknown); nothing is raised for an image that cannot be read.
    TypeError for arguments of the wrong type, ValueError for a timeout that is not positive or a
    `ref` that is no image reference (`Bad::Ref`, `oci-archive:` without its path): both are
    `CgpuError`s, as is every error raised here on purpose.
    """
    from cgpu.image.check import check_image as check
    from cgpu.model import ImageCheck

    result = check(_text("ref", ref, required=True), machine=_text("machine", machine), timeout=_seconds(timeout))
    return ImageCheck.model_validate(result)


def __getattr__(name: str) -> Any:
    """`cgpu.Report`, `cgpu.ImageCheck`: the models, imported (with pydantic) on first use."""
    if name in ("Report", "ImageCheck"):
        from cgpu import model

        return getattr(model, name)
    raise AttributeError(f"module 'cgpu' has no attribute {name!r}")


# --- argument types: checked here, as a wrong type would otherwise fail deep inside a backend ----


@overload
def _text(name: str, value: object, *, required: Literal[True]) -> str: ...
@overload
def _text(name: str, value: object) -> str | None: ...
def _text(name: str, value: object, *, required: bool = False) -> str | None:
    if (value is not None or required) and not isinstance(value, str):
        raise CgpuTypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


@overload
def _path(name: str, value: object, *, required: Literal[True]) -> str: ...
@overload
def _path(name: str, value: object) -> str | None: ...
def _path(name: str, value: object, *, required: bool = False) -> str | None:
    if (value is None and not required) or isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        path = os.fspath(value)
        if isinstance(path, str):
            return path
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


def _paths(name: str, value: object) -> list[str] | None:
    items = _sequence(name, value, "paths")
    return None if items is None else [_path(f"{name}[{i}]", item, required=True) for i, item in enumerate(items)]


def _texts(name: str, value: object) -> list[str] | None:
    items = _sequence(name, value, "str")
    return None if items is None else [_text(f"{name}[{i}]", item, required=True) for i, item in enumerate(items)]


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise CgpuTypeError(f"{name} must be True or False, not {type(value).__name__} {value!r}")
    return value


def _seconds(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CgpuTypeError(f"timeout must be a number of seconds (int or float), not {type(value).__name__} {value!r}")
    from cgpu.backends import MAX_TIMEOUT

    if not 0 < value <= MAX_TIMEOUT:  # NaN fails this too
        raise CgpuValueError(f"timeout must be a positive number of seconds, at most {MAX_TIMEOUT:g}, not {value!r}")
    return float(value)
