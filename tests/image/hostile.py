"""Small hostile inputs for the image readers, made byte by byte (Python's tarfile refuses to
write most of them): tar headers with negative sizes, PAX records of digits, gzip bombs,
layers of many files, rpm databases whose Packages never ends."""

from __future__ import annotations

import gzip
import sqlite3
import zlib
from pathlib import Path

NEGATIVE_512 = b"\xff" * 10 + b"\xfe\x00"  # GNU base-256 for -512: what made tarfile loop (CVE-2025-8194)


def header(
    name: bytes, *, size: int = 0, size_field: bytes | None = None, kind: bytes = b"0", link: bytes = b""
) -> bytes:
    """One ustar header block with a correct checksum."""
    block = bytearray(512)
    block[0 : len(name[:100])] = name[:100]
    block[100:108] = b"0000644\0"
    block[108:124] = b"0000000\0" * 2
    block[124:136] = size_field if size_field is not None else b"%011o\0" % size
    block[136:148] = b"00000000000\0"
    block[156:157] = kind
    block[157 : 157 + len(link[:100])] = link[:100]
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def member(name: str, data: bytes = b"", *, kind: bytes = b"0", link: str = "") -> bytes:
    """A member; a long name or link target goes in a PAX record, as GNU tar and Go write them."""
    records = b"".join(
        pax_record(key, value.encode())
        for key, value in (("path", name), ("linkpath", link))
        if len(value.encode()) > 100
    )
    pax = pax_header(records) if records else b""
    size = len(data) if kind == b"0" else 0
    return pax + header(name.encode()[:100], size=size, kind=kind, link=link.encode()[:100]) + padded(data)


def pax_record(key: str, value: bytes) -> bytes:
    """`LENGTH KEY=VALUE\\n`, LENGTH counting its own digits."""
    body = b" " + key.encode() + b"=" + value + b"\n"
    length = len(body) + len(str(len(body)))
    length = len(body) + len(str(length))
    return b"%d" % length + body


def pax_header(records: bytes) -> bytes:
    return header(b"././@PaxHeader", size=len(records), kind=b"x") + padded(records)


def end() -> bytes:
    return bytes(1024)


def recursive_rpmdb(path: Path) -> None:
    """An rpmdb.sqlite (a few KB) whose Packages is a recursive view that never ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path)
    db.execute(
        "CREATE VIEW Packages AS WITH RECURSIVE r(hnum, blob) AS "
        "(SELECT 1, x'00' UNION ALL SELECT hnum + 1, blob FROM r) SELECT hnum, blob FROM r ORDER BY hnum DESC"
    )
    db.commit()
    db.close()


def many_files_layer(path: Path, count: int, *, elf_heads: bool = False) -> None:
    """A gzip layer of `count` files: empty (a few MB compressed for a million), or with
    100-byte names and 64 bytes that start like an ELF file (what the index keeps most of)."""
    width = 98 if elf_heads else 10
    data = padded(b"\x7fELF" + bytes(60)) if elf_heads else b""
    template = bytearray(header(b"d/" + b"0" * width, size=64 if elf_heads else 0))
    with gzip.open(path, "wb", compresslevel=1) as out:
        batch = []
        for number in range(count):
            template[0 : width + 2] = b"d/%0*d" % (width, number)
            template[148:156] = b" " * 8
            template[148:156] = b"%06o\0 " % sum(template)
            batch.append(bytes(template) + data)
            if len(batch) == 10_000:
                out.write(b"".join(batch))
                batch = []
        out.write(b"".join(batch) + end())


def gzip_bomb_layer(path: Path, gigabytes: int) -> None:
    """A gzip layer holding one file of `gigabytes` GiB of zeros, made of repeated gzip members."""
    chunk = 256 * 1024**2
    zeros = gzip.compress(bytes(chunk), compresslevel=9)
    with open(path, "wb") as out:
        out.write(gzip.compress(header(b"zeros", size=gigabytes * 1024**3)))
        for _ in range(gigabytes * 1024**3 // chunk):
            out.write(zeros)
        out.write(gzip.compress(end()))


def digits_pax_layer(count: int = 500_000) -> bytes:
    """A gzip layer whose PAX header is digits, no record (CVE-2024-6232's shape): 549 bytes."""
    digits = b"1" * count
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    return compressor.compress(pax_header(digits) + header(b"f") + end()) + compressor.flush()
