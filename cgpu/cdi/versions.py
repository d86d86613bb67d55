"""CDI spec versions: the ones the reference library knows, the minimum a spec's fields
require, and the newest one each container engine's vendored library accepts."""

from __future__ import annotations

from cgpu.errors import CgpuValueError
from cgpu.patterns import lazy

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

    from cgpu.cdi.model import ContainerEdits, Spec

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


# --- the minimum version a spec's fields require -----------------------------------------------
#
# As specs-go/version.go (v1.1.0) has it: validSpecVersions pairs each version with its
# requiresVxyz function, and requiredVersion takes the highest version whose function is true.
# Here each gives why the spec needs that version (a clause for the message), or None; the
# quirks are the library's (the last device's edits only, a digit-first name, the class split
# at the first "/"). 1.0.0 and 0.8.0 require nothing of their own (requiresV100 and requiresV080
# return false: those releases removed Go functions, not fields).


def version_walk(spec: Spec, field: str) -> tuple[bool, str | None]:
    """requiresV050 (field "deviceNodes": a hostPath) or requiresV040 ("mounts": a type): True at
    the first entry that has it; else where a null entry comes first (it panics there), or None.
    They collect `&d.ContainerEdits` of the range variable `d`, and specs-go declares go 1.19
    (one variable per loop), so every device's pointer is the last device's edits: only the last
    device's and then the spec-level edits count."""
    walked: list[tuple[str, ContainerEdits]] = [("containerEdits", spec.edits)]
    if spec.devices:
        walked.insert(0, (f"devices[{len(spec.devices) - 1}].containerEdits", spec.devices[-1].edits))
    for where, edits in walked:
        entries = edits.device_nodes if field == "deviceNodes" else edits.mounts
        for entry in entries:
            if entry is None:
                return False, f"{where}.{field}"
            if entry.host_path if field == "deviceNodes" else entry.type:
                return True, None
    return False, None


def digit_first_name(spec: Spec) -> bool:
    """requiresV050 returns true at a device name starting with an ASCII digit, before it walks
    any device node."""
    return any(device.name[:1].isdigit() and device.name[0].isascii() for device in spec.devices)


def _requires_v110(spec: Spec) -> str | None:
    for edits in [device.edits for device in spec.devices] + [spec.edits]:
        rdt = edits.intel_rdt
        if rdt is not None and (rdt.get("schemata") is not None or rdt.get("enableMonitoring")):
            return "it uses intelRdt.schemata or intelRdt.enableMonitoring"
        if edits.net_devices:
            return "it uses netDevices"
    return None


def _requires_v070(spec: Spec) -> str | None:
    for edits in [device.edits for device in spec.devices] + [spec.edits]:
        if edits.intel_rdt is not None:
            return "it uses intelRdt"
        if edits.additional_gids:
            return "it uses additionalGids"
    return None


def _requires_v060(spec: Spec) -> str | None:
    from cgpu.cdi.names import excerpt

    if spec.annotations or any(device.annotations for device in spec.devices):
        return "it uses annotations"
    if "." in spec.kind.partition("/")[2]:  # requiresV060 splits at "/" whatever the vendor
        return f"it uses a dot in the class of kind {excerpt(spec.kind)}"
    return None


def _requires_v050(spec: Spec) -> str | None:
    from cgpu.cdi.names import excerpt

    for device in spec.devices:
        if device.name[:1].isdigit() and device.name[0].isascii():
            return f"it uses device name {excerpt(device.name)}, which starts with a digit"
    return "it uses deviceNodes[].hostPath" if version_walk(spec, "deviceNodes")[0] else None


def _requires_v040(spec: Spec) -> str | None:
    return "it uses mounts[].type" if version_walk(spec, "mounts")[0] else None


REQUIRES: Final[tuple[tuple[str, Callable[[Spec], str | None] | None], ...]] = (
    ("1.1.0", _requires_v110),
    ("1.0.0", None),
    ("0.8.0", None),
    ("0.7.0", _requires_v070),
    ("0.6.0", _requires_v060),
    ("0.5.0", _requires_v050),
    ("0.4.0", _requires_v040),
)  # newest first: the first that applies is the minimum


def minimum_version(spec: Spec) -> tuple[str, str]:
    """The lowest cdiVersion the library computes for the spec's fields, and why (a clause such
    as "it uses deviceNodes[].hostPath")."""
    for version, requires in REQUIRES:
        reason = requires(spec) if requires is not None else None
        if reason is not None:
            return version, reason
    return EARLIEST, f"{EARLIEST} is the earliest version the CDI library accepts"


# The highest cdiVersion each CDI library release reads (`specs-go/version.go`: `CurrentVersion`
# and the valid-versions list), by major.minor. The module path is
# github.com/container-orchestrated-devices/container-device-interface up to v0.5.x and
# tags.cncf.io/container-device-interface from v0.6.0.
LIBRARY_MAX_VERSION: Final = {
    (0, 3): "0.3.0",
    (0, 4): "0.4.0",
    (0, 5): "0.5.0",
    (0, 6): "0.6.0",
    (0, 7): "0.7.0",
    (0, 8): "0.8.0",
    (1, 0): "1.0.0",
    (1, 1): "1.1.0",
}
CDI_MODULES: Final = (
    "tags.cncf.io/container-device-interface",
    "github.com/container-orchestrated-devices/container-device-interface",
)
_LIBRARY = lazy(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+~][0-9A-Za-z.+~-]*)?")


def library_max_version(library: str) -> str | None:
    """The highest cdiVersion a CDI library release reads ("v0.8.1" -> "0.8.0"); a release newer than
    any cgpu knows reads at least the newest version cgpu knows. None for text that is no release
    (or one older than v0.3.0, before the versions were checked)."""
    match = _LIBRARY.fullmatch(library.strip())
    if match is None:
        return None
    key = (int(match.group(1)), int(match.group(2)))
    if key in LIBRARY_MAX_VERSION:
        return LIBRARY_MAX_VERSION[key]
    newest = max(LIBRARY_MAX_VERSION)
    return LIBRARY_MAX_VERSION[newest] if key > newest else None


# Highest cdiVersion each engine release reads, from the CDI library it vendors at that tag
# (docs/cdi.md names each row's source): (first engine version of the row, max cdiVersion,
# library), oldest first. A version between rows takes the last row at or below it.
ENGINE_ROWS: Final[dict[str, tuple[tuple[tuple[int, ...], str, str], ...]]] = {
    "podman": (
        ((4, 3, 1), "0.5.0", "v0.5.x"),  # observed on Debian 12's podman 4.3.1
        ((4, 7), "0.6.0", "v0.6.1/v0.6.2"),
        ((5, 1), "0.7.0", "v0.7.2"),
        ((5, 2), "0.8.0", "v0.8.0"),
        ((5, 5), "1.0.0", "v1.0.x"),
        ((6, 0), "1.1.0", "v1.1.0"),
    ),
    "docker": (
        ((25, 0), "0.6.0", "v0.6.x"),  # CDI support (opt-in) starts with Docker Engine 25.0
        ((25, 0, 17), "0.8.0", "v0.8.1"),  # a late 25.0 patch release vendors v0.8.1
        ((26, 0), "0.6.0", "v0.6.x"),
        ((26, 1), "0.7.0", "v0.7.1/v0.7.2"),
        ((27, 4), "0.8.0", "v0.8.0"),
        ((28, 1), "1.0.0", "v1.0.1"),
        ((29, 2), "1.1.0", "v1.1.0"),
    ),
    "containerd": (
        ((1, 7), "0.5.0", "v0.5.4"),
        ((1, 7, 12), "0.6.0", "v0.6.1/v0.6.2"),
        ((1, 7, 16), "0.7.0", "v0.7.2"),
        ((1, 7, 27), "0.8.0", "v0.8.1"),
        ((2, 0), "0.8.0", "v0.8.0/v0.8.1"),
        ((2, 0, 5), "1.0.0", "v1.0.0"),
        ((2, 1), "1.0.0", "v1.0.1"),
        ((2, 2, 1), "1.1.0", "v1.1.0"),
    ),
    "crio": (
        ((1, 24), "0.3.0", "v0.3.2"),
        ((1, 25), "0.5.0", "v0.5.x"),
        ((1, 28), "0.6.0", "v0.6.0/v0.6.2"),
        ((1, 30), "0.7.0", "v0.7.2"),
        ((1, 31), "0.8.0", "v0.8.0/v0.8.1"),
        ((1, 33), "1.0.0", "v1.0.1"),
        ((1, 35), "1.1.0", "v1.1.0"),
    ),
}
ENGINE_MAX_VERSION: Final = {
    name: tuple((first, max_version) for first, max_version, _ in rows) for name, rows in ENGINE_ROWS.items()
}
# Engine versions without any CDI support: None from max_cdi_version.
_NO_CDI_BELOW: Final = {"podman": (3, 2), "docker": (25, 0), "containerd": (1, 7), "crio": (1, 23)}
_VERSION = lazy(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[-+~][0-9A-Za-z.+~-]*)?")


def _parse_engine_version(version: str) -> tuple[int, ...]:
    match = _VERSION.fullmatch(version.strip())
    if match is None:
        raise CgpuValueError(f"engine version {version!r} is not a version number like 4.3.1 or 28.2.0")
    return tuple(int(part) for part in match.groups() if part is not None)


def same_version(a: str | None, b: str | None) -> bool:
    """Two engine version texts name the same release ("4.3.1+ds1" and "4.3.1")."""
    if a is None or b is None:
        return False
    try:
        return _parse_engine_version(a) == _parse_engine_version(b)
    except ValueError:
        return False


def cdi_on_by_default(engine: str, version: str | None) -> bool | None:
    """Whether CDI is on when the engine's configuration does not say: containerd 1.7 off, 2.x on;
    Docker off before 28.2, on from it; CRI-O and podman always. None: the version is not known."""
    if engine in ("crio", "podman"):
        return True
    if version is None:
        return None
    try:
        parsed = _parse_engine_version(version)
    except ValueError:
        return None
    return parsed >= ((2,) if engine == "containerd" else (28, 2))


def first_release_reading(engine: str, cdi_version: str) -> str | None:
    """The release of `engine` from which every later release reads `cdi_version` ("podman",
    "0.7.0" -> "5.1"), by the rows; None for an engine cgpu has no rows for or no release reads it.
    Not simply the first row that reads it: Docker 25.0.17 reads 0.8.0 and 26.0 again only 0.6.0."""
    rows = ENGINE_MAX_VERSION.get(engine)
    if rows is None:
        return None
    wanted = version_key(cdi_version)
    first: tuple[int, ...] | None = None
    for start, max_version in rows:
        if version_key(max_version) < wanted:
            first = None
        elif first is None:
            first = start
    return ".".join(map(str, first)) if first is not None else None


def max_cdi_version(engine: str, version: str) -> str | None:
    """The newest cdiVersion `engine` at `version` accepts; None when that version reads no
    CDI specs at all. Raises ValueError for an engine or version cgpu has no figure for."""
    rows = ENGINE_MAX_VERSION.get(engine)
    if rows is None:
        known = ", ".join(ENGINE_MAX_VERSION)
        raise CgpuValueError(f"unknown engine {engine!r}; cgpu knows the CDI limits of {known}")
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
