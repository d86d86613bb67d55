"""A strict, streaming reader of tar archives (ustar, GNU long names, PAX), for image layers.

Python's tarfile is not used on image content: on the Pythons cgpu supports it loops for ever
on a negative member size (CVE-2025-8194) and takes quadratic time on a crafted PAX header
(CVE-2024-6232). This reader validates every header before it acts on it: checksums, sizes
that are non-negative and capped, PAX records parsed in one linear pass with a size cap, and a
bounded run of extended headers per member. It reads forward only, so every byte of a blob
goes through the caller's stream (where digests and the deadline are checked).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

from cgpu.errors import CgpuError

BLOCK = 512
PATH_MAX = 4096  # Linux's limit on a path; a longer name or link target cannot be in a real file system
_PAX_MAX = 1024**2  # an extended header; real ones are a few hundred bytes
_META_RUN = 8  # extended headers (PAX, GNU long name/link) before one member
_SKIP_CHUNK = 1024**2
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_HIGH = bytes(range(128, 256))
_NO_DATA = (b"1", b"2", b"3", b"4", b"5", b"6")
_KINDS = {b"0": "file", b"\0": "file", b"7": "file", b"1": "hardlink", b"2": "symlink", b"5": "dir"}


class TarFormatError(CgpuError):
    """The stream is not a well-formed tar archive; str() says what and where."""


# a damaged archive: what this reader and the decompressors raise
READ_ERRORS = (TarFormatError, OSError, EOFError, zlib.error, lzma.LZMAError, ValueError)


@dataclass(slots=True)
class Member:
    name: str
    kind: str  # "file", "dir", "symlink", "hardlink", "other"
    size: int  # data bytes that follow the header
    linkname: str = ""
    offset: int = 0  # where the data starts in the (uncompressed) stream


def decompressed(stream: IO[bytes]) -> IO[bytes]:
    """The stream itself when it is a plain tar, else a gzip, bzip2 or xz reader over it.
    Its first bytes are looked at with peek() (a buffered reader) or read and seeked back."""
    peek = getattr(stream, "peek", None)
    if peek is not None:
        magic = peek(6)[:6]
    else:
        magic = stream.read(6)
        stream.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[return-value]
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(stream)
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(stream)
    if magic.startswith(_ZSTD_MAGIC):
        raise TarFormatError("zstd-compressed, which this Python cannot read; re-save the image with gzip layers")
    return stream


class TarReader:
    """Members of a tar stream, in order. `read()` gives the current member's data; whatever
    is not read is skipped (by seeking when `seekable`, else by reading) when the next one is asked."""

    def __init__(self, stream: IO[bytes], *, max_size: int, tick: Callable[[], None], seekable: bool = False) -> None:
        self._stream = stream
        self._max_size = max_size
        self._tick = tick  # called between blocks: raises to stop (the deadline)
        self._seekable = seekable
        self._pos = 0
        self._left = 0  # data bytes of the current member not yet read
        self._padding = 0

    def read(self, n: int) -> bytes:
        n = min(n, self._left)
        data = self._stream.read(n)
        if len(data) < n:
            raise TarFormatError(f"the archive ends inside a member's data (offset {self._pos + len(data)})")
        self._left -= n
        self._pos += n
        return data

    def __iter__(self) -> Iterator[Member]:
        while True:
            self._skip(self._left + self._padding)
            self._left = self._padding = 0
            member = self._next()
            if member is None:
                return
            self._left = member.size
            self._padding = -member.size % BLOCK
            member.offset = self._pos
            yield member

    def _skip(self, n: int) -> None:
        if n and self._seekable:
            self._stream.seek(n, 1)
            self._pos += n
            return
        while n:
            self._tick()
            chunk = self._stream.read(min(n, _SKIP_CHUNK))
            if not chunk:
                raise TarFormatError(f"the archive ends inside a member's data (offset {self._pos})")
            n -= len(chunk)
            self._pos += len(chunk)

    def _block(self) -> bytes | None:
        self._tick()
        block = self._stream.read(BLOCK)
        if not block:
            return None
        if len(block) < BLOCK:
            raise TarFormatError(f"the archive ends inside a header (offset {self._pos})")
        self._pos += BLOCK
        return block

    def _data(self, size: int, what: str) -> bytes:
        if size > _PAX_MAX:
            raise TarFormatError(f"{what} at offset {self._pos - BLOCK} is {size} bytes, more than {_PAX_MAX}")
        data = self._stream.read(size)
        if len(data) < size:
            raise TarFormatError(f"the archive ends inside {what} (offset {self._pos})")
        self._pos += size
        self._skip(-size % BLOCK)
        return data

    def _next(self) -> Member | None:
        pax: dict[str, str] = {}
        long_name = long_link = None
        for _ in range(_META_RUN + 1):
            block = self._block()
            if block is None or block == bytes(BLOCK):
                return None  # the end-of-archive marker (or no marker at all: tar accepts both)
            at = self._pos - BLOCK
            _check_sum(block, at)
            size = _number(block[124:136], "size", at)
            kind = block[156:157]
            if kind in (b"x", b"g"):
                records = _pax_records(self._data(size, "an extended (PAX) header"), at)
                if kind == b"x":
                    pax.update(records)
                continue
            if kind in (b"L", b"K"):
                text = _text(self._data(size, "a GNU long name").split(b"\0", 1)[0])
                if kind == b"L":
                    long_name = text
                else:
                    long_link = text
                continue
            if "size" in pax:
                size = _pax_number(pax["size"], at)
            if kind in _NO_DATA:
                size = 0  # links, folders and devices carry no data whatever the field says (as tarfile reads them)
            if kind == b"S":  # an old GNU sparse file: its extra map blocks come before its data
                extended = block[482]
                while extended:
                    more = self._block()
                    if more is None:
                        raise TarFormatError(f"the archive ends inside a sparse file's map (offset {self._pos})")
                    extended = more[504]
            if size > self._max_size:
                raise TarFormatError(f"a member at offset {at} claims {size} bytes, more than {self._max_size} bytes")
            name = pax.get("path") or long_name or _name(block)
            linkname = pax.get("linkpath") or long_link or _text(block[157:257].split(b"\0", 1)[0])
            found = _KINDS.get(kind, "other")
            if kind == b"\0" and name.endswith("/"):
                found = "dir"  # an old tar's folder, as tarfile reads it
            elif found == "file" and any(k.startswith("GNU.sparse") for k in pax):
                found = "other"  # a PAX sparse file: its data is a map, then pieces
            return Member(name, found, size, linkname)
        raise TarFormatError(f"more than {_META_RUN} extended headers in a row before offset {self._pos}")


def _check_sum(block: bytes, at: int) -> None:
    """The sum of the header's bytes with the checksum field as spaces: unsigned, or signed as old tars wrote it."""
    stored = _number(block[148:156], "checksum", at)
    unsigned = sum(block) - sum(block[148:156]) + 8 * 32
    if stored == unsigned:
        return
    high = len(block) - len(block.translate(None, _HIGH)) - (8 - len(block[148:156].translate(None, _HIGH)))
    if stored != unsigned - 256 * high:
        raise TarFormatError(f"not a tar header at offset {at} (bad checksum)")


def _number(field: bytes, what: str, at: int) -> int:
    """An octal field, or GNU's base-256 one; negative and malformed values are refused."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    if field[:1] == b"\xff":
        raise TarFormatError(f"the header at offset {at} has a negative {what}")
    digits = field.split(b"\0", 1)[0].strip(b" ")
    if not digits:
        return 0
    if digits.translate(None, b"01234567"):
        raise TarFormatError(f"the header at offset {at} has a malformed {what} field")
    return int(digits, 8)


def _pax_number(value: str, at: int) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > 20:
        raise TarFormatError(f"the extended header at offset {at} has a malformed size {value[:30]!r}")
    return int(value)


def _pax_records(data: bytes, at: int) -> dict[str, str]:
    """`LENGTH KEY=VALUE\\n` records, each checked against its own length, in one pass."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos, pos + 21)
        digits = data[pos:space] if space > pos else b""
        if not digits.isdigit():
            raise TarFormatError(f"the extended header at offset {at} has a malformed record")
        end = pos + int(digits)
        if end > len(data) or end <= space + 1 or data[end - 1] != 0x0A:
            raise TarFormatError(f"the extended header at offset {at} has a record of the wrong length")
        key, equals, value = data[space + 1 : end - 1].partition(b"=")
        if not equals:
            raise TarFormatError(f"the extended header at offset {at} has a record without '='")
        records[_text(key)] = _text(value)
        pos = end
    return records


def _name(block: bytes) -> str:
    name = block[0:100].split(b"\0", 1)[0]
    if block[257:263] == b"ustar\x00":  # POSIX ustar: a prefix holds the start of a long name
        prefix = block[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return _text(name)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")
