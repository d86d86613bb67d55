"""cri-dockerd: the CRI in front of Docker Engine, for a kubelet that runs pods on Docker. It is its own
judge: whatever Docker's configuration says, no release up to v0.4.3 passes a CRI request's CDI devices on
to Docker (`core/container_create.go` builds the container from the request's `Devices` only; the CDI
devices are added by PR #522, merged after v0.4.3 and in no release: Mirantis/cri-dockerd#558). A newer
release may carry it: cgpu does not know, and says so."""

from __future__ import annotations

from cgpu.engines.base import ContainerEngine, parse_engine_version

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from cgpu.engines.config import Config, Lister, Reader

LAST_WITHOUT_CDI = (0, 4, 3)  # the newest release whose source cgpu read


class CriDockerd(ContainerEngine):
    __slots__ = ()

    name = "cri-dockerd"
    example = "0.4.3"
    daemon = "cri-dockerd"
    packages = ("cri-dockerd",)
    cri_sockets = ("cri-dockerd.sock",)
    without_cdi = (
        "passes no CDI device on to Docker (no cri-dockerd release up to v0.4.3 does: Mirantis/cri-dockerd#558; "
        "PR #522, merged later, adds it)"
    )

    def max_cdi_version(self, version: str) -> str | None:
        """None (no CDI device at all) through v0.4.3; a newer release is not one cgpu has read."""
        from cgpu.errors import CgpuValueError

        if parse_engine_version(version) <= LAST_WITHOUT_CDI:
            return None
        raise CgpuValueError(
            f"cri-dockerd {version} is newer than v0.4.3, the last release cgpu read (none up to it passes CDI "
            f"devices on; PR #522 does): whether this one does is not known"
        )

    def first_release_reading(self, cdi_version: str) -> str | None:
        return None

    def injects_cdi(self, version: str | None) -> bool | None:
        if version is None:
            return None
        try:
            return False if parse_engine_version(version) <= LAST_WITHOUT_CDI else None
        except ValueError:
            return None

    def version_argv(self, binary: str) -> list[str] | None:
        return [binary, "--version"]

    def read_configuration(
        self, read: Reader, listdir: Lister, *, major: int | None, flavour: str, on_host: bool
    ) -> Config:
        from cgpu.engines.config import Config

        return Config()  # it has no CDI setting of its own


ENGINE = CriDockerd()
