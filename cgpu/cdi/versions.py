"""CDI spec versions: the ones the reference library knows, the minimum a spec's fields
require, and the newest one each CDI library release reads. What each container engine's
release reads is the engine's (`cgpu.engines`, its module's release rows)."""

from __future__ import annotations

from cgpu.patterns import lazy

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Final

# Every cdiVersion the reference library (v1.1.0) knows, oldest first. 0.1.0 and 0.2.0 are
# "known" but never accepted: the minimum it computes for any spec is 0.3.0.
KNOWN_VERSIONS: Final = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
EARLIEST: Final = "0.3.0"

# The library release whose behaviour (quirks and crashes included) cgpu models: every engine
# release row (`cgpu.engines`) vendors a release up to it, and the quirks modelled are those of every
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
