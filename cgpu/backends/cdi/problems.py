"""Problems: blocked devices, stale specs, risky edits, a driver mismatch, files in a spec dir that
engines skip, and which driver is loaded without a spec."""

from __future__ import annotations

import os
from collections.abc import Sequence

from cgpu.backends.cdi.device import DeviceAnswer
from cgpu.backends.cdi.device_identity import control_node_fix
from cgpu.backends.cdi.rules import mismatch_fix
from cgpu.backends.cdi.spec_fixes import spec_generator
from cgpu.backends.cdi.view import risky_edits
from cgpu.cdi.model import ContainerEdits, Spec
from cgpu.node.host import HostFS
from cgpu.patterns import lazy
from cgpu.report import ReportBuilder

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from cgpu.cdi.scan import SpecReader

_DRIVER_VERSION_IN_PATH = lazy(r"\.so\.(\d{3}\.\d+(?:\.\d+)?)$|/nvidia/(\d{3}\.\d+(?:\.\d+)?)/")
_HOST_DRIVER_ARG = lazy(r"--host-driver-version=(\d+\.\d+(?:\.\d+)?)")


def name_list(names: list[str], limit: int = 3) -> str:
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit} more"


def _spec_driver_version(spec: Spec, missing: list[tuple[str, str]]) -> str | None:
    """The NVIDIA driver version a spec was generated for, as its hooks or missing paths say."""
    for hook in spec.edits.hooks:
        for arg in hook.args:
            match = _HOST_DRIVER_ARG.fullmatch(arg)
            if match:
                return match.group(1)
    for path, _ in missing:
        match = _DRIVER_VERSION_IN_PATH.search(path)
        if match:
            return match.group(1) or match.group(2)
    return None


class StaleSpec:
    """A spec generated for another NVIDIA driver than the host runs: both things said of it, the
    problem (`report`) and the evidence's clause (`cause`), are built here."""

    __slots__ = ("host_version", "source", "spec_version", "versioned")

    def __init__(self, spec_version: str, host_version: str, source: str, versioned: list[str]) -> None:
        self.spec_version = spec_version
        self.host_version = host_version
        self.source = source  # the host file the driver version was read from
        self.versioned = versioned  # the spec's missing paths that name its driver version

    def report(self, report: ReportBuilder, spec_path: str, blocked: list[DeviceAnswer], host: HostFS) -> None:
        report.problem(
            "error",
            spec_path,
            (
                f"stale spec: it was generated for NVIDIA driver {self.spec_version} but the host runs "
                f"{self.host_version} ({host.display(self.source)}), so {len(self.versioned)} of its paths such as "
                f"{self.versioned[0]} no longer exist and no container with {name_list([a.name for a in blocked])} can "
                f"start; regenerate it with `nvidia-ctk cdi generate --output={spec_path}` (or `systemctl restart "
                f"nvidia-cdi-refresh.service` where the toolkit keeps /var/run/cdi/nvidia.yaml current)"
            ),
            "stale-spec",
        )

    def cause(self) -> str:
        """Why a device gives nothing, as the node answer's evidence says it."""
        return (
            f"its spec is stale (written for NVIDIA driver {self.spec_version}, the host runs {self.host_version}): "
            f"regenerate it with `nvidia-ctk cdi generate`"
        )


def stale_spec(answers: list[DeviceAnswer], host: HostFS) -> StaleSpec | None:
    """What makes the spec of these blocked devices stale, or None when it is not."""
    host_version, source = host.nvidia_driver_version()
    missing = [item for answer in answers for item in answer.missing]
    spec_version = _spec_driver_version(answers[0].device.spec, missing)
    if host_version is None or source is None or spec_version is None or spec_version == host_version:
        return None
    versioned = list(dict.fromkeys(p for p, _ in missing if spec_version in p))
    return StaleSpec(spec_version, host_version, source, versioned) if versioned else None


RISKY = "risky"  # what the reader keeps per spec file: risky_edits of its spec-level edits


def _risky(spec: Spec, used: dict[int, Sequence[str]], reader: SpecReader | None) -> Sequence[str]:
    """`risky_edits` of the spec-level edits, remembered per spec file (while it is unchanged);
    `used`: this probe's, by edits object (none: the one empty tuple)."""
    edits: ContainerEdits = spec.edits
    known = used.get(id(edits))
    if known is None:
        known = reader.recall(spec, RISKY) if reader is not None else None
        if known is None:
            known = risky_edits(edits) or ()
            if reader is not None:
                reader.remember(spec, RISKY, known)
        used[id(edits)] = known
    return known


def report_problems(
    report: ReportBuilder, answers: list[DeviceAnswer], host: HostFS, reader: SpecReader | None = None
) -> None:
    by_spec: dict[str, list[DeviceAnswer]] = {}
    for answer in answers:
        by_spec.setdefault(answer.device.spec.path, []).append(answer)
    used: dict[int, Sequence[str]] = {}
    risky = {
        spec_path: [
            *_risky(group[0].device.spec, used, reader),
            *(message for answer in group for message in answer.risky),
        ]
        for spec_path, group in by_spec.items()
    }
    for spec_path, group in by_spec.items():
        spec = group[0].device.spec
        seen: set[str] = set()
        for message in risky[spec_path]:
            if message not in seen:
                seen.add(message)
                report.problem("warning", spec_path, message, "risky-edit")
        _report_mismatch(report, spec_path, [a for a in group if not a.blocked], host)
        blocked = [a for a in group if a.blocked]
        if not blocked:
            continue
        stale = stale_spec(blocked, host)
        if stale is not None:
            stale.report(report, spec_path, blocked, host)
            continue
        by_cause: dict[tuple[str, str], list[DeviceAnswer]] = {}
        for answer in blocked:
            by_cause.setdefault(answer.missing[0], []).append(answer)
        for (path, what), causing in by_cause.items():
            more = len({p for a in causing for p, _ in a.missing}) - 1
            extra = f" (and {more} more missing paths)" if more > 0 else ""
            unloaded = _driver_not_loaded(spec.kind, host) if path.startswith("/dev/") else None
            control = control_node_fix(path) if not unloaded else None
            if unloaded:
                fix = f"{unloaded}; regenerating the spec does not help"
            elif control:
                fix = control
            elif what.endswith("not a device file on the host"):
                fix = "something replaced the node with another kind of file: reload the driver (or reboot)"
            else:
                fix = "the spec does not fit this host: regenerate it here"
            report.problem(
                "error",
                spec_path,
                f"{name_list([a.name for a in causing])} cannot start: {what}{extra}, so the engine refuses the "
                f"container; {fix}",
                "missing-host-files",
            )


def _report_mismatch(report: ReportBuilder, spec_path: str, runnable: list[DeviceAnswer], host: HostFS) -> None:
    """The kernel module and the user-space files a device's container gets disagree: nothing works."""
    found = [a for a in runnable if a.mismatch is not None]
    if not found:
        return
    user, kernel, source = found[0].mismatch  # type: ignore[misc]
    report.problem(
        "error",
        spec_path,
        f"NVIDIA driver mismatch: a container with {name_list([a.name for a in found])} gets the user-space driver "
        f"{user} but the host's kernel module is {kernel} ({host.display(source)}), so NVML fails with "
        f"'driver/library version mismatch' and CUDA with error 803; {mismatch_fix(user, kernel)}",
        "driver-mismatch",
    )


# Which driver a host has loaded and the command that writes a spec for it.
_GENERATORS = (
    ("nvidia", "the NVIDIA driver", "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`"),
    (
        "wsl",
        "WSL's GPU paravirtualization (/dev/dxg) with NVIDIA's driver store",
        "`nvidia-ctk cdi generate --mode=wsl --output=/etc/cdi/nvidia.yaml`",
    ),
    ("amd", "the amdgpu driver", "`amd-ctk cdi generate --output=/etc/cdi/amd.json` (AMD Container Toolkit)"),
    (
        "intel",
        "an Intel GPU driver (i915 or xe)",
        "a spec like the one in Intel's device-plugin CDI guide (kind intel.com/gpu: card and render node)",
    ),
)


def _loaded_drivers(host: HostFS) -> set[str]:
    loaded = set()
    if host.nvidia_driver_version()[0] is not None or host.exists("/dev/nvidiactl"):
        loaded.add("nvidia")
    if host.exists("/dev/dxg") and any(n.startswith("nv") for n in host.listdir("/usr/lib/wsl/drivers")):
        loaded.add("wsl")  # an NVIDIA driver store under WSL: nvidia-ctk's WSL mode applies
    if host.exists("/sys/module/amdgpu") or host.exists("/dev/kfd"):
        loaded.add("amd")
    if host.exists("/sys/module/i915") or host.exists("/sys/module/xe"):
        loaded.add("intel")
    return loaded


def drivers_without_spec(host: HostFS) -> list[tuple[str, str]]:
    loaded = _loaded_drivers(host)
    return [(driver, spec_generator(key, command, host)) for key, driver, command in _GENERATORS if key in loaded]


def _driver_not_loaded(kind: str, host: HostFS) -> str | None:
    """Why a spec's device nodes are missing when it is the driver, not the spec: the fix."""
    vendor = kind.split("/", 1)[0]
    loaded = _loaded_drivers(host)
    if vendor == "nvidia.com" and not loaded & {"nvidia", "wsl"} and not host.exists("/dev/nvmap"):
        return (
            "the NVIDIA kernel driver is not loaded (no /proc/driver/nvidia/version): load it (`modprobe nvidia`) "
            "or install it"
        )
    if vendor == "amd.com" and "amd" not in loaded:
        return "the amdgpu kernel driver is not loaded (no /sys/module/amdgpu): load it (`modprobe amdgpu`)"
    return None


_BACKUP_SUFFIXES = ("~", ".bak", ".orig", ".old", ".swp", ".tmp", ".rpmnew", ".rpmsave", ".dpkg-old", ".dpkg-dist")


def spec_dir_hints(report: ReportBuilder, dirs: list[str], root: str | None = None) -> None:
    """Info for a person: files in a spec dir that engines skip (`.yml`, backups, hidden files),
    and why a spec dir with no spec gives no device. The reader skips them silently, as engines do.
    Each dir is looked at as the reader looks at it: under `root`, links resolved inside the root."""
    import stat

    from cgpu.cdi.scan import SPEC_EXTENSIONS
    from cgpu.node.host import NodeFiles
    from cgpu.options import DEFAULT_ROOT

    files = NodeFiles(root or DEFAULT_ROOT)

    def is_dir(path: str, *, follow: bool = True) -> bool:
        try:
            return stat.S_ISDIR((files.stat if follow else files.lstat)(path).st_mode)
        except OSError:
            return False

    for folder in dirs:
        if not is_dir(folder, follow=False):
            continue  # the reader already said why it skipped it (a link, a file) or it is not there
        try:
            names = sorted(files.entries(folder))
        except OSError:
            continue
        skipped = [n for n in names if not n.endswith(SPEC_EXTENSIONS) and not is_dir(os.path.join(folder, n))]
        yml = [n for n in skipped if n.lower().endswith((".yml", ".yaml", ".json"))]
        backups = [n for n in skipped if n not in yml and n.endswith(_BACKUP_SUFFIXES)]
        hidden = [n for n in skipped if n not in yml and n not in backups and n.startswith(".")]
        other = [n for n in skipped if n not in yml and n not in backups and n not in hidden]
        for group, why in (
            (yml, "engines read only *.json and *.yaml (case-sensitive): rename to use them"),
            (backups, "backup or editor files: engines skip them, and so does cgpu"),
            (hidden, "hidden files that are not *.json or *.yaml: engines skip them, and so does cgpu"),
            (other, "not *.json or *.yaml: engines skip them, and so does cgpu"),
        ):
            if group:
                report.problem("info", folder, f"skipped {name_list(group, 5)}: {why}", "skipped-file")
        if not any(n.endswith(SPEC_EXTENSIONS) for n in names):
            report.problem(
                "info",
                folder,
                "this spec dir holds no *.json or *.yaml spec, so it defines no device: generate one with "
                "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (NVIDIA), `amd-ctk cdi generate` (AMD) "
                "or your vendor's CDI generator, or point --spec-dir at the dir that has them",
                "no-spec",
            )
