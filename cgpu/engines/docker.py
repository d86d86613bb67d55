"""Docker Engine: CDI from 25.0, off unless configured before 28.2 and on from it; its release rows
and its daemon.json. On the host it counts as its daemon answers cgpu's client, which also asks the
daemon which spec dirs it reads (`cgpu.engines.client`)."""

from __future__ import annotations

from cgpu.engines.base import ContainerEngine

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from cgpu.engines.config import Config, Lister, Reader

DAEMON_JSON = "/etc/docker/daemon.json"


def read_config(read: Reader, path: str) -> Config:
    """Docker Engine's daemon.json: `"features": {"cdi": …}` (off before 28.2 unless true, on from
    28.2 unless false: moby `cmd/dockerd/daemon.go`) and `"cdi-spec-dirs"`: unset, the CDI library's
    defaults; `[""]` or `[]`, no spec dir at all, so CDI is off whatever `features` says (moby
    `cmd/dockerd/daemon.go` `loadDaemonCliConfig` clears `[""]`, and `daemon/cdi.go` `createCDICache`
    refuses an empty list: "No CDI specification directories specified", v25.0.0 to v29.x)."""
    import json

    from cgpu.engines.config import Config, spec_dirs_setting
    from cgpu.problem import Problem

    config = Config()
    text, why, shown = read(path)
    config.file = shown
    config.setting = f'"features": {{"cdi": true}} in {shown}'
    if text is None:
        if why is not None:
            config.files.append(shown)
            config.problems.append(Problem("error", shown, f"cgpu could not read Docker's daemon configuration: {why}"))
        else:
            config.defaulted += ["features.cdi", "cdi-spec-dirs"]
        return config
    config.files.append(shown)
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        config.problems.append(
            Problem("error", shown, f"this daemon.json is not valid JSON ({exc}): dockerd refuses to start with it")
        )
        return config
    if not isinstance(document, dict):
        config.problems.append(
            Problem("error", shown, "this daemon.json is not a JSON object: dockerd refuses to start")
        )
        return config
    features = document.get("features")
    if isinstance(features, dict) and "cdi" in features:
        if isinstance(features["cdi"], bool):
            config.enabled = features["cdi"]
        else:
            config.problems.append(
                Problem("error", shown, f'"features": {{"cdi": {features["cdi"]!r}}} is not a boolean')
            )
    else:
        config.defaulted.append("features.cdi")
    if isinstance(document.get("default-runtime"), str):
        config.default_runtime, config.runtime_file = document["default-runtime"], shown
    spec_dirs_setting(document, "cdi-spec-dirs", shown, config, quoted=True)
    if "cdi-spec-dirs" not in document:
        config.defaulted.append("cdi-spec-dirs")
    elif config.spec_dirs in ([], [""]):
        config.spec_dirs, config.enabled = [], False
        config.setting = f'"cdi-spec-dirs" to the spec dirs, or remove it (it names none), in {shown}'
    return config


class Docker(ContainerEngine):
    __slots__ = ()

    name = "docker"
    example = "28.2.0"
    daemon = "dockerd"
    packages = ("docker.io", "docker-ce", "moby-engine", "docker")  # Debian, Docker's, Fedora's, openSUSE's
    rows = (
        ((25, 0), "0.6.0", "v0.6.x"),  # CDI support (opt-in) starts with Docker Engine 25.0
        ((25, 0, 17), "0.8.0", "v0.8.1"),  # a late 25.0 patch release vendors v0.8.1
        ((26, 0), "0.6.0", "v0.6.x"),
        ((26, 1), "0.7.0", "v0.7.1/v0.7.2"),
        ((27, 4), "0.8.0", "v0.8.0"),
        ((28, 1), "1.0.0", "v1.0.1"),
        ((29, 2), "1.1.0", "v1.1.0"),
    )
    checked_through = (29, 7)  # moby go.mod at docker-v29.7.2: still v1.1.0
    no_cdi_below = (25, 0)
    on_by_default_from = (28, 2)
    checked_through = (29, 7)
    unread_setting = '"features": {"cdi": true} in daemon.json'
    daemon_setting = '"features": {"cdi": true} in the daemon\'s daemon.json'
    refuses_when_off = True
    reached_by_client = True

    def read_configuration(
        self, read: Reader, listdir: Lister, *, major: int | None, flavour: str, on_host: bool
    ) -> Config:
        return read_config(read, DAEMON_JSON)

    def daemon_spec_dirs(self, details: dict[str, object]) -> list[str] | None:
        dirs = details.get("docker_cdi_spec_dirs")
        return [str(d) for d in dirs] if isinstance(dirs, list) else None


ENGINE = Docker()
