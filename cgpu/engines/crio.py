"""CRI-O: CDI always on; its release rows and its crio.conf with the crio.conf.d drop-ins. On the
host, where its files tell no version, `crio version` is asked."""

from __future__ import annotations

from cgpu.engines.base import ContainerEngine

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from cgpu.engines.config import Config, Lister, Reader

CRIO_CONF = "/etc/crio/crio.conf"
CRIO_DROP_INS = "/etc/crio/crio.conf.d"


def read_config(read: Reader, listdir: Lister, path: str, drop_in_dir: str) -> Config:
    """CRI-O: CDI always on; `[crio.runtime] cdi_spec_dirs` in crio.conf, then each
    crio.conf.d/*.conf in name order, a later file's value winning (CRI-O `pkg/config`)."""
    from cgpu.engines.config import MAX_DROP_INS, Config, drop_ins, spec_dirs_setting, table, toml_file
    from cgpu.problem import Problem

    config = Config()
    files = [path, *drop_ins(listdir, drop_in_dir)]
    for source in files[: MAX_DROP_INS + 1]:
        document = toml_file(read, source, config)
        if document is None:
            continue
        runtime = table(document, "crio", "runtime")
        if runtime is not None and isinstance(runtime.get("default_runtime"), str):
            config.default_runtime, config.runtime_file = runtime["default_runtime"], read(source)[2]
        if runtime is not None:
            spec_dirs_setting(runtime, "cdi_spec_dirs", read(source)[2], config)
    if config.problems:
        config.problems.append(
            Problem("error", read(path)[2], "CRI-O refuses to start with a config file it cannot parse")
        )
    config.enabled = True
    return config


class Crio(ContainerEngine):
    __slots__ = ()

    name = "crio"
    aliases = ("cri-o",)
    example = "1.31.0"
    daemon = "crio"
    packages = ("cri-o", "crio")
    cri_sockets = ("crio.sock",)
    rows = (
        ((1, 24), "0.3.0", "v0.3.2"),
        ((1, 25), "0.5.0", "v0.5.x"),
        ((1, 28), "0.6.0", "v0.6.0/v0.6.2"),
        ((1, 30), "0.7.0", "v0.7.2"),
        ((1, 31), "0.8.0", "v0.8.0/v0.8.1"),
        ((1, 33), "1.0.0", "v1.0.1"),
        ((1, 35), "1.1.0", "v1.1.0"),
    )
    no_cdi_below = (1, 23)

    def version_argv(self, binary: str) -> list[str] | None:
        return [binary, "version"]

    def read_configuration(
        self, read: Reader, listdir: Lister, *, major: int | None, flavour: str, on_host: bool
    ) -> Config:
        return read_config(read, listdir, CRIO_CONF, CRIO_DROP_INS)


ENGINE = Crio()
