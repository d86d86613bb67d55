"""The containerd configuration of the Kubernetes distributions that run their own containerd, read as
each of them writes it before containerd starts (sources in docs/cdi.md, "Kubernetes flavours").

- k3s and RKE2 write `<data-dir>/agent/etc/containerd/config.toml` at every start, from
  `config-v3.toml.tmpl` or else `config.toml.tmpl` in the same dir where the user put one (their
  containerd 2.x lines; the 1.7 lines know only `config.toml.tmpl`), else from their own base template
  (k3s-io/k3s pkg/agent/containerd/config.go `templateGenerations`). A user template replaces the
  generated file: cgpu reads the template. Go template actions (`{{ template "base" . }}`, `{{ if }}`)
  are not evaluated; k3s's base template sets no CDI option, so what decides CDI is the template's own
  text.
- MicroK8s writes `args/containerd.toml` from `args/containerd-template.toml` at every containerd
  start, by substituting `${SNAP}`, `${SNAP_DATA}`, ... (canonical/microk8s
  microk8s-resources/wrappers/run-containerd-with-args): cgpu reads the template the same way.
- k0s reads `/etc/k0s/containerd.toml`, which it writes (where it manages the file) as imports of the
  `/etc/k0s/containerd.d/*.toml` drop-ins and, up to its containerd 1.7 lines, of
  `/run/k0s/containerd-cri.toml`, its CRI plugin's defaults with the drop-ins that have a CRI section
  merged in (k0sproject/k0s pkg/component/worker/containerd). Those files are written at start (the
  second one on a tmpfs): where they are absent, cgpu reads what k0s would write.
"""

from __future__ import annotations

import json
import posixpath
import re

from cgpu.patterns import lazy
from cgpu.problem import Problem

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from cgpu.engines.config import Lister, Reader

RANCHER_DATA_DIRS = {"k3s": "/var/lib/rancher/k3s", "rke2": "/var/lib/rancher/rke2"}
MICROK8S_ARGS = "/var/snap/microk8s/current/args"
# The values run-containerd-with-args substitutes (SNAP_DATA and SNAP_COMMON as snapd sets them for
# the microk8s snap; the runtime and snapshotter as its defaults)
MICROK8S_VARIABLES = {
    "SNAP": "/snap/microk8s/current",
    "SNAP_DATA": "/var/snap/microk8s/current",
    "SNAP_COMMON": "/var/snap/microk8s/common",
    "SNAPSHOTTER": "overlayfs",
    "RUNTIME": "runc",
    "RUNTIME_TYPE": "io.containerd.runc.v2",
}
K0S_CONFIG = "/etc/k0s/containerd.toml"
K0S_DROP_INS = "/etc/k0s/containerd.d"
K0S_CRI_CONFIG = "/run/k0s/containerd-cri.toml"
K0S_MANAGED = "# k0s_managed=true"
MAX_K0S_DROP_INS = 64

# The socket each flavour's containerd serves, and where its binary is: a kubelet given that socket runs its pods
# on that containerd, not on a packaged one the node may also have (k3s-io/k3s pkg/agent/config/config_linux.go,
# shared by RKE2; k0sproject/k0s pkg/component/worker/containerd utils_other.go; canonical/microk8s
# microk8s-resources/default-args/containerd)
FLAVOUR_SOCKETS = {
    "/run/k3s/containerd/containerd.sock": ("k3s", "rke2"),
    "/run/k0s/containerd.sock": ("k0s",),
    "/var/snap/microk8s/common/run/containerd.sock": ("microk8s",),
}

_QUOTED_ACTION = lazy(r"\"\{\{.*?\}\}\"|'\{\{.*?\}\}'", re.DOTALL)
_ACTION = lazy(r"\{\{.*?\}\}", re.DOTALL)
_BASE_ACTION = lazy(r"\{\{-?\s*template\s+\"base\"")
_VERSION_LINE = lazy(r"^version[ \t]*=[ \t]*\d+[ \t]*$", re.MULTILINE)
_IMPORTS_LINE = lazy(r"^imports[ \t]*=[ \t]*\[[^\]\n]*\]", re.MULTILINE)
_SNAP_VARIABLE = lazy(r"\$\{(SNAP|SNAP_DATA|SNAP_COMMON|SNAPSHOTTER|RUNTIME|RUNTIME_TYPE)\}")


def template_settings(text: str) -> str:
    """A k3s containerd template's own TOML: an action that is a whole quoted value becomes "", and a
    line with any other action is left out (its value is k3s's to fill, never a CDI option)."""
    text = _QUOTED_ACTION.sub('""', text)
    text = _ACTION.sub("\0", text)
    return "\n".join(line for line in text.split("\n") if "\0" not in line)


class FlavourFiles:
    """The containerd configuration of one flavour: `path`, the file containerd's reader starts from,
    and `read`, the node's reader with the files the flavour writes at start shown as it writes them."""

    def __init__(self, flavour: str, read: Reader, listdir: Lister, major: int | None, default: str) -> None:
        self._read = read
        self._listdir = listdir
        self.problems: list[Problem] = []
        self._written: dict[str, str] = {}  # path -> the text cgpu reads there instead of the file's
        self.path = default
        if flavour in RANCHER_DATA_DIRS:
            self._rancher(flavour, major)
        elif flavour == "microk8s":
            self._microk8s()
        elif flavour == "k0s":
            self._k0s(major)

    def read(self, path: str) -> tuple[str | None, str | None, str]:
        if path in self._written:
            return self._written[path], None, self._read(path)[2]
        return self._read(path)

    def _rancher(self, flavour: str, major: int | None) -> None:
        folder = posixpath.join(RANCHER_DATA_DIRS[flavour], "agent/etc/containerd")
        self.path = posixpath.join(folder, "config.toml")
        legacy = major is not None and major < 2  # containerd 1.7 lines: no version 3 template
        names = ("config.toml.tmpl",) if legacy else ("config-v3.toml.tmpl", "config.toml.tmpl")
        for name in names:
            template = posixpath.join(folder, name)
            text, why, shown = self._read(template)
            if text is None and why is None:
                continue  # not there: the next one, or the generated file
            self.path = template
            if text is not None:
                self._written[template] = self._with_base_keys(text, template_settings(text), major)
                self.problems.append(
                    Problem(
                        "info",
                        shown,
                        f"{flavour} writes its containerd's config.toml from this template at every start, so cgpu "
                        f"reads the template; its {{{{ }}}} actions are not evaluated ({flavour}'s base template sets "
                        "no CDI option)",
                        "engine",
                    )
                )
            return

    def _with_base_keys(self, text: str, settings: str, major: int | None) -> str:
        """A template that renders k3s's base template gets the base's top-level `version` (2 on the
        containerd 1.7 lines, 3 on 2.x) and `imports` (its config.toml.d or config-v3.toml.d drop-ins, from
        the March 2026 releases): the generated config.toml, rendered from it, shows what this release's
        base has; without it, the version by the containerd line."""
        if not _BASE_ACTION.search(text):
            return settings
        generated = self._read(self.path.rsplit("/", 1)[0] + "/config.toml")[0] or ""
        head = generated.split("\n[", 1)[0]  # the top-level keys, before the first table
        added = []
        if not _VERSION_LINE.search(settings):
            found = _VERSION_LINE.search(head)
            if found:
                added.append(found.group(0))
            elif major is not None:
                added.append(f"version = {2 if major < 2 else 3}")
        if not _IMPORTS_LINE.search(settings):
            found = _IMPORTS_LINE.search(head)
            if found:
                added.append(found.group(0))
        return "\n".join([*added, settings])

    def _microk8s(self) -> None:
        template = posixpath.join(MICROK8S_ARGS, "containerd-template.toml")
        text, why, shown = self._read(template)
        if text is None and why is None:
            return  # no template: the config file as it is
        self.path = template
        if text is not None:
            self._written[template] = _SNAP_VARIABLE.sub(lambda m: MICROK8S_VARIABLES[m.group(1)], text)
            self.problems.append(
                Problem(
                    "info",
                    shown,
                    "MicroK8s writes args/containerd.toml from this template at every containerd start, so cgpu "
                    "reads the template",
                    "engine",
                )
            )

    def _k0s(self, major: int | None) -> None:
        self.path = K0S_CONFIG
        text, why, _ = self._read(K0S_CONFIG)
        legacy = major is None or major < 2  # k0s's containerd 1.7 lines: its CRI file in /run/k0s
        missing = text is None and why is None
        if not missing and not (text or "").startswith(K0S_MANAGED):
            return  # the user's own file: containerd reads it as it is
        drop_ins = sorted(n for n in self._listdir(K0S_DROP_INS) if n.endswith(".toml"))[:MAX_K0S_DROP_INS]
        paths = [posixpath.join(K0S_DROP_INS, name) for name in drop_ins]
        cri = [path for path in paths if _has_cri_section(self._read(path)[0])] if legacy else []
        if missing:  # k0s writes it at start: what it would write
            if legacy:
                imports = [p for p in paths if p not in cri] + [K0S_CRI_CONFIG]
                self._written[K0S_CONFIG] = f"version = 2\nimports = {json.dumps(imports)}\n"
            else:
                self._written[K0S_CONFIG] = f"version = 3\nimports = [{json.dumps(K0S_DROP_INS + '/*.toml')}]\n"
        if legacy:
            cri_text, cri_why, cri_shown = self._read(K0S_CRI_CONFIG)
            if cri_text is None and cri_why is None:
                # containerd 1.7's CRI defaults (CDI off), with the drop-ins that have a CRI section
                # merged in: read here as imports of it, in name order
                self._written[K0S_CRI_CONFIG] = f"version = 2\nimports = {json.dumps(cri)}\n"
                self.problems.append(
                    Problem(
                        "info",
                        cri_shown,
                        "k0s writes this file at every start (containerd 1.7's CRI defaults, CDI off, with the "
                        f"drop-ins in {K0S_DROP_INS} that have a CRI section merged in); it is absent, so cgpu reads "
                        "what k0s would write",
                        "engine",
                    )
                )


def _has_cri_section(text: str | None) -> bool:
    """A k0s drop-in with containerd 1.7's CRI plugin table, which k0s merges into its CRI file."""
    from cgpu.engines.config import parse_toml
    from cgpu.errors import CgpuValueError

    if not text:
        return False
    try:
        document = parse_toml(text)
    except CgpuValueError:
        return False  # imported as it is, and containerd's reader names what is wrong with it
    plugins = document.get("plugins")
    return isinstance(plugins, dict) and "io.containerd.grpc.v1.cri" in plugins


def flavour_binaries(endpoint: str) -> list[str]:
    """The binaries of the containerd that serves this CRI endpoint where it is a flavour's own, in the order to
    look for them; [] for any other endpoint."""
    from cgpu.engines.containerd import FLAVOURS

    path = endpoint.split("://", 1)[-1].rstrip("/")
    path = "/run/" + path.removeprefix("/var/run/") if path.startswith("/var/run/") else path
    flavours = FLAVOUR_SOCKETS.get(path, ())
    return [binary for flavour in flavours for binary, owner in FLAVOURS.items() if owner == flavour]
