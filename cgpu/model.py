"""The contracts as pydantic models (README.md "The report"): the probe report (`cgpu schema`, what
`cgpu.probe()` returns) and the image check (`cgpu schema image-check`, `cgpu.check_image()`).
Every field is described; devices have one model per shape a backend writes. Imported only by
the library calls, `cgpu schema` and the tests.

Built for a fresh process's first `cgpu.probe` (bench/bench_cdi.py): no `from __future__ import
annotations` here, as pydantic would compile and evaluate each of some 170 annotations from its
string, and every model's build deferred (`defer_build`), so that the first `Report` validation
builds the one validator it needs, the models it holds inlined, instead of each class building its
own validator and serializer at import (34M instructions of that first call, together)."""

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetPydanticSchema,
    field_validator,
    model_validator,
)
from pydantic_core import core_schema

from cgpu.apis import API_ORDER, CONTAINER_APIS, IMAGE_NEEDS
from cgpu.engines.registry import REGISTRY

if TYPE_CHECKING:
    from cgpu.apis import Api, ContainerApi

    EngineName = str  # one of the registry's names
else:  # pydantic reads these at run time (the schema's enums): the Literals of the one list
    ContainerApi = Literal[CONTAINER_APIS]
    Api = Literal[API_ORDER]
    EngineName = Literal[REGISTRY.names]
from cgpu.errors import CgpuValueError
from cgpu.problem import KINDS, Problem

if TYPE_CHECKING:
    from cgpu.problem import Kind as ProblemKind
else:  # the schema's enum: the Literal of the one list
    ProblemKind = Literal[tuple(KINDS)]


class UserNeed(BaseModel):
    """What the container's user must hold to open one device node read-write (docs/cdi.md "Who may open
    the nodes"): uid 0, or one of `gids` (an empty list: only uid 0)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    node: str = Field(description="the device node's path in the container, e.g. /dev/kfd")
    gids: list[int] = Field(
        description="the container's user must be uid 0 or hold one of these gids (numeric, as the node has them)"
    )
    groups: list[str] = Field(description="the names the host's /etc/group gives those gids; the image may differ")
    why: str = Field(description="the node's mode and group and where they come from, with the flag that gives it")


class ApiState(BaseModel):
    """What containers get of one API, as data: a scheduler never parses `evidence` to tell
    "no" from "could not tell"."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    state: Literal["provided", "absent", "unknown"] = Field(
        description=(
            "provided: containers get it (exactly the APIs in `containers`); absent: the backend looked and "
            "they do not; unknown: the backend could not tell (timeout, crash, unreadable input, no answer)"
        )
    )
    image_needs: list[str] = Field(
        default_factory=list,
        description=(
            "for a provided API, what the container image must bring for it to work; empty otherwise. "
            "Tokens: "
            + "; ".join(f"`{token}`: {text}" for token, text in IMAGE_NEEDS.items())
            + ". A token not listed here (added later) still means the image must bring something."
        ),
    )
    user_needs: list[UserNeed] = Field(
        default_factory=list,
        description=(
            "cdi: for each device node the API opens that is not world-read-writable, what the container's user "
            "must hold (uid 0 or one of `gids`); empty when nothing is needed (NVIDIA's 0666 nodes, a group the "
            "spec's additionalGids give every process) or where the mode cannot be read; absent for other backends"
        ),
    )


def _problem_fields() -> type[BaseModel]:
    # A class named Problem, as the schema names it (`$defs/Problem`); in a function so that the
    # module's one `Problem` is the type itself (cgpu.problem).
    class Problem(BaseModel):
        """One bad input, failed command or finding worth a person's attention."""

        model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

        severity: Literal["error", "warning", "info"] = Field(
            description="error: something that costs an answer (a device, a backend run); warning: worth fixing; info"
        )
        source: str = Field(description="the file, command or device the problem concerns")
        message: str = Field(description="what is wrong and, where cgpu knows it, the fix; one or more sentences")
        kind: ProblemKind = Field(
            default="other",
            description=(
                "what the problem is, for a program to match on (the message is for a person and may be "
                "reworded): "
                + "; ".join(f"`{kind}`: {meaning}" for kind, meaning in KINDS.items())
                + ". Absent in reports written before problems had a kind: read as `other`"
            ),
        )

    return Problem


_ProblemFields = _problem_fields()


def _problem_core_schema(_source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    """`cgpu.problem.Problem` in a model: validated as the `{severity, source, message, kind}` object
    (a `Problem` given is taken as its fields), held as the `Problem` itself, dumped as the object."""
    fields = handler(_ProblemFields)

    def fields_of(value: Any) -> Any:
        return value.as_dict() if isinstance(value, Problem) else value

    def to_problem(checked: Any) -> Problem:
        return Problem(checked.severity, checked.source, checked.message, checked.kind)

    def to_fields(problem: Problem) -> Any:
        return _ProblemFields.model_construct(
            None, severity=problem.severity, source=problem.source, message=problem.message, kind=problem.kind
        )

    return core_schema.no_info_before_validator_function(
        fields_of,
        core_schema.no_info_after_validator_function(to_problem, fields),
        serialization=core_schema.plain_serializer_function_ser_schema(to_fields, return_schema=fields),
    )


ProblemField = Annotated[Problem, GetPydanticSchema(_problem_core_schema)]


class _Device(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")

    name: str = Field(description="the device's name (CDI: vendor/class=name; WSL: the adapter; krunkit: the GPU)")
    apis: list[Api] = Field(description="the APIs a container with this device gets, canonical order")


# --- cdi ------------------------------------------------------------------------------------------


class LiveDevice(BaseModel):
    """A device the probe saw inside the --verify container."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    name: str = Field(description="the name the API gave the device")
    api: Api = Field(description="the API that listed it")
    counted: bool = Field(description="whether it counts as a GPU (software drivers never do)")
    reason: str = Field(description="why it was counted or not")


class CdiDevice(_Device):
    """A CDI device a spec defines, judged against the host (cdi backend)."""

    status: Literal["ok", "partial", "blocked"] = Field(
        description=(
            "ok: a container with it starts and every API it gives is complete; partial: it starts, and some API "
            "lacks a part (see `checks`); blocked: the engine refuses the container (see `missing`)"
        )
    )
    spec: str = Field(description="the path of the spec file that defines the device")
    alias_of: str | None = Field(
        default=None,
        description="another name of the same device in the same spec (a GPU's UUID beside its index), if any",
    )
    checks: dict[ContainerApi, str] = Field(
        description=(
            "per API, the rule's finding: `provided: ...`, `partial: ...`, `unknown: ...` (the host cannot tell, e.g. "
            "a GPU target ROCm runs only with an override) or `absent: ...` with its reason"
        )
    )
    missing: list[str] | None = Field(
        default=None, description="blocked devices only: the host paths the container needs that do not exist"
    )
    live_status: Literal["agrees", "disagrees", "failed"] | None = Field(
        default=None,
        description=(
            "--verify only: whether the probe in a real container with this device agrees with `apis`; failed: "
            "the container did not run or the probe gave no answer (a problem says why)"
        ),
    )
    live_seconds: float | None = Field(default=None, description="--verify only: the container's whole life, seconds")
    live_apis: list[Api] | None = Field(
        default=None, description="--verify only: the APIs the probe found in that container, canonical order"
    )
    live_evidence: dict[Api, str] | None = Field(
        default=None, description="--verify only: per API, the probe's one sentence from that container"
    )
    live_devices: list[LiveDevice] | None = Field(
        default=None, description="--verify only: the devices the probe saw in that container"
    )


class CdiIgnoredDevice(_Device):
    """A device only a spec the engine ignores defines (its cdiVersion is newer than `--engine` accepts)."""

    status: Literal["blocked"] = Field(description="always blocked: the engine cannot resolve the device")
    spec: str = Field(description="the path of the ignored spec")
    reason: str = Field(description="why the engine ignores the spec")


class NvidiaRuntime(BaseModel):
    """NVIDIA's runtime as the engine's default runtime: what a container asking by environment gets."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    runtime: str = Field(description="the default runtime's name in the engine's configuration (nvidia, nvidia-cdi)")
    configured_in: str = Field(description="the engine configuration file that makes it the default")
    mode: Literal["auto", "legacy", "cdi", "csv", "jit-cdi"] | None = Field(
        description="its mode ([nvidia-container-runtime] mode, default auto); null when cgpu cannot tell"
    )
    mode_from: str | None = Field(description="where the mode was read (its config.toml); null: the default")
    requires_env: str = Field(description="the variable a container must set to get GPUs this way")
    default_capabilities: list[str] = Field(description="NVIDIA_DRIVER_CAPABILITIES when the container sets none")
    capabilities: dict[Literal["cuda", "opencl", "vulkan"], str] = Field(
        description="the driver capability each API needs in NVIDIA_DRIVER_CAPABILITIES (or all)"
    )


class Engine(BaseModel):
    """A container engine found on the node (or named with `--engine`), as the cdi backend learned it."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    name: EngineName = Field(description="the engine")
    version: str | None = Field(
        description="its upstream version as learned (1.7.24 for Debian's 1.7.24~ds1-6); null: unknown"
    )
    cdi_library: str | None = Field(
        description=(
            "the exact CDI library release it links (e.g. v0.8.1), from its build info or package; null where only "
            "its version (and so the release table) is known, or where it links none"
        )
    )
    max_cdi_version: str | None = Field(
        description="the highest spec cdiVersion it reads (e.g. 0.8.0); null when it reads no CDI spec or is unknown"
    )
    cdi_enabled: bool | None = Field(
        description=(
            "whether its configuration has CDI on (containerd 1.7: enable_cdi; Docker before 28.2: features.cdi); "
            "null when cgpu cannot tell (a daemon elsewhere, an unreadable or invalid configuration)"
        )
    )
    spec_dirs: list[str] = Field(description="the spec dirs it reads, as its configuration names them (on its node)")
    learned_from: Literal["build-info", "package", "version", "option"] = Field(
        description=(
            "what decided its CDI library: build-info: the Go build info in its binary; package: its package's "
            "metadata (dpkg Built-Using, rpm bundled provides); version: its version and the release table; "
            "option: the version given with --engine NAME@VERSION"
        )
    )
    sources: list[str] = Field(description="the files and commands it was learned from, paths as cgpu read them")
    config_files: list[str] = Field(
        default_factory=list,
        description=(
            "the configuration files it reads, in the order it reads them (containerd: config.toml, then its "
            "imports), paths as cgpu read them; empty where it has none"
        ),
    )
    defaulted: list[str] = Field(
        default_factory=list,
        description=(
            "its CDI settings that no configuration file sets, so its defaults for its release decide them "
            "(enable_cdi, cdi_spec_dirs)"
        ),
    )
    judged: bool = Field(description="whether this engine's rules judged the specs (exactly one, unless --engine none)")
    containers: list[Api] = Field(description="the APIs containers of this engine get, canonical order")
    nvidia_runtime: NvidiaRuntime | None = Field(
        default=None,
        description=(
            "where NVIDIA's runtime is the default runtime: containers asking by NVIDIA_VISIBLE_DEVICES get what its "
            "mode injects from the driver, not the spec files; null otherwise"
        ),
    )


class RequestPath(BaseModel):
    """One way a container asks for a GPU, resolved as the judging engine resolves it (docs/cdi.md "Request
    styles")."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    style: Literal["cdi", "--gpus", "NVIDIA_VISIBLE_DEVICES"] = Field(
        description="cdi: a CDI name (--device vendor/class=name, a pod's CDI device); --gpus; NVIDIA_VISIBLE_DEVICES"
    )
    request: str = Field(description="the request as a command line would write it, e.g. docker run --gpus all")
    injected_by: Literal["cdi", "nvidia-container-runtime-hook", "none", "unknown"] = Field(
        description=(
            "cdi: the engine resolves it to CDI devices; nvidia-container-runtime-hook: NVIDIA's legacy hook mounts "
            "the driver's files by NVIDIA_DRIVER_CAPABILITIES; none: the engine refuses or ignores it; unknown: cgpu "
            "cannot tell"
        )
    )
    apis: list[Api] = Field(description="the APIs a container asking this way gets, canonical order")
    why: str = Field(description="how the engine resolves it, with the source's fix where it gives less")


class PodName(BaseModel):
    """What one requester of GPUs in a pod asks the engine for, and whether the node's specs define it
    (docs/cdi.md "The names a pod asks for")."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    requester: str = Field(description="who turns a pod's GPU request into CDI names (NVIDIA's device plugin, ...)")
    asks_for: str = Field(description="the shape of the names it asks for, e.g. nvidia.com/gpu=GPU-<uuid>")
    names: list[str] = Field(description="the first names of that shape the specs define (at most 8)")
    covered: bool = Field(description="whether the specs define names of that shape: false, every such pod is refused")
    why: str = Field(description="where the names come from, and the fix where none is defined")


class NvidiaDriver(BaseModel):
    """The host's NVIDIA kernel driver and the highest CUDA version it supports (what `cuDriverGetVersion`
    answers in a container), from its version and NVIDIA's table (docs/cdi.md)."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    version: str | None = Field(description="the running kernel driver's version (570.86.15); null: unreadable")
    read_from: str | None = Field(
        description="the host file it was read from (/proc/driver/nvidia/version, /sys/module/nvidia/version)"
    )
    cuda: str | None = Field(
        description="the highest CUDA major.minor the driver supports (12.8); null when cuda_state is unknown"
    )
    cuda_state: Literal["known", "at-least", "unknown"] = Field(
        description=(
            "known: the driver is of the branch of the table's row for `cuda`; at-least: of a newer branch than the "
            "table knows for a newer CUDA, so it supports `cuda` and may support more; unknown: the version is "
            "unreadable or older than the table (never a guess)"
        )
    )
    reason: str = Field(description="why, in one sentence, with the table's source or what to fix")


class NodeNumbers(BaseModel):
    """A device node's type and numbers."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    type: Literal["c", "b"] = Field(description="c: character device, b: block device")
    major: int = Field(description="the major number")
    minor: int | None = Field(
        description="the minor number; null where only the driver's major is known (/proc/devices)"
    )


class WrongNumbers(BaseModel):
    """A device node a spec pins to numbers that are not the host device's: the container's node reaches
    another device or none (docs/cdi.md "Device identity")."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    path: str = Field(description="the node's host path")
    spec: NodeNumbers = Field(
        description="what the engine gives the container's node: the spec's non-zero major, its minor"
    )
    host: NodeNumbers = Field(description="the host's device")
    read_from: str = Field(description="where the host's numbers were read: the node's st_rdev, or /proc/devices")


class CgroupDriver(BaseModel):
    """The cgroup driver of the judging engine's containers."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    engine: str = Field(description="the judging engine")
    driver: Literal["systemd", "cgroupfs"] = Field(description="its cgroup driver")
    read_from: str = Field(description="the setting and file it was read from, or the engine's default")


class DeviceNodes(BaseModel):
    """What the host does with the device nodes the judged devices inject."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    wrong_numbers: list[WrongNumbers] = Field(
        description="nodes whose pinned numbers are not the host device's (empty: none found, or none comparable)"
    )
    cgroup_driver: CgroupDriver | None = Field(
        default=None, description="the judging engine's cgroup driver; absent where no engine judged or cgpu reads none"
    )
    without_dev_char: list[str] | None = Field(
        default=None,
        description=(
            "the injected nodes (host paths) with no /dev/char/MAJOR:MINOR link (nor /sys/dev/char entry): with the "
            "systemd cgroup driver they lose their access on `systemctl daemon-reload`; absent with cgroup_driver"
        ),
    )


class RefreshUnit(BaseModel):
    """One of NVIDIA's CDI refresh units on the node."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    name: Literal["nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"] = Field(description="the unit")
    file: str | None = Field(description="its unit file (/usr/lib/systemd/system/...); null where only a mask is")
    state: Literal["enabled", "disabled", "masked"] = Field(
        description=(
            "enabled: wanted by multi-user.target in /etc/systemd/system; masked: linked to /dev/null there; "
            "disabled: neither"
        )
    )


class CdiRefresh(BaseModel):
    """NVIDIA's toolkit (1.18.0 and later) keeps a spec current with these units (docs/cdi.md "Fixes that fix")."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    units: list[RefreshUnit] = Field(description="the refresh units found, service first")
    output: str = Field(
        description="the spec file the service writes (/var/run/cdi/nvidia.yaml unless its env file names another)"
    )


# --- local and krunkit: what the probe saw ----------------------------------------------------------


class ProbeDetails(BaseModel):
    """What cgpu's probe reports of a device; each field only where the API tells it."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    reason: str = Field(description="why the probe counted the device as a GPU or not (lavapipe, PoCL's CPU, WARP)")
    index: int | None = Field(default=None, description="CUDA: the device ordinal")
    compute_capability: str | None = Field(default=None, description="CUDA: major.minor")
    integrated: bool | None = Field(default=None, description="CUDA: an integrated GPU (Jetson, Grace)")
    total_memory: int | None = Field(default=None, description="CUDA: device memory, bytes")
    gfx_target: str | None = Field(default=None, description="ROCm: the HSA agent's gfx target, e.g. gfx90a")
    type: int | None = Field(
        default=None, description="Vulkan: VkPhysicalDeviceType; OpenCL: the cl_device_type bit field"
    )
    type_name: str | None = Field(default=None, description="the type's name, e.g. DISCRETE_GPU, CPU, GPU")
    vendor: str | None = Field(default=None, description="OpenCL: CL_DEVICE_VENDOR")
    vendor_id: str | None = Field(default=None, description="the PCI vendor id, hex (0x10de)")
    device_id: str | None = Field(default=None, description="the PCI device id, hex")
    api_version: str | None = Field(default=None, description="Vulkan: the API version the device supports")
    driver_id: int | None = Field(default=None, description="Vulkan: VkDriverId, null where the driver tells none")
    driver_id_name: str | None = Field(default=None, description="Vulkan: the VkDriverId's name, e.g. MESA_VENUS")
    driver_name: str | None = Field(default=None, description="Vulkan: VkPhysicalDeviceDriverProperties.driverName")
    driver_info: str | None = Field(default=None, description="Vulkan: VkPhysicalDeviceDriverProperties.driverInfo")
    driver_version: str | None = Field(default=None, description="OpenCL: CL_DRIVER_VERSION")
    platform: str | None = Field(default=None, description="OpenCL: the platform's name (NVIDIA CUDA, Portable ...)")
    allocated: bool | None = Field(
        default=None, description="Vulkan (Venus only): a memory allocation and mapping on the device worked"
    )
    allocation_error: str | None = Field(default=None, description="Vulkan (Venus only): why allocating failed")
    hardware: bool | None = Field(default=None, description="DirectML: DXCore says the adapter is hardware")
    work: str | None = Field(
        default=None,
        description="cuda, vulkan, opencl: the check work (a vector add run on the device, read back and compared): "
        "passed or failed; absent where it was not run (software devices)",
    )
    work_step: str | None = Field(
        default=None, description="where the check work stopped: the driver call, or 'result check' for a wrong sum"
    )
    work_error: str | None = Field(
        default=None, description="the error the check work stopped with, e.g. CUDA_ERROR_JIT_COMPILER_NOT_FOUND"
    )
    work_detail: str | None = Field(
        default=None, description="more on the failure: a hint, the build or JIT log's first lines, the wrong element"
    )
    work_seconds: float | None = Field(default=None, description="how long the check work took on this device")


class ProbeDevice(ProbeDetails, _Device):
    """A device the probe listed for one API (local backend; krunkit: inside the VM)."""

    status: Literal["counted", "ignored"] = Field(description="counted: a GPU that gives `api`; ignored: not a GPU")
    api: Api = Field(description="the API that listed the device")
    counted: bool = Field(description="same as status == counted")
    source: str = Field(description="where the probe ran (this process, a container, a VM)")


# --- wsl -------------------------------------------------------------------------------------------


class _WslSession(_Device):
    libc: Literal["glibc", "musl", "unknown"] = Field(description="the C library of the WSL session's distro")
    kernel: str = Field(description="the session's kernel release (uname -r)")
    os: str | None = Field(default=None, description="the distro's PRETTY_NAME from /etc/os-release")
    wsl: Literal["2"] | None = Field(default=None, description="2 where the session runs under WSL 2")


class WslAdapter(_WslSession):
    """A D3D12 adapter DXCore listed in the WSL session, or NVIDIA's GPU found through libcuda.so.1."""

    status: Literal["ok", "software"] = Field(description="ok: a hardware adapter; software: WARP, Basic Render")
    vendor: str = Field(description="NVIDIA, AMD, Intel, Qualcomm or unknown")
    vendor_id: str | None = Field(default=None, description="the PCI vendor id, hex")
    device_id: str | None = Field(default=None, description="the PCI device id, hex")


class WslGpuPv(_WslSession):
    """WSL's GPU paravirtualization as a whole, where adapters could not be listed one by one."""

    status: Literal["ok", "no-gpu"] = Field(description="ok: it gives at least one API; no-gpu: none")
    adapters_enumerated: Literal[False] = Field(description="always false: adapters were not listed")
    vendors: list[str] = Field(description="the GPU vendors whose drivers the Windows driver store holds")


Device = CdiDevice | CdiIgnoredDevice | ProbeDevice | WslAdapter | WslGpuPv
DEVICES: dict[str, tuple[type[_Device], ...]] = {
    "cdi": (CdiDevice, CdiIgnoredDevice),
    "local": (ProbeDevice,),
    "krunkit": (ProbeDevice,),  # what the probe saw inside the VM
    "wsl": (WslAdapter, WslGpuPv),
}


class ImageApi(BaseModel):
    """One API for containers of the image given with --image."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    node: Literal["provided", "absent", "unknown"] = Field(description="the node's state of the API, without the image")
    verdict: Literal["yes", "no", "unknown", "not-checked"] = Field(
        description=(
            "whether the image has what the API's user space needs (its `image_needs`, the API's own rules, the "
            "user's access to `user_needs`): yes; no (a required check failed); unknown (the image cannot tell); "
            "not-checked: the node does not provide the API"
        )
    )
    state: Literal["provided", "absent", "unknown"] = Field(
        description="the answer for containers of this image: the report's `apis` state with --image"
    )
    reason: str = Field(description="the verdict in one sentence, naming the missing or unknown parts")
    checks: list["ImageCheckItem"] = Field(  # defined below, with the image check
        description="each check behind the verdict: a token of `image_needs`, cuda-version, rocm-targets, user: NODE"
    )


class ImageAnswer(BaseModel):
    """The image given with `cgpu probe --image REF` (`cgpu.probe(image=REF)`): read, never run or pulled."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    reference: str = Field(description="the image reference as given")
    source: str = Field(description="what was read (engine storage, archive, layout, directory); '' if not")
    status: Literal["read", "unreadable", "internal_error"] = Field(
        description="read; unreadable (every provided API is unknown, a problem says why); internal_error"
    )
    os: str = Field(description="the image's os-release PRETTY_NAME; '' when unread")
    architecture: str = Field(description="the image config's CPU architecture; '' when it has none")
    user: str = Field(description="the image config's User ('' for root)")
    seconds: float = Field(description="how long reading and checking the image took")
    apis: dict[ContainerApi, ImageApi] = Field(description="per container API, the image's verdict and the answer")


class Report(BaseModel):
    """What containers started on this node get, per GPU API: `cgpu probe --json`, `cgpu.probe()`.

    `containers` lists the provided APIs; `apis` gives each API's state (provided, absent,
    unknown) and what the image must bring; `evidence` says why in one sentence per API;
    `devices` are the backend's devices (their shape depends on `backend`); `problems` every
    bad input or failed command. The JSON is valid UTF-8: a file name's byte that is not UTF-8
    is written as the four characters `\\xNN`; evidence, problem and reason texts are capped at
    2,000 characters, a cut one ending in `…`.
    """

    model_config = ConfigDict(defer_build=True, extra="forbid")

    format_version: Literal[2] = Field(
        description="the report format; fields added later keep it, a field removed or changed raises it"
    )
    containers: list[Api] = Field(description="APIs a container gets, canonical order, no duplicates")
    apis: dict[Api, ApiState] = Field(description="the state of each of the six APIs")
    evidence: dict[Api, str] = Field(description="one sentence per API, for all six")
    backend: Literal["cdi", "wsl", "krunkit", "local"] = Field(description="the backend that answered")
    platform: str = Field(description="OS and machine cgpu ran on: linux-x86_64, darwin-arm64, windows-amd64")
    devices: list[Device] = Field(
        description=(
            "the devices the backend saw; cdi: CdiDevice or CdiIgnoredDevice, local: ProbeDevice, "
            "krunkit: ProbeDevice (what the probe saw in the VM), wsl: WslAdapter or WslGpuPv"
        )
    )
    problems: list[ProblemField] = Field(description="every bad input, failed command or finding, errors first")
    engines: list[Engine] = Field(
        default_factory=list,
        description=(
            "cdi: each container engine found (or named with --engine), what it reads and what its containers get; "
            "the one whose rules judged has judged = true; empty with --engine none and for other backends"
        ),
    )
    spec_dirs: list[str] | None = Field(
        default=None,
        description=(
            "cdi: the spec dirs read for the answer, lowest priority first, as paths on the machine cgpu ran on "
            "(under --root, inside the root: ROOT/etc/cdi); absent for other backends"
        ),
    )
    nvidia_driver: NvidiaDriver | None = Field(
        default=None,
        description=(
            "cdi: the host's NVIDIA driver version and the highest CUDA it supports, so a scheduler can match an image "
            "that needs cuda>=X.Y; null where the node shows no NVIDIA driver, and for other backends"
        ),
    )
    device_nodes: DeviceNodes | None = Field(
        default=None,
        description=(
            "cdi: what the host does with the device nodes the judged devices inject (numbers that are not the "
            "host's, the judging engine's cgroup driver, nodes without a /dev/char link); null where no device was "
            "judged, and for other backends"
        ),
    )
    cdi_refresh: CdiRefresh | None = Field(
        default=None,
        description=(
            "cdi: NVIDIA's nvidia-cdi-refresh units on the node and their state; null where the node has none, "
            "and for other backends"
        ),
    )
    request_paths: list[RequestPath] | None = Field(
        default=None,
        description=(
            "cdi: each request style the judging engine knows (CDI names; --gpus on Docker and podman; "
            "NVIDIA_VISIBLE_DEVICES where NVIDIA's runtime is the default) and what it gives; absent for other backends"
        ),
    )
    pod_names: list[PodName] | None = Field(
        default=None,
        description=(
            "cdi: for each NVIDIA kind the specs define, the names a pod's GPU request becomes and whether they are "
            "defined (a spec with only `all` resolves no pod asking by UUID); absent for other backends"
        ),
    )
    cgpu_version: str = Field(description="the cgpu that wrote the report")
    checked_at: str = Field(description="when, ISO 8601 in UTC, to the second")
    image: ImageAnswer | None = Field(
        default=None,
        description=(
            "with --image REF only: the image and, per API, its verdict; `containers`, `apis` and `evidence` then "
            "answer for containers of that image (an API the node provides but the image lacks a part of is absent, "
            "one the image cannot tell is unknown); absent without --image"
        ),
    )

    @field_validator("containers")
    @classmethod
    def _canonical(cls, value: list[str]) -> list[str]:
        if value != [api for api in API_ORDER if api in value]:
            raise CgpuValueError(f"containers must be in the order {', '.join(API_ORDER)}, without duplicates")
        return value

    @field_validator("evidence", "apis")
    @classmethod
    def _all_six(cls, value: dict[str, Any]) -> dict[str, Any]:
        missing = [api for api in API_ORDER if not value.get(api)]
        if missing:
            raise CgpuValueError(f"missing for {', '.join(missing)}")
        return value

    @model_validator(mode="after")
    def _containers_are_the_provided(self) -> "Report":
        provided = [api for api in API_ORDER if self.apis[api].state == "provided"]
        if self.containers != provided:
            raise CgpuValueError(f"containers {self.containers} are not the provided APIs {provided}")
        return self

    @model_validator(mode="after")
    def _devices_of_the_backend(self) -> "Report":
        kinds = DEVICES[self.backend]
        for device in self.devices:
            if not isinstance(device, kinds):
                names = " or ".join(kind.__name__ for kind in kinds)
                raise CgpuValueError(f"device {device.name!r} is a {type(device).__name__}, not a {names}")
        return self


# --- image check ---------------------------------------------------------------------------------


class ImageCheckItem(BaseModel):
    """One check of the image's files."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    name: str = Field(
        description=(
            "architecture, libc, python, vulkan-loader, venus-icd, other-icds, mesa-build or version-lock "
            "(a check added later keeps this shape)"
        )
    )
    status: Literal["pass", "fail", "unknown", "skip"] = Field(
        description="pass; fail; unknown: the files cannot tell; skip: does not apply to this image"
    )
    evidence: str = Field(description="what was found, naming the files")
    fix: str = Field(description="what to change when it fails; may be empty")
    required: bool = Field(description="false: advisory, it does not change the verdict")


class ImageCheck(BaseModel):
    """`cgpu image check REF --json`, `cgpu.check_image()`: would this image get vulkan in a krunkit VM?

    `status` says whether the image was checked at all; `verdict` answers the question.
    """

    model_config = ConfigDict(defer_build=True, extra="forbid")

    image: str = Field(description="the image reference as given")
    source: str = Field(description="where the image was read from (engine storage, archive, directory); '' if not")
    os: str = Field(description="the image config's OS; '' when unread")
    architecture: str = Field(description="the CPU architecture (config or ELF files); '' when unread")
    status: Literal["checked", "unreadable", "probe_failed", "internal_error"] = Field(
        description=(
            "checked: the files were checked (and the probe ran, with --machine); unreadable: the image could not "
            "be read, so the verdict is unknown for want of an image, not of evidence in it; probe_failed: the "
            "probe asked for with --machine did not run, the verdict is the files'; internal_error: a bug in cgpu"
        )
    )
    verdict: Literal["yes", "no", "unknown"] = Field(
        description="yes: it gets vulkan; no: it does not (see the failed checks); unknown: cannot tell"
    )
    reason: str = Field(description="the verdict in one sentence")
    checks: list[ImageCheckItem] = Field(description="each check of the image's files; empty when unread")
    problems: list[ProblemField] = Field(description="bad input, failed commands, the probe's findings with --machine")
    cgpu_version: str = Field(description="the cgpu that checked")
    checked_at: str = Field(description="when, ISO 8601 in UTC, to the second")


def report_schema() -> dict[str, Any]:
    """The report's JSON Schema; which device shapes each backend gives is said with if/then."""
    schema = Report.model_json_schema(mode="serialization")
    schema["allOf"] = [
        {
            "if": {"properties": {"backend": {"const": backend}}},
            "then": {
                "properties": {
                    "devices": {"items": {"anyOf": [{"$ref": f"#/$defs/{kind.__name__}"} for kind in kinds]}}
                }
            },
        }
        for backend, kinds in DEVICES.items()
    ]
    return {"$schema": SCHEMA_DIALECT, **schema}


def image_check_schema() -> dict[str, Any]:
    return {"$schema": SCHEMA_DIALECT, **ImageCheck.model_json_schema(mode="serialization")}


SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
