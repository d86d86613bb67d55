"""cgpu: which GPU APIs does a container started here actually get?

Library use (the node agent)::

    import cgpu
    report = cgpu.probe("cdi", spec_dirs=["/etc/cdi", "/var/run/cdi"])
    report.containers, report.apis["cuda"].state, report.evidence["cuda"]
    answer = cgpu.check_image("quay.io/me/venus:latest")
    answer.status, answer.verdict

`cgpu.Report` and `cgpu.ImageCheck` are the pydantic models of those answers (`cgpu.model`),
loaded on first use: the CLI imports this package and must not pay for pydantic. Their
`problems` are `cgpu.Problem`s, the one type cgpu uses for a problem throughout.
"""

from __future__ import annotations

import os

from cgpu.errors import CgpuError, CgpuTypeError, CgpuValueError
from cgpu.problem import Problem
from cgpu.version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, overload

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
    "Problem",
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
    image: str | None = None,
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
    - all: `timeout` (seconds, for each command cgpu runs); `image` (an image reference, as for
      `check_image`): the report answers for containers of that image (its `image` section says
      what the image has per API; an API the image lacks a part of is absent). The image is
      read, never run or pulled; `timeout` also bounds reading it.

    The process keeps what a backend keeps from one call to the next (the cdi backend: the specs
    parsed and the answers worked out from each file, while the file and every host file read are
    unchanged): `cgpu.backends.memory(name)`, with `clear()` and `stats()`.

    An option the chosen backend does not take is a TypeError (False and None count as not
    given), as is a value of the wrong type: a lone string where a list is expected, a
    `verify` or `refresh` that is not a bool, a `timeout` that is not a number. A value that
    cannot work (a malformed device name, an unknown engine, a timeout that is not positive)
    is a ValueError; each names the keyword, and each is also a `CgpuError`. Raises ProbeError
    (with `.report`) when the backend could not run.
    """
    given = {keyword: value for keyword, value in locals().items() if keyword not in ("backend", "image")}
    from cgpu.backends import default_backend, run_backend
    from cgpu.options import check_keywords, required_text, text

    image = text("image", image)
    if image is not None:
        from cgpu.image.source import check_reference

        check_reference(image)  # no image reference at all: ValueError before the probe runs
    options = check_keywords(given)  # each keyword's type and range, by its kind in the options table
    name = default_backend() if backend is None else required_text("backend", backend)
    from cgpu.model import Report

    builder = run_backend(name, options)  # an unknown backend: ValueError; another's option: TypeError
    if builder.bad_usage:
        raise CgpuValueError("; ".join(builder.usage()))
    answer = builder.build()
    if image is not None and not builder.could_not_run:
        from cgpu.image.answer import with_image

        answer = with_image(answer, image, timeout=options.get("timeout"))
    report = Report.model_validate(answer)
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
    from cgpu.options import required_text, seconds, text

    result = check(required_text("ref", ref), machine=text("machine", machine), timeout=seconds("timeout", timeout))
    return ImageCheck.model_validate(result)


def __getattr__(name: str) -> Any:
    """`cgpu.Report`, `cgpu.ImageCheck`: the models, imported (with pydantic) on first use."""
    if name in ("Report", "ImageCheck"):
        from cgpu import model

        return getattr(model, name)
    raise AttributeError(f"module 'cgpu' has no attribute {name!r}")
