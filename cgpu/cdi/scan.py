"""Discovery of spec files (not implemented yet: the foundation issue builds it)."""

from __future__ import annotations

from typing import Sequence

from cgpu.cdi.model import ScanResult

DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


def scan_spec_dirs(spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS, *, max_version: str | None = None,
                   engine_label: str | None = None) -> ScanResult:
    """Read every spec in the dirs (lowest priority first) with the reference library's rules.

    max_version: the highest cdiVersion the engine accepts (None: newest rules); specs above it
    are dropped with a problem naming both versions and `engine_label` ("podman 4.3.1").
    """
    raise NotImplementedError
