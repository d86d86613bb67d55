"""What one CDI device gives a container: its findings per API, what blocks it, a driver mismatch."""

from __future__ import annotations

from cgpu.apis import CONTAINER_APIS
from cgpu.backends.cdi.rules import PARTIAL, PROVIDED, Finding
from cgpu.cdi.model import ResolvedDevice

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Sequence

APIS = CONTAINER_APIS  # metal: the report's own evidence


class DeviceAnswer:
    # Plain classes, not dataclasses, in this backend: creating a dataclass costs about a
    # millisecond at import, a visible share of the CLI's start-up (docs/cdi.md#speed).
    __slots__ = ("device", "findings", "mismatch", "missing", "risky", "same")

    def __init__(
        self,
        device: ResolvedDevice,
        findings: dict[str, Finding],
        missing: list[tuple[str, str]],
        mismatch: tuple[str, str, str] | None = None,
        same: object = None,
        risky: Sequence[str] = (),
    ) -> None:
        self.device = device
        self.findings = findings  # may be the same dict as another spec's device: equal findings are one
        # one object for the devices of one spec with the same edits (a GPU's index and UUID
        # names): what a container gets with them is one device
        self.same = findings if same is None else same
        self.mismatch = mismatch  # (user-space version, kernel module version, where it was read)
        self.missing = missing  # (host path, "the mount source /x (for /y) does not exist on the host")
        self.risky = risky  # what its own edits (not its spec's) hand the container too much: `risky_edits`

    @property
    def name(self) -> str:
        return self.device.qualified_name

    @property
    def blocked(self) -> bool:
        return bool(self.missing)

    @property
    def apis(self) -> list[str]:
        if self.blocked:
            return []
        return [api for api in APIS if self.findings[api].state == PROVIDED]

    @property
    def status(self) -> str:
        if self.blocked:
            return "blocked"
        return "partial" if any(f.state == PARTIAL for f in self.findings.values()) else "ok"
