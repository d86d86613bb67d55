"""CRI-O: CDI always on; its release rows and its crio.conf with the crio.conf.d drop-ins. On the
host, where its files tell no version, `crio version` is asked."""

from __future__ import annotations

import posixpath

from cgpu.engines.base import ContainerEngine

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from cgpu.engines.config import Config, Lister, Reader

CRIO_CONF = "/etc/crio/crio.conf"
CRIO_DROP_INS = "/etc/crio/crio.conf.d"
NOT_A_FILE = "not a regular file (a directory)"  # why `read` gives for an empty folder (`cgpu.node.files`)


def drop_in_files(listdir: Lister, folder: str) -> list[str]:
    """Every file under crio.conf.d, whatever its name (`nvidia-ctk runtime configure --runtime=crio`
    writes 99-nvidia.toml), in the order CRI-O takes them: `UpdateFromPath` walks the folder with Go's
    `filepath.Walk` (names in byte order, a subfolder's files where its name sorts) and applies each
    file that is not a folder (cri-o `pkg/config/config.go` at v1.24.0 to v1.36.x). At most
    MAX_DROP_INS entries looked at, as deep as they lie; an empty folder is among those returned (`read`
    says what it is)."""
    from cgpu.engines.config import MAX_DROP_INS

    found: list[str] = []
    pending = [posixpath.join(folder, name) for name in reversed(listdir(folder))]
    for _ in range(MAX_DROP_INS):  # entries looked at, folders too: a deep tree is bounded as a wide one
        if not pending:
            break
        path = pending.pop()
        inside = listdir(path)
        if inside:  # a folder: walked in place
            pending += [posixpath.join(path, name) for name in reversed(inside)]
        else:
            found.append(path)
    return found


def read_config(read: Reader, listdir: Lister, path: str, drop_in_dir: str) -> Config:
    """CRI-O: CDI always on; `[crio.runtime] cdi_spec_dirs` in crio.conf, then each file under
    crio.conf.d (`drop_in_files`), a later file's value winning: each file is decoded over the
    configuration so far (cri-o `internal/criocli/criocli.go` `mergeConfigFiles`: the file given by
    --config, then UpdateFromPath over --config-dir). A missing crio.conf is skipped."""
    from cgpu.engines.config import Config, ReadOnce, spec_dirs_setting, table, toml_file
    from cgpu.problem import Problem

    config = Config()
    for source in [path, *drop_in_files(listdir, drop_in_dir)]:
        text, why, shown = read(source)
        if why == NOT_A_FILE or (text is None and why is None):
            continue  # an empty folder, or no crio.conf
        config.files.append(shown)
        document = toml_file(ReadOnce(text, why, shown), source, config)
        if document is None:
            continue
        runtime = table(document, "crio", "runtime")
        if runtime is not None and isinstance(runtime.get("default_runtime"), str):
            config.default_runtime, config.runtime_file = runtime["default_runtime"], shown
        if runtime is not None:
            spec_dirs_setting(runtime, "cdi_spec_dirs", shown, config)
    if config.problems:
        config.problems.append(
            Problem("error", read(path)[2], "CRI-O refuses to start with a config file it cannot parse")
        )
    if config.spec_dirs is None:
        config.defaulted.append("cdi_spec_dirs")
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
    no_cdi_below = (1, 24)  # CDI came with 1.24 (cri-o PR #5571); 1.23 links no CDI library of its own
    checked_through = (1, 36)

    def version_argv(self, binary: str) -> list[str] | None:
        return [binary, "version"]

    def read_configuration(
        self, read: Reader, listdir: Lister, *, major: int | None, flavour: str, on_host: bool
    ) -> Config:
        return read_config(read, listdir, CRIO_CONF, CRIO_DROP_INS)


ENGINE = Crio()
