"""Fabricated engine files for the tests: Go build info blobs (in an ELF section or a plain file),
dpkg status stanzas and node roots laid out as a node has them."""

from __future__ import annotations

import struct
from pathlib import Path

from cgpu.engines.buildinfo import MAGIC

# The 16 bytes cmd/go frames the module info with (runtime/debug's infoStart / infoEnd)
INFO_START = bytes.fromhex("3077af0c9274080241e1c107e6d618e6")
INFO_END = bytes.fromhex("f932433186182072008242104116d8f2")
CDI = "tags.cncf.io/container-device-interface"


def uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def blob(lines: list[str], go: str = "go1.23.4", *, inline: bool = True) -> bytes:
    """The `.go.buildinfo` contents cmd/go writes (Go 1.18+): header, then the two strings."""
    modinfo = INFO_START + ("".join(line + "\n" for line in lines)).encode() + INFO_END
    header = MAGIC + bytes([8, 0x2 if inline else 0]) + bytes(16)
    return header + uvarint(len(go)) + go.encode() + uvarint(len(modinfo)) + modinfo


def elf_with_section(data: bytes, *, name: bytes = b".go.buildinfo") -> bytes:
    """A minimal little-endian ELF64 with a section table holding `name` (the data) and .shstrtab."""
    body_at = 64
    body = data + bytes(-len(data) % 16)
    strtab = b"\0" + name + b"\0.shstrtab\0"
    strtab_at = body_at + len(body)
    shoff = strtab_at + len(strtab) + (-(strtab_at + len(strtab)) % 8)
    header = bytearray(64)
    header[0:4] = b"\x7fELF"
    header[4], header[5], header[6] = 2, 1, 1  # 64-bit, little-endian, version 1
    struct.pack_into("<HHI", header, 16, 2, 62, 1)  # ET_EXEC, x86-64
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHHH", header, 0x34, 64, 0, 0, 0)
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 2)
    sections = bytes(64)  # the null section
    sections += struct.pack("<IIQQQQIIQQ", 1, 1, 3, 0, body_at, len(data), 0, 0, 16, 0)  # PROGBITS, WA
    sections += struct.pack("<IIQQQQIIQQ", 2 + len(name), 3, 0, 0, strtab_at, len(strtab), 0, 0, 1, 0)
    padding = bytes(shoff - strtab_at - len(strtab))
    return bytes(header) + body + strtab + padding + sections


def upstream_containerd(version: str, cdi: str | None) -> bytes:
    """containerd as its release builds are: module mode, the version set with -ldflags -X."""
    lines = [
        "path\tgithub.com/containerd/containerd/v2/cmd/containerd",
        "mod\tgithub.com/containerd/containerd/v2\t(devel)\t",
        "dep\tgithub.com/containerd/go-cni\tv1.1.12\th1:abc=",
    ]
    if cdi:
        lines.append(f"dep\t{CDI}\t{cdi}\th1:def=")
    lines += [
        "build\t-buildmode=pie",
        f'build\t-ldflags="-X github.com/containerd/containerd/v2/version.Version={version} -s -w"',
        "build\tCGO_ENABLED=1",
    ]
    return elf_with_section(blob(lines))


def cri_dockerd(version: str) -> bytes:
    """cri-dockerd as its release builds are (its Makefile: -ldflags -X .../cmd/version.Version=)."""
    lines = [
        "path\tgithub.com/Mirantis/cri-dockerd",
        "mod\tgithub.com/Mirantis/cri-dockerd\t(devel)\t",
        f'build\t-ldflags="-X github.com/Mirantis/cri-dockerd/cmd/version.Version={version} -s -w"',
    ]
    return elf_with_section(blob(lines))


def k3s_binary(containerd: str, cdi: str) -> bytes:
    """k3s: one binary with containerd (k3s-io's fork, a replacement) and the CDI library in it."""
    return elf_with_section(
        blob(
            [
                "path\tgithub.com/k3s-io/k3s/cmd/server",
                "mod\tgithub.com/k3s-io/k3s\t(devel)\t",
                "dep\tgithub.com/containerd/containerd/v2\tv2.0.0\th1:x=",
                f"=>\tgithub.com/k3s-io/containerd/v2\t{containerd}\th1:y=",
                f"dep\t{CDI}\t{cdi}\th1:z=",
                'build\t-ldflags="-X github.com/k3s-io/k3s/pkg/version.Version=v1.33.1+k3s1"',
            ]
        )
    )


def k3s_launcher(version: str) -> bytes:
    """/usr/local/bin/k3s: cmd/k3s, built with k3s's own version alone (scripts/package-cli): no containerd."""
    return elf_with_section(
        blob(
            [
                "path\tgithub.com/k3s-io/k3s/cmd/k3s",
                "mod\tgithub.com/k3s-io/k3s\t(devel)\t",
                f'build\t-ldflags="-X github.com/k3s-io/k3s/pkg/version.Version={version}"',
            ]
        )
    )


def debian_binary(path: str) -> bytes:
    """Debian's builds (GOPATH mode): a path line and build settings, no module list."""
    return elf_with_section(blob([f"path\t{path}", "build\t-compiler=gc", "build\tCGO_ENABLED=1"]))


def dpkg_stanza(package: str, version: str, built_using: str = "", field: str = "Built-Using") -> str:
    text = f"Package: {package}\nStatus: install ok installed\nArchitecture: amd64\nVersion: {version}\n"
    if built_using:
        text += f"{field}: {built_using}\n"
    return text + "Description: an engine\n"


DEBIAN_13_CONTAINERD = dpkg_stanza(
    "containerd",
    "1.7.24~ds1-6+deb13u1",
    "continuity (= 0.3.0-1), golang-github-containerd-nri (= 0.6.1-2), "
    "golang-tags.cncf-container-device-interface (= 0.8.0-5), golang-yaml.v2 (= 2.4.0-4)",
)
DEBIAN_13_DOCKER = dpkg_stanza(
    "docker.io", "26.1.5+dfsg1-9+deb13u1+b1", "containerd (= 1.7.24~ds1-6+deb13u1), golang-yaml.v2 (= 2.4.0-4)"
)
DEBIAN_SID_DOCKER = dpkg_stanza(
    "docker.io",
    "28.5.2+dfsg4-5",
    "continuity (= 0.4.5~ds1-1), golang-tags.cncf-container-device-interface (= 1.0.1-2)",
    field="Static-Built-Using",
)


def node(root: Path, files: dict[str, bytes | str]) -> Path:
    """A node root with these files (paths inside the root)."""
    for path, content in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            target.write_text(content)
        else:
            target.write_bytes(content)
    return root
