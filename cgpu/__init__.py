"""cgpu: which GPU APIs does a container started here actually get?

Library use (the node agent)::

    import cgpu
    report = cgpu.probe(backend="cdi", spec_dirs=["/etc/cdi", "/var/run/cdi"])
    report.containers, report.evidence
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cgpu.errors import CgpuError

__version__ = "0.1.0"

if TYPE_CHECKING:
    from cgpu.model import Report

__all__ = ["CgpuError", "ProbeError", "__version__", "probe"]


class ProbeError(CgpuError):
    """The backend could not run; `.report` still says why, in its problems."""

    def __init__(self, report: Report) -> None:
        errors = [p.message for p in report.problems if p.severity == "error"]
        super().__init__("; ".join(errors) or "the backend could not run")
        self.report = report


def probe(backend: str | None = None, **options: Any) -> Report:
    """Run a backend (default: this platform's) and return its report as a pydantic model.

    Options are the backend's CLI options by their Python names: `spec_dirs`, `root`,
    `engine`, `devices`, `verify` (cdi); `distro` (wsl); `machine`, `vm_image`,
    `probe_image`, `refresh` (krunkit); `timeout` (all). Raises ProbeError when the backend
    could not run, TypeError for options it does not take, ValueError for values that cannot
    work (a malformed device name, an unknown engine, a timeout that is not positive).
    """
    from cgpu.backends import default_backend, run_backend
    from cgpu.model import Report

    builder = run_backend(backend or default_backend(), options)
    if builder.bad_usage:
        raise ValueError("; ".join(p["message"] for p in builder.problems if p["severity"] == "error"))
    report = Report.model_validate(builder.build())
    if builder.could_not_run:
        raise ProbeError(report)
    return report
