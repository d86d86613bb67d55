"""The Go build info a Go binary carries (Go's `debug/buildinfo`, `runtime/debug.BuildInfo`),
read from its file without running it, bounded, for the engines cgpu judges by.

Go 1.18 and later write a blob into the ELF section `.go.buildinfo`: the 14-byte magic
`\\xff Go buildinf:`, a pointer-size byte, a flags byte (0x2: the strings follow inline), and at
offset 32 two strings, each a uvarint length and its bytes: the Go version and the module info.
The module info is framed by 16 bytes on each side; its lines are `path\\tPKG`,
`mod\\tPATH\\tVERSION\\tSUM`, `dep\\tPATH\\tVERSION\\tSUM`, `=>\\tPATH\\tVERSION\\tSUM` (replacing the line
before it) and `build\\tKEY=VALUE`. `strip` keeps the section. A binary built outside module mode
(Debian's GOPATH builds, moby's) has a `path` line and build settings but no `mod` or `dep` lines.
"""

from __future__ import annotations

import os
import re
import struct

from cgpu.errors import CgpuError
from cgpu.node.files import open_regular

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import IO

MAGIC = b"\xff Go buildinf:"
_FLAGS_INLINE = 0x2
_HEADER_SIZE = 32
MAX_BLOB = 1 << 20  # k3s's module list, the longest an engine has, is ~60 KiB
MAX_SECTIONS = 4096
MAX_SECTION_NAMES = 1 << 20
MAX_SECTION_TABLE = 1 << 20  # 4,096 entries of 256 bytes; real tables are 40 or 64 bytes an entry
SCAN_LIMIT = 16 << 20  # a file that is no ELF (or has no section table): the blob is looked for this far
MAX_VERSION = 256  # a module version (semver, a pseudo-version, `+incompatible`) is tens of characters
_VERSION_SETTING = "version.Version="
_VERSION_VALUE = re.compile(r"[0-9A-Za-z.+~_-]+")
_ELF64_HEADER, _ELF32_HEADER = 64, 52


class BuildInfoError(CgpuError, ValueError):
    """A blob with the magic whose contents are malformed: str() says what."""


class BuildInfo:
    __slots__ = ("_version_flag", "deps", "go_version", "main", "module_mode", "path", "settings")

    def __init__(self, go_version: str, modinfo: str) -> None:
        self.go_version = go_version
        self.path = ""  # the main package's import path
        self.main: tuple[str, str] | None = None  # (module path, version)
        self.deps: dict[str, str] = {}  # module path -> version, a replacement's version where it has one
        self.settings: dict[str, str] = {}
        self.module_mode = False
        last = ""
        for line in modinfo.splitlines():
            kind, _, rest = line.partition("\t")
            fields = rest.split("\t")
            if kind in ("mod", "dep", "=>") and len(fields) >= 2 and len(fields[1]) > MAX_VERSION:
                raise BuildInfoError(f"the version of {kind} {fields[0][:80]!r} is {len(fields[1])} characters long")
            if kind == "path":
                self.path = rest
            elif kind == "mod" and len(fields) >= 2:
                self.main = (fields[0], fields[1])
                self.module_mode = True
                last = ""
            elif kind == "dep" and len(fields) >= 2:
                self.deps[fields[0]] = fields[1]
                last = fields[0]
            elif kind == "=>" and last and len(fields) >= 2 and fields[1]:
                self.deps[last] = fields[1]  # replaced by another module at this version (a local dir has none)
            elif kind == "build" and "=" in rest:
                key, _, value = rest.partition("=")
                self.settings[key] = value
        # read here, so that a malformed one is the file's BuildInfoError, not the caller's surprise
        self._version_flag = version_flag(self.settings.get("-ldflags", ""))
        if self._version_flag is not None and len(self._version_flag) > MAX_VERSION:
            raise BuildInfoError(f"its -ldflags version is {len(self._version_flag)} characters long")

    def version_flag(self) -> str | None:
        """The version a build set with `-ldflags -X .../version.Version=V` (containerd, k3s), if any."""
        return self._version_flag

    def dep(self, *paths: str) -> str | None:
        for path in paths:
            if path in self.deps:
                return self.deps[path]
        return None


def version_flag(ldflags: str) -> str | None:
    """V of the first `-X PKG/version.Version=V` in `ldflags`, in time linear in its length. PKG is
    word characters, `.`, `/` and `-`; between `-X` and PKG may come whitespace, a backslash and a
    quote (a quoted setting), and `-X` may also start PKG itself (`-Xpkg/version.Version=V`).

    The regex this replaces made PKG lazy (`[\\w./-]*?`), so it ran from every `-X` to the end of
    the run: `-X-X-X...` of 120 KB took 59 s. PKG cannot hold `=`, so the only `version.Version=`
    a start can reach is the one ending the run of PKG characters it is in: each run is looked at
    once, from that setting backwards."""
    at = ldflags.find(_VERSION_SETTING)
    while at >= 0:
        value = _VERSION_VALUE.match(ldflags, at + len(_VERSION_SETTING))
        start = at
        while start and (ldflags[start - 1].isalnum() or ldflags[start - 1] in "_./-"):
            start -= 1  # back to where this run of PKG characters begins
        if value is not None and (ldflags.find("-X", start, at) >= 0 or _x_flag_before(ldflags, start)):
            return value.group()
        at = ldflags.find(_VERSION_SETTING, at + 1)
    return None


def _x_flag_before(text: str, end: int) -> bool:
    """Does `text[:end]` end in `-X`, whitespace, an optional backslash and an optional quote?"""
    end -= text[end - 1 : end] == '"'
    end -= text[end - 1 : end] == "\\"
    while end and text[end - 1].isspace():
        end -= 1
    return text[max(end - 2, 0) : end] == "-X"


def _uvarint(data: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    for index in range(offset, min(len(data), offset + 10)):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    raise BuildInfoError("a string length in the build info runs past its end")


def parse_blob(data: bytes) -> BuildInfo | None:
    """The build info in `data`, which holds the blob at a 16-byte aligned offset; None where
    there is none (or one of Go before 1.18, whose strings are pointers into the binary)."""
    at = data.find(MAGIC)
    while at >= 0 and at % 16:
        at = data.find(MAGIC, at + 1)
    if at < 0:
        return None
    if len(data) < at + _HEADER_SIZE:
        raise BuildInfoError("the build info header is cut short")
    if not data[at + 15] & _FLAGS_INLINE:
        return None  # Go 1.17 and older: no module list to read without resolving pointers
    offset = at + _HEADER_SIZE
    strings = []
    for _ in range(2):
        length, offset = _uvarint(data, offset)
        if offset + length > len(data):
            raise BuildInfoError(f"a build info string of {length} bytes runs past the {len(data)} read")
        strings.append(data[offset : offset + length].decode("utf-8", errors="replace"))
        offset += length
    version, modinfo = strings
    framed = len(modinfo) >= 33 and modinfo[-17] == "\n"
    modinfo = modinfo[16:-16] if framed else ""  # the framing cmd/go puts around it
    return BuildInfo(version, modinfo)


def read_build_info(path: str) -> BuildInfo | None:
    """The build info of the binary at `path` (a regular file: never a FIFO or device); None when
    it carries none. OSError when it cannot be read, BuildInfoError when it is malformed. Every
    offset and size the file gives is checked against its length before anything is read, so a
    sparse or lying file costs no more than `MAX_SECTION_TABLE` + `MAX_BLOB` (ELF) or the 1 MiB
    chunks of the scan."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(_ELF64_HEADER)
        if head[:4] == b"\x7fELF":
            found = _elf_section(handle, head, size)
            if found == _NO_SECTION:
                return None  # a section table without `.go.buildinfo`: not a Go binary of 1.18 or later
            if found is not None:
                offset, length = found
                handle.seek(offset)
                return parse_blob(handle.read(min(length, MAX_BLOB)))
        handle.seek(0)  # no ELF, or no section table: look for the blob itself
        overlap = len(MAGIC) + 16
        data = b""
        read = 0
        while read < SCAN_LIMIT:
            chunk = handle.read(1 << 20)
            if not chunk:
                return None
            base = read - len(data)
            data = data + chunk
            read += len(chunk)
            at = data.find(MAGIC)
            while at >= 0 and (base + at) % 16:
                at = data.find(MAGIC, at + 1)
            if at >= 0:
                handle.seek(base + at)
                return parse_blob(handle.read(MAX_BLOB))
            data = data[-overlap:]
    return None


_NO_SECTION = (-1, -1)


def _elf_section(file: IO[bytes], head: bytes, size: int) -> tuple[int, int] | None:
    """(file offset, size) of `.go.buildinfo` from the ELF section table, bounded; _NO_SECTION when
    the table has none; None when there is no usable table (a header or table cut short or
    pointing past the file's `size`, an entry size out of bounds): then the file is scanned."""
    wide, order = head[4:5], {b"\x01": "<", b"\x02": ">"}.get(head[5:6])
    if order is None or wide not in (b"\x01", b"\x02"):
        return None
    if wide == b"\x02":
        if len(head) < _ELF64_HEADER:
            return None
        (shoff,) = struct.unpack_from(order + "Q", head, 0x28)
        entsize, count, names = struct.unpack_from(order + "HHH", head, 0x3A)
        layout, minimum = order + "IIQQQQ", 40
    else:
        if len(head) < _ELF32_HEADER:
            return None
        (shoff,) = struct.unpack_from(order + "I", head, 0x20)
        entsize, count, names = struct.unpack_from(order + "HHH", head, 0x2E)
        layout, minimum = order + "IIIIII", 24
    table_size = entsize * count
    if not shoff or not 0 < count <= MAX_SECTIONS or entsize < minimum or names >= count:
        return None
    if table_size > MAX_SECTION_TABLE or shoff > size - table_size:
        return None
    file.seek(shoff)
    table = file.read(table_size)
    if len(table) < table_size:
        return None
    sections = [struct.unpack_from(layout, table, i * entsize) for i in range(count)]
    _, _, _, _, names_offset, names_size = sections[names]
    if names_size > MAX_SECTION_NAMES or names_offset > size - names_size:
        return None
    file.seek(names_offset)
    strtab = file.read(names_size)
    for name_at, kind, _, _, offset, length in sections:
        if kind != 8 and strtab[name_at : name_at + 14] == b".go.buildinfo\0":  # 8: SHT_NOBITS, no file data
            if offset > size:
                raise BuildInfoError(f"its .go.buildinfo section starts at byte {offset}, past the file's {size}")
            return offset, length
    return _NO_SECTION
