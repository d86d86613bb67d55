"""CDI spec versions: the ones the reference library knows, the minimum a spec's fields
require, and the newest one each CDI library release reads. What each container engine's
release reads is the engine's (`cgpu.engines`, its module's release rows)."""

from __future__ import annotations

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

# The two readings cgpu models (quirks and crashes included). LIBRARY: v1.1.0's, and every release
# up to it. LIBRARY_MAIN: the library's main branch as released in v1.1.1 (late August 2026): it takes
# `permissions: none` (90e09e4, "allow empty cgroup permissions") and one-character vendors and
# classes (e1a6596, PR #321), and reads a symlinked spec dir (078b4b1, os.ReadDir). `library_rules`
# picks one for the library an engine links.
LIBRARY: Final = "v1.1.0"
LIBRARY_MAIN: Final = "main"
# The first release with LIBRARY_MAIN's rules, and the commit time of the last of its three changes
# (078b4b1, 2026-08-09 12:21 UTC): a Go pseudo-version of v1.1.1 from then on has them all
FIRST_MAIN_RELEASE: Final = (1, 1, 1)
MAIN_COMPLETE_AT: Final = "20260809122100"


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


def library_rules(library: str | None) -> str:
    """The reading a CDI library release gets: LIBRARY_MAIN from v1.1.1 (a Go pseudo-version of v1.1.1,
    `v1.1.1-0.<commit time>-<commit>`, from MAIN_COMPLETE_AT on), LIBRARY for an older one, one cgpu
    cannot read ("v0.6.x") or None (not known). String work, no regex: it runs on every engine's answer."""
    text = (library or "").strip().removeprefix("v")
    core, suffix = text, ""
    for index, char in enumerate(text):
        if char in "-+~":
            core, suffix = text[:index], text[index:]
            break
    parts = core.split(".")
    if len(parts) != 3 or not all(part.isascii() and part.isdigit() and len(part) <= 9 for part in parts):
        return LIBRARY
    release = tuple(int(part) for part in parts)
    if release == FIRST_MAIN_RELEASE and suffix.startswith("-0."):  # a pseudo-version: its commit time decides
        return LIBRARY_MAIN if suffix[3:17] >= MAIN_COMPLETE_AT else LIBRARY
    return LIBRARY_MAIN if release >= FIRST_MAIN_RELEASE else LIBRARY
