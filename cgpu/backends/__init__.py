"""The backends, one module each, imported only when chosen.

Each module has `probe(report: ReportBuilder, **options) -> None`: it fills the report
and calls `report.failed(...)` when it could not run. Options are the backend's own
CLI options (see `OPTIONS`), passed as keywords.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from cgpu.errors import CgpuTypeError, CgpuValueError
from cgpu.report import ReportBuilder

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, Final

BACKENDS: Final = ("cdi", "wsl", "krunkit", "local")
MAX_TIMEOUT: Final = 7 * 24 * 3600.0  # a week: beyond that, deadlines overflow the platform's clocks

# Which options each backend takes (CLI destination names); anything else is a usage error.
OPTIONS: Final[dict[str, frozenset[str]]] = {
    "cdi": frozenset({"spec_dirs", "root", "engine", "devices", "verify", "probe_image", "timeout"}),
    "wsl": frozenset({"distro", "timeout"}),
    "krunkit": frozenset({"machine", "vm_image", "probe_image", "refresh", "timeout"}),
    "local": frozenset({"timeout"}),
}


def default_backend(platform: str = sys.platform) -> str:
    if platform == "win32":
        return "wsl"
    if platform == "darwin":
        return "krunkit"
    return "cdi"


def run_backend(name: str, options: dict[str, Any], *, progress: Callable[[str], None] | None = None) -> ReportBuilder:
    """Run one backend; unknown options raise TypeError, a timeout out of range ValueError."""
    if name not in BACKENDS:
        raise CgpuValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    extra = set(options) - OPTIONS[name]
    if extra:
        raise CgpuTypeError(f"the {name} backend does not take {', '.join(sorted(extra))}")
    timeout = options.get("timeout")
    if timeout is not None and not 0 < timeout <= MAX_TIMEOUT:
        raise CgpuValueError(f"timeout must be a positive number of seconds, at most {MAX_TIMEOUT:g}, not {timeout!r}")
    report = ReportBuilder(name, progress=progress)
    module = importlib.import_module(f"cgpu.backends.{name}")
    module.probe(report, **options)
    return report
