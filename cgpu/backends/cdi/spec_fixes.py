"""Fixes that fix (docs/cdi.md "Fixes that fix"): where a spec is missing or short because of its
generator, the command or release that makes a good one, not a bare "regenerate".

- NVIDIA's toolkit (1.18.0 and later) ships `nvidia-cdi-refresh.service` and `.path`, which write
  /var/run/cdi/nvidia.yaml at boot and on driver or toolkit changes; /var/run/cdi is cleared on boot,
  so a host with the units and no spec needs the service run (nvidia-container-toolkit
  `deployments/systemd/`).
- Intel's generator is `intel-cdi-specs-generator gpu` (intel/intel-resource-drivers-for-kubernetes,
  `cmd/cdi-specs-generator`), writing /etc/cdi/intel.com-gpu.yaml.
- The generator missed driver libraries that are not beside libcuda (Debian's packages) before
  toolkit 1.20.0 (nvidia-container-toolkit#1908; fixed by "Allow multiple driver library paths", 9859c30c).
"""

from __future__ import annotations

from cgpu.node.host import HostFS
from cgpu.patterns import lazy

REFRESH_SERVICE = "nvidia-cdi-refresh.service"
REFRESH_PATH_UNIT = "nvidia-cdi-refresh.path"
REFRESH_OUTPUT = "/var/run/cdi/nvidia.yaml"  # the service's NVIDIA_CTK_CDI_OUTPUT_FILE_PATH
REFRESH_ENV_FILE = "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
# Where systemd finds a unit: the admin's, then the package's (merged /usr and not).
UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
_OUTPUT_LINE = lazy(r"(?m)^\s*NVIDIA_CTK_CDI_OUTPUT_FILE_PATH\s*=\s*[\"']?([^\"'\s#]+)")

INTEL_GENERATOR = (
    "`intel-cdi-specs-generator gpu` (Intel's resource drivers for Kubernetes, "
    "github.com/intel/intel-resource-drivers-for-kubernetes; it writes /etc/cdi/intel.com-gpu.yaml)"
)
# The release whose generator finds every library of the driver's version, in every folder.
LIBRARIES_FIXED_IN = "1.20.0"


def refresh_units(host: HostFS) -> dict[str, object] | None:
    """The toolkit's refresh units on the node, as data: each unit's file and state (enabled: wanted by
    multi-user.target in /etc; masked: linked to /dev/null; else disabled), and the spec file the service
    writes. None where the node has neither unit."""
    units = []
    for name in (REFRESH_SERVICE, REFRESH_PATH_UNIT):
        file = next((f"{d}/{name}" for d in UNIT_DIRS if host.exists(f"{d}/{name}")), None)
        masked = host.link_target(f"/etc/systemd/system/{name}") == "/dev/null"
        if file is None and not masked:
            continue
        if masked:
            state = "masked"
        elif host.exists(f"/etc/systemd/system/multi-user.target.wants/{name}"):
            state = "enabled"
        else:
            state = "disabled"
        units.append({"name": name, "file": file, "state": state})
    if not units:
        return None
    text, _ = host.read_small(REFRESH_ENV_FILE)
    match = _OUTPUT_LINE.search(text or "")
    return {"units": units, "output": match.group(1) if match else REFRESH_OUTPUT}


def refresh_command(refresh: dict[str, object]) -> str:
    """What makes the refresh write its spec now, and keep doing so, given its units' state."""
    states = {str(u["name"]): str(u["state"]) for u in refresh["units"]}  # type: ignore[attr-defined]
    output = refresh["output"]
    if REFRESH_SERVICE in states and states[REFRESH_SERVICE] == "masked":
        return (
            f"`systemctl unmask {REFRESH_SERVICE} && systemctl restart {REFRESH_SERVICE}` (the toolkit's refresh "
            f"unit is masked; it writes {output})"
        )
    enable = [n for n, s in states.items() if s == "disabled"]
    also = f", and `systemctl enable {' '.join(enable)}` so that it runs at each boot" if enable else ""
    return (
        f"`systemctl restart {REFRESH_SERVICE}` (the toolkit's refresh unit, which writes {output}; "
        f"/var/run/cdi is cleared at boot){also}"
    )


def spec_generator(key: str, default: str, host: HostFS) -> str:
    """The command that writes a spec for a loaded driver (`key` of problems' generators): the refresh
    unit where the NVIDIA toolkit installed it, Intel's generator, else `default`."""
    if key == "nvidia":
        refresh = refresh_units(host)
        if refresh is not None:
            return refresh_command(refresh)
    if key == "intel":
        return INTEL_GENERATOR
    return default


# The library folders of the driver packages, where a generator that looks only in libcuda's misses them.
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")


def on_host_beside(host: HostFS, names: list[str], library: str | None) -> list[str]:
    """Host paths of these libraries (`libnvidia-glcore.so.580.82.07`) in the folder of `library` (a host
    path the spec mounts), its parent, or the distributions' library folders: what the spec could have
    mounted. Empty where the host has none of them (then the driver lacks them, not the spec)."""
    folders = list(dict.fromkeys([*([library.rsplit("/", 1)[0]] if library else []), *LIBRARY_DIRS]))
    if library and library.count("/") > 2:
        folders.insert(1, library.rsplit("/", 2)[0])
    found = []
    for name in names:
        path = next((f"{folder}/{name}" for folder in folders if host.exists(f"{folder}/{name}")), None)
        if path is not None:
            found.append(path)
    return found


def missed_libraries_fix(names: list[str]) -> str:
    """Driver libraries a spec lacks while its driver ships them: the generator's bug before 1.20.0."""
    return (
        f"regenerate the spec with nvidia-ctk {LIBRARIES_FIXED_IN} or later: the host has {', '.join(names)}, "
        f"which earlier releases miss where they are not in libcuda's folder, as Debian's packages install them "
        f"(nvidia-container-toolkit#1908)"
    )
