"""What cgpu knows of one container engine, the interface each engine module fills in
(`cgpu.engines.podman`, `docker`, `crio`, `containerd`; `cgpu.engines.registry` lists them):
its release rows (the newest cdiVersion each release reads), when CDI is on, where its binary and
its configuration live, how to ask its version, and the sentences that name its settings.

Kept light: `--engine NAME@VERSION` is checked against the rows on every CLI start, so an engine
module holds data and small methods, and imports its configuration reader's machinery only when
a configuration is read.
"""

from __future__ import annotations

from cgpu.cdi.versions import version_key
from cgpu.errors import CgpuValueError
from cgpu.patterns import lazy

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from cgpu.engines.buildinfo import BuildInfo
    from cgpu.engines.config import Config, Lister, Reader

    # (first engine version of the row, max cdiVersion, the CDI library it vendors), oldest first
    Row = tuple[tuple[int, ...], str, str]

BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin")
# each part at most 9 digits: no release has more, and int() of a longer one is quadratic (and capped)
_VERSION = lazy(r"v?(\d{1,9})(?:\.(\d{1,9}))?(?:\.(\d{1,9}))?(?:[-+~][0-9A-Za-z.+~-]*)?")
_MAJOR = lazy(r"v?(\d{1,9})(?!\d)")  # a longer number is no release cgpu knows


def parse_engine_version(version: str) -> tuple[int, ...]:
    """(4, 3, 1) for "4.3.1" (a release suffix such as "+ds1" or "-dev" ignored); CgpuValueError
    (a ValueError) for text that is no version number."""
    match = _VERSION.fullmatch(version.strip())
    if match is None:
        shown = version if len(version) <= 40 else f"{version[:40]}…"
        raise CgpuValueError(f"engine version {shown!r} is not a version number like 4.3.1 or 28.2.0")
    return tuple(int(part) for part in match.groups() if part is not None)


def same_version(a: str | None, b: str | None) -> bool:
    """Two engine version texts name the same release ("4.3.1+ds1" and "4.3.1")."""
    if a is None or b is None:
        return False
    try:
        return parse_engine_version(a) == parse_engine_version(b)
    except ValueError:
        return False


class ContainerEngine:
    """One engine as cgpu judges it. An engine module makes one instance of its subclass, `ENGINE`,
    and the registry names the module; nothing else in cgpu spells the engine's name to decide."""

    __slots__ = ()

    name = ""  # as --engine and the report spell it
    aliases: tuple[str, ...] = ()  # other spellings --engine takes ("cri-o")
    example = ""  # a release, for the --engine examples ("4.3.1")
    daemon = ""  # its binary's name
    packages: tuple[str, ...] = ()  # the distributions' packages that install it
    rows: tuple[Row, ...] = ()  # its releases' CDI limits (docs/cdi.md names each row's source)
    no_cdi_below: tuple[int, ...] = ()  # releases below this read no CDI spec at all
    # the newest release line whose library cgpu checked (None: not said): a later release is judged by the
    # newest row, and a warning says so
    checked_through: tuple[int, ...] | None = None
    on_by_default_from: tuple[int, ...] | None = None  # None: CDI always on; else the first release with it on
    unread_setting = ""  # the setting that turns CDI on, named where cgpu did not read the configuration
    daemon_setting = ""  # the same, named where the running daemon said its spec dirs (`daemon_spec_dirs`)
    without_cdi = "reads no CDI specs at all"  # what a release below no_cdi_below does, as a sentence says it
    refuses_when_off = False  # with CDI off: a container asking for a CDI device is refused (else starts without)
    cri_sockets: tuple[str, ...] = ()  # the names of its CRI sockets, as a kubelet's endpoint ends
    # cgpu's client reaches it (`cgpu.engines.client`): on the host it counts as it answers, and
    # `--verify` runs containers through it
    reached_by_client = False

    # --- its releases ---------------------------------------------------------------------------

    def max_cdi_version(self, version: str) -> str | None:
        """The newest cdiVersion this engine at `version` accepts; None when that version reads no
        CDI specs at all. CgpuValueError (a ValueError) for a version cgpu has no figure for."""
        wanted = parse_engine_version(version)
        if wanted < self.no_cdi_below:
            return None
        best = None
        for first, max_version, _ in self.rows:
            if wanted >= first:
                best = max_version
        if best is None:
            oldest = ".".join(map(str, self.rows[0][0]))
            raise CgpuValueError(
                f"cgpu does not know which cdiVersion {self.name} {version} accepts "
                f"(its table starts at {self.name} {oldest}); pick --engine none or a newer engine"
            )
        return best

    def row_library(self, version: str) -> str | None:
        """The CDI library the row of `version` names ("v1.1.1"); None where no row covers it."""
        try:
            wanted = parse_engine_version(version)
        except ValueError:
            return None
        return next((library for first, _, library in reversed(self.rows) if wanted >= first), None)

    def beyond_table(self, version: str) -> bool:
        """Whether `version` is a release line newer than any cgpu checked (`checked_through`)."""
        if self.checked_through is None:
            return False
        try:
            wanted = parse_engine_version(version)
        except ValueError:
            return False
        return wanted[: len(self.checked_through)] > self.checked_through

    def first_release_reading(self, cdi_version: str) -> str | None:
        """The release from which every later release reads `cdi_version` ("0.7.0" -> "5.1" for
        podman), by the rows; None where no release reads it. Not simply the first row that reads
        it: Docker 25.0.17 reads 0.8.0 and 26.0 again only 0.6.0."""
        wanted = version_key(cdi_version)
        first: tuple[int, ...] | None = None
        for start, max_version, _ in self.rows:
            if version_key(max_version) < wanted:
                first = None
            elif first is None:
                first = start
        return ".".join(map(str, first)) if first is not None else None

    def injects_cdi(self, version: str | None) -> bool | None:
        """Whether this release injects CDI devices at all (containerd 1.6's CRI plugin has no CDI: the setting
        came in 1.7.0, containerd PR #6654); None where the version is not known."""
        if version is None:
            return None
        try:
            return parse_engine_version(version) >= self.no_cdi_below
        except ValueError:
            return None

    def cdi_on_by_default(self, version: str | None) -> bool | None:
        """Whether CDI is on when its configuration does not say; None: the version is not known."""
        if self.on_by_default_from is None:
            return True
        if version is None:
            return None
        try:
            parsed = parse_engine_version(version)
        except ValueError:
            return None
        return parsed >= self.on_by_default_from

    # --- its files ----------------------------------------------------------------------------

    def binaries(self) -> list[str]:
        """Where its binary may be on a node, in the order looked at."""
        return [f"{folder}/{self.daemon}" for folder in BIN_DIRS]

    def flavour(self, binary: str) -> str:
        """The distribution its binary belongs to where that changes where it reads ("k3s"); "" else."""
        return ""

    def version_from_build_info(self, info: BuildInfo, flavour: str) -> str | None:
        """Its version as its binary's Go build info tells it: the -X version flag, else the main module's."""
        version = info.version_flag()
        if version is None and info.main is not None and info.main[1] not in ("", "(devel)"):
            version = info.main[1]
        return version

    def version_argv(self, binary: str) -> list[str] | None:
        """The command that prints its version, run on the host where its files tell none (None: asked by
        cgpu's client instead, or not at all)."""
        return None

    def version_text(self, output: str) -> str:
        """The part of `version_argv`'s output where its version is the first version number."""
        return output

    def read_configuration(
        self, read: Reader, listdir: Lister, *, major: int | None, flavour: str, on_host: bool
    ) -> Config:
        """What its configuration files say of CDI: `read` and `listdir` see the node's files; `major` is
        its major version where known; `on_host`: the node is this host (an engine that users run
        themselves reads the running user's own configuration too)."""
        raise NotImplementedError

    def read_release_configuration(
        self, read: Reader, listdir: Lister, *, version: str | None, flavour: str, on_host: bool
    ) -> Config:
        """Its configuration as the release `version` reads it (None: a release not known, read by the newest
        rules): `read_configuration` by the major release; an engine whose reading or defaults change within
        a major release (containerd 2.3, podman 5.5) reads by the whole version."""
        major = None
        match = _MAJOR.match(version or "")
        if match is not None:
            major = int(match.group(1))
        return self.read_configuration(read, listdir, major=major, flavour=flavour, on_host=on_host)

    def daemon_spec_dirs(self, details: dict[str, object]) -> list[str] | None:
        """The spec dirs its running daemon named when cgpu's client asked it (empty: CDI off); None
        where it said nothing of them."""
        return None

    def __repr__(self) -> str:
        return f"<engine {self.name}>"
