"""podman: CDI always on (from 3.2); its release rows, its containers.conf files and their .d dirs (and,
run rootless on this host, the user's own: containers/common containers.conf(5), "when running in
rootless mode, they also read $HOME/.config/containers/containers.conf"; rootful podman reads none). On the
host it counts as it answers cgpu's client (`podman version`, `cgpu.engines.client`)."""

from __future__ import annotations

import os

from cgpu.engines.base import ContainerEngine

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from cgpu.engines.config import Config, Lister, Reader

# The configuration podman reads, lowest priority first; then the running user's own
CONF_FILES = ("/usr/share/containers/containers.conf", "/etc/containers/containers.conf")
DROP_IN_DIRS = ("/usr/share/containers/containers.conf.d", "/etc/containers/containers.conf.d")


def read_config(read: Reader, listdir: Lister, files: list[str], drop_in_dirs: list[str]) -> Config:
    """podman: CDI always on; `[engine] cdi_spec_dirs` from containers.conf files and their .d dirs,
    later ones winning (containers/common `pkg/config`)."""
    from cgpu.engines.config import MAX_DROP_INS, Config, drop_ins, spec_dirs_setting, table, toml_file

    config = Config()
    ordered = list(files)
    for folder in drop_in_dirs:
        ordered += drop_ins(listdir, folder)[:MAX_DROP_INS]
    for source in ordered:
        document = toml_file(read, source, config)
        if document is None:
            continue
        engine = table(document, "engine")
        if engine is not None:
            spec_dirs_setting(engine, "cdi_spec_dirs", read(source)[2], config)
    config.enabled = True
    return config


def user_config_dir() -> str:
    """The running user's containers folder, as a rootless podman run by this user reads it."""
    return os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "containers")


class Podman(ContainerEngine):
    __slots__ = ()

    name = "podman"
    example = "4.3.1"
    daemon = "podman"
    packages = ("podman",)
    rows = (
        ((4, 3, 1), "0.5.0", "v0.5.x"),  # observed on Debian 12's podman 4.3.1
        ((4, 7), "0.6.0", "v0.6.1/v0.6.2"),
        ((5, 1), "0.7.0", "v0.7.2"),
        ((5, 2), "0.8.0", "v0.8.0"),
        ((5, 5), "1.0.0", "v1.0.x"),
        ((6, 0), "1.1.0", "v1.1.0"),
    )
    no_cdi_below = (3, 2)
    reached_by_client = True

    def read_configuration(
        self, read: Reader, listdir: Lister, *, major: int | None, flavour: str, on_host: bool
    ) -> Config:
        conf_files, drop_in_dirs = list(CONF_FILES), list(DROP_IN_DIRS)
        if on_host and os.geteuid() != 0:  # this user's own files, read by a rootless podman run here (not by root's)
            user_dir = user_config_dir()
            conf_files.append(f"{user_dir}/containers.conf")
            drop_in_dirs.append(f"{user_dir}/containers.conf.d")
        return read_config(read, listdir, conf_files, drop_in_dirs)


ENGINE = Podman()
