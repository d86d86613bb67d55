"""CDI spec versions: the ones the reference library knows, the minimum a spec's fields
require, and the newest one each container engine's vendored library accepts."""

from __future__ import annotations

import re
from typing import Final

from cgpu.errors import CgpuValueError

# Every cdiVersion the reference library (v1.1.0) knows, oldest first. 0.1.0 and 0.2.0 are
# "known" but never accepted: the minimum it computes for any spec is 0.3.0.
KNOWN_VERSIONS: Final = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
EARLIEST: Final = "0.3.0"

# The library release whose behaviour (quirks and crashes included) cgpu models: every engine
# in ENGINE_MAX_VERSION vendors a release up to it, and the quirks modelled are those of every
# release up to it. LIBRARY_MAIN: the library's main branch (no engine ships it yet), for the
# differential check against it; it takes `permissions: none` and one-character vendors and
# classes, and reads a symlinked spec dir.
LIBRARY: Final = "v1.1.0"
LIBRARY_MAIN: Final = "main"


def normalize_version(declared: str) -> str | None:
    """The known version a declared cdiVersion names ("v0.5.0" -> "0.5.0"), else None."""
    bare = declared[1:] if declared.startswith("v") else declared
    return bare if bare in KNOWN_VERSIONS else None


def version_key(version: str) -> tuple[int, ...]:
    """Sort key of a known version (or any dotted numeric version)."""
    return tuple(int(part) for part in version.split("."))


# Highest cdiVersion each engine's vendored CDI library accepts (reference/cdi.md §3.5.3):
# (first engine version of the row, max cdiVersion), oldest first. A version between rows
# takes the row at or below it.
ENGINE_MAX_VERSION: Final[dict[str, tuple[tuple[tuple[int, ...], str], ...]]] = {
    "podman": (
        ((4, 3, 1), "0.5.0"),  # observed on Debian 12's podman 4.3.1
        ((4, 9), "0.6.0"),
        ((5, 4), "0.8.0"),
        ((5, 5), "1.0.0"),
        ((6, 0), "1.1.0"),
    ),
    "docker": (
        ((25, 0), "0.6.0"),  # CDI support (opt-in) starts with Docker Engine 25.0
        ((27, 0), "0.7.0"),
        ((27, 5), "0.8.0"),
        ((28, 2), "1.0.0"),
        ((29, 0), "1.1.0"),  # moby main (29.x) vendors CDI v1.1.0
    ),
}
# Engine versions without any CDI support: None from max_cdi_version.
_NO_CDI_BELOW: Final = {"podman": (3, 2), "docker": (25, 0)}
_VERSION = re.compile(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[-+~][0-9A-Za-z.+~-]*)?")


def _parse_engine_version(version: str) -> tuple[int, ...]:
    match = _VERSION.fullmatch(version.strip())
    if match is None:
        raise CgpuValueError(f"engine version {version!r} is not a version number like 4.3.1 or 28.2.0")
    return tuple(int(part) for part in match.groups() if part is not None)


def max_cdi_version(engine: str, version: str) -> str | None:
    """The newest cdiVersion `engine` at `version` accepts; None when that version reads no
    CDI specs at all. Raises ValueError for an engine or version cgpu has no figure for."""
    rows = ENGINE_MAX_VERSION.get(engine)
    if rows is None:
        raise CgpuValueError(
            f"unknown engine {engine!r}; cgpu knows the CDI limits of {' and '.join(ENGINE_MAX_VERSION)}"
        )
    wanted = _parse_engine_version(version)
    if wanted < _NO_CDI_BELOW[engine]:
        return None
    best = None
    for first, max_version in rows:
        if wanted >= first:
            best = max_version
    if best is None:
        oldest = ".".join(map(str, rows[0][0]))
        raise CgpuValueError(
            f"cgpu does not know which cdiVersion {engine} {version} accepts "
            f"(its table starts at {engine} {oldest}); pick --engine none or a newer engine"
        )
    return best
