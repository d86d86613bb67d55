"""podman: CDI from 3.2, always on; its release rows, and its containers.conf files as each release
reads them (containers/common `pkg/config`, the release each podman vendors): which files and .d dirs
count, whether `[engine] cdi_spec_dirs` is honoured at all, and the spec dirs it reads by default. On
the host it counts as it answers cgpu's client (`podman version`, `cgpu.engines.client`).

Through podman 5.8 (common v0.67.0) the drop-ins are the `*.conf` files of /etc/containers/containers.conf.d
only, never a `.d` dir beside /usr/share/containers/containers.conf (common `systemConfigs`,
`addConfigs`); docs/cdi.md gives each rule's source."""

from __future__ import annotations

import os

from cgpu.engines.base import ContainerEngine, parse_engine_version
from cgpu.options import DEFAULT_SPEC_DIRS

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from cgpu.engines.config import Config, Lister, Reader

USR_CONF = "/usr/share/containers/containers.conf"  # the distribution's defaults
ETC_CONF = "/etc/containers/containers.conf"
ETC_DROP_INS = "/etc/containers/containers.conf.d"
# read by a rootless podman from 5.7 (common v0.65.0, container-libs commit 8ebc3b16), before the user's own
ROOTLESS_CONF = "/etc/containers/containers.rootless.conf"
ROOTLESS_DROP_INS = "/etc/containers/containers.rootless.conf.d"

# The spec dirs each release reads where containers.conf does not set them (or where it ignores them):
# 3.x (no CDI spec read: `no_cdi_below`) /etc/cdi; 4.0-5.4 the
# library's DefaultSpecDirs; 5.5 common v0.63's DefaultCdiSpecDirs, /etc/cdi only; 5.6 and later
# /var/run/cdi again (common PR #2462, v0.64.0).
STATIC_DIR_ONLY = DEFAULT_SPEC_DIRS[:1]  # /etc/cdi without /var/run/cdi
DEFAULT_DIRS: tuple[tuple[tuple[int, ...], tuple[str, ...]], ...] = (
    ((0,), STATIC_DIR_ONLY),
    ((4, 0), DEFAULT_SPEC_DIRS),
    ((5, 5), STATIC_DIR_ONLY),
    ((5, 6), DEFAULT_SPEC_DIRS),
)
HONOURS_SPEC_DIRS_FROM = (5, 5)  # podman PR #25717: before it, cdi_spec_dirs in containers.conf is ignored
USER_FILES_AS_ROOT_FROM = (5, 0)  # common v0.58.0 reads the user's file whoever runs podman
ROOTLESS_FILES_FROM = (5, 7)


def user_config_dir() -> str:
    """The running user's containers folder, as a podman run by this user reads it."""
    return os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "containers")


class Podman(ContainerEngine):
    __slots__ = ()

    name = "podman"
    example = "4.3.1"
    daemon = "podman"
    packages = ("podman",)
    rows = (
        ((4, 0), "0.2.0", "46367ec063fd (pre-release)"),  # validSpecVersions: 0.1.0 and 0.2.0
        ((4, 1), "0.4.0", "v0.4.0"),
        ((4, 3), "0.5.0", "v0.5.2/v0.5.x"),  # observed on Debian 12's podman 4.3.1
        ((4, 7), "0.6.0", "v0.6.1/v0.6.2"),
        ((5, 1), "0.7.0", "v0.7.2"),
        ((5, 2), "0.8.0", "v0.8.0"),
        ((5, 5), "1.0.0", "v1.0.x"),
        ((6, 0), "1.1.0", "v1.1.0"),
    )
    # 3.0 and 3.1 vendor no CDI package (podman go.mod at v3.0.0, v3.1.0); 3.2-3.4 a 2021 draft
    # (f99e8b6c10b9, its pkg/devices.go and specs-go at v3.2.0...v3.4.7) that walks /etc/cdi for *.json only,
    # decodes the draft's format (device nodes as hostPath/containerPath, permissions a list: a spec in the
    # released format either fails to decode and is skipped, or gives mounts without a source) and looks a
    # `vendor/class=name` request up by the whole string, which names no device ("CDI: device ... not found")
    no_cdi_below = (4, 0)
    without_cdi = (
        "reads no spec in the CDI format (3.0 and 3.1 have no CDI support; 3.2-3.4 a 2021 draft that reads only "
        "*.json under /etc/cdi, in the draft's own format, and fails every vendor/class=name request: "
        "podman#20257 and #24474, `stat nvidia.com/gpu=0: no such file or directory` on Ubuntu 22.04's 3.4.4; "
        "podman 4.1 or later reads them)"
    )
    checked_through = (6, 0)
    reached_by_client = True

    def read_configuration(
        self, read: Reader, listdir: Lister, *, major: int | None, flavour: str, on_host: bool
    ) -> Config:
        # on this host, a podman run by a user reads that user's own files; run by root, root's from 5.0
        rootless = on_host and os.geteuid() != 0
        reads_user = rootless or (on_host and (major is None or major >= USER_FILES_AS_ROOT_FROM[0]))
        from cgpu.engines.podman_files import read_config

        return read_config(read, listdir, user_dir=user_config_dir() if reads_user else None, rootless=rootless)

    def read_release_configuration(
        self, read: Reader, listdir: Lister, *, version: str | None, flavour: str, on_host: bool
    ) -> Config:
        from cgpu.engines.podman_files import PodmanConfig

        config = super().read_release_configuration(read, listdir, version=version, flavour=flavour, on_host=on_host)
        if not isinstance(config, PodmanConfig) or version is None:
            return config
        try:
            return config.decide(parse_engine_version(version))
        except ValueError:
            return config


ENGINE = Podman()
