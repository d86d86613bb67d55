"""podman's containers.conf files as each release reads them (`cgpu.engines.podman` holds the rules'
data): every file podman may read on the node, read once, and what each release makes of them."""

from __future__ import annotations

import os

from cgpu.engines.config import Config
from cgpu.engines.podman import (
    DEFAULT_DIRS,
    ETC_CONF,
    ETC_DROP_INS,
    HONOURS_SPEC_DIRS_FROM,
    ROOTLESS_CONF,
    ROOTLESS_DROP_INS,
    ROOTLESS_FILES_FROM,
    USER_FILES_AS_ROOT_FROM,
    USR_CONF,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from cgpu.engines.config import Lister, Reader


class PodmanConfig(Config):
    """Every containers.conf file podman may read here, as read once, and what each sets; which of them
    count, and what they decide, is the release's (`decide`)."""

    __slots__ = ("entries", "rootless")

    def __init__(self, rootless: bool) -> None:
        super().__init__()
        self.enabled = True
        self.rootless = rootless  # a rootless podman run by this host's user reads the user's own files
        # (kind, shown path, the cdi_spec_dirs it sets or None), in the order podman reads them;
        # kind: "system", "rootless" (5.7 on) or "user" (rootless; root's own from 5.0)
        self.entries: list[tuple[str, str, list[str] | None]] = []

    def decide(self, release: tuple[int, ...] | None) -> PodmanConfig:
        """The files, spec dirs and defaults of podman `release` (None: the newest rules)."""
        from cgpu.problem import Problem

        def counts(kind: str) -> bool:
            if kind == "rootless":
                return release is None or release >= ROOTLESS_FILES_FROM
            if kind == "user":  # read rootless; run by root, root's own from 5.0
                return self.rootless or release is None or release >= USER_FILES_AS_ROOT_FROM
            return True

        self.files, self.spec_dirs, self.defaulted = [], None, []
        honoured = release is None or release >= HONOURS_SPEC_DIRS_FROM
        set_in = ""
        for kind, shown, dirs in self.entries:
            if not counts(kind):
                continue
            self.files.append(shown)
            if dirs is not None:
                set_in = shown
                if honoured:
                    self.spec_dirs = list(dirs)
        if set_in and not honoured:
            shown_release = ".".join(map(str, release or ()))
            self.problems.append(
                Problem(
                    "warning",
                    set_in,
                    f"podman {shown_release} ignores [engine] cdi_spec_dirs (podman reads it from 5.5): "
                    "it reads its default spec dirs",
                )
            )
        if self.spec_dirs is None:
            self.spec_dirs = list(default_dirs(release))
            self.defaulted.append("cdi_spec_dirs")
        return self


def default_dirs(release: tuple[int, ...] | None) -> tuple[str, ...]:
    """The spec dirs podman `release` reads unless containers.conf names others (None: the newest rules)."""
    chosen = DEFAULT_DIRS[-1][1]
    if release is not None:
        for first, dirs in DEFAULT_DIRS:
            if release >= first:
                chosen = dirs
    return chosen


def config_sources(listdir: Lister, *, user_dir: str | None, rootless: bool) -> list[tuple[str, str]]:
    """The containers.conf files podman reads, in its order, each with its kind (system, rootless, user)."""
    from cgpu.engines.config import MAX_DROP_INS, drop_ins

    sources = [("system", USR_CONF), ("system", ETC_CONF)]
    sources += [("system", path) for path in drop_ins(listdir, ETC_DROP_INS)[:MAX_DROP_INS]]
    if rootless:
        uid_dir = f"{ROOTLESS_DROP_INS}/{os.getuid()}"
        sources.append(("rootless", ROOTLESS_CONF))
        for folder in (ROOTLESS_DROP_INS, uid_dir):
            sources += [("rootless", path) for path in drop_ins(listdir, folder)[:MAX_DROP_INS]]
    if user_dir is not None:
        sources.append(("user", f"{user_dir}/containers.conf"))
        sources += [("user", path) for path in drop_ins(listdir, f"{user_dir}/containers.conf.d")[:MAX_DROP_INS]]
    return sources


def read_config(read: Reader, listdir: Lister, *, user_dir: str | None = None, rootless: bool = False) -> PodmanConfig:
    """podman: CDI always on; `[engine] cdi_spec_dirs` from each containers.conf file, later ones winning:
    /usr/share/containers/containers.conf, /etc/containers/containers.conf, the `*.conf` of
    /etc/containers/containers.conf.d in name order, then (`rootless`) /etc/containers/containers.rootless.conf
    and its .d dirs, then the user's containers.conf and its .d dir in `user_dir` (containers/common
    `pkg/config` `systemConfigs` and `addConfigs`). Decided by the newest rules; `decide` decides again
    for a release."""
    from cgpu.engines.config import ReadOnce, spec_dirs_setting, table, toml_file

    config = PodmanConfig(rootless)
    sources = config_sources(listdir, user_dir=user_dir, rootless=rootless)
    for kind, source in sources:
        text, why, shown = read(source)
        if text is None and why is None:
            continue  # podman skips a file that is not there
        document = toml_file(ReadOnce(text, why, shown), source, config)
        engine = table(document, "engine") if document is not None else None
        dirs = None
        if engine is not None:
            config.spec_dirs = None  # each file's own setting, kept apart: the release decides which count
            spec_dirs_setting(engine, "cdi_spec_dirs", shown, config)
            dirs = config.spec_dirs
        config.entries.append((kind, shown, dirs))
    return config.decide(None)
