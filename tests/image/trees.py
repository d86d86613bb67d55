"""Fabricated image root trees and archives for the image-check tests.

Every tree is a small Fedora- (or Debian-, Alpine-) shaped rootfs whose libraries are
64-byte ELF headers: enough for what `cgpu image check` reads, without shipping binaries.
The rpm database is a real rpmdb.sqlite holding rpm header blobs written here by
`rpm_header`, following rpm's header format (tests check rpm itself reads them).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import struct
import tarfile
from pathlib import Path

AARCH64, X86_64 = 183, 62
# what copr-rpmbuild stamps (its macros_for_task): the owner only, and no packager
COPR_VENDOR = "Fedora Copr - user slp"
COPR_REPO_ID = "copr:copr.fedorainfracloud.org:slp:mesa-libkrun-vulkan"  # dnf's id for `copr enable` of it
STOCK_VENDOR = "Fedora Project"

# rpm tag numbers and types (rpm's rpmtag.h)
_STRING, _INT32, _STRING_ARRAY, _BIN = 6, 4, 8, 7
_TAGS = {
    "NAME": (1000, _STRING),
    "VERSION": (1001, _STRING),
    "RELEASE": (1002, _STRING),
    "EPOCH": (1003, _INT32),
    "BUILDTIME": (1006, _INT32),
    "BUILDHOST": (1007, _STRING),
    "VENDOR": (1011, _STRING),
    "PACKAGER": (1015, _STRING),
    "ARCH": (1022, _STRING),
    "PROVIDENAME": (1047, _STRING_ARRAY),
    "PROVIDEVERSION": (1113, _STRING_ARRAY),
    "DIRINDEXES": (1116, _INT32),
    "BASENAMES": (1117, _STRING_ARRAY),
    "DIRNAMES": (1118, _STRING_ARRAY),
}


def elf(machine: int = AARCH64) -> bytes:
    """A 64-byte little-endian ELF64 header for a shared object of this machine."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    return ident + struct.pack("<HHI", 3, machine, 1) + bytes(64 - 24)


def rpm_header(**values: object) -> bytes:
    """An rpm header blob as rpmdb.sqlite stores it: il, dl, index entries, data.

    Like rpm, the first entry is the immutable region tag (63) whose trailer closes the data.
    FILES=[paths] is turned into DIRNAMES/BASENAMES/DIRINDEXES.
    """
    values.setdefault("BUILDTIME", 1767225600)  # rpm skips a database header without one
    files = values.pop("FILES", None)
    if files:
        dirs: list[str] = []
        indexes, bases = [], []
        for path in files:
            folder, base = path.rsplit("/", 1)
            if folder + "/" not in dirs:
                dirs.append(folder + "/")
            indexes.append(dirs.index(folder + "/"))
            bases.append(base)
        values.update(DIRNAMES=dirs, BASENAMES=bases, DIRINDEXES=indexes)
    entries, data = [], b""
    for name, value in sorted(values.items(), key=lambda item: _TAGS[item[0]][0]):  # rpm wants data in tag order
        tag, kind = _TAGS[name]
        if kind == _INT32:
            data += bytes(-len(data) % 4)
            items = value if isinstance(value, list) else [value]
            entries.append((tag, kind, len(data), len(items)))
            data += struct.pack(f">{len(items)}i", *items)
        elif kind == _STRING:
            entries.append((tag, kind, len(data), 1))
            data += str(value).encode() + b"\0"
        else:
            entries.append((tag, kind, len(data), len(value)))
            data += b"".join(str(v).encode() + b"\0" for v in value)
    il = len(entries) + 1
    region = struct.pack(">iiii", 63, _BIN, -(il * 16), 16)
    entries.insert(0, (63, _BIN, len(data), 16))
    data += region
    index = b"".join(struct.pack(">iiii", *entry) for entry in entries)
    return struct.pack(">ii", il, len(data)) + index + data


def write_rpmdb(path: Path, headers: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE Packages (hnum INTEGER PRIMARY KEY AUTOINCREMENT, blob BLOB NOT NULL)")
    db.executemany("INSERT INTO Packages (blob) VALUES (?)", [(h,) for h in headers])
    db.commit()
    db.close()


def mesa_header(vendor: str = COPR_VENDOR, release: str = "102.fc44", version: str = "25.3.6") -> bytes:
    return rpm_header(
        NAME="mesa-vulkan-drivers",
        VERSION=version,
        RELEASE=release,
        ARCH="aarch64",
        VENDOR=vendor,
        **({} if vendor.startswith("Fedora Copr") else {"PACKAGER": "Fedora Project"}),
        BUILDHOST="builder",
        FILES=[
            "/usr/lib64/libvulkan_virtio.so",
            "/usr/lib64/libvulkan_lvp.so",
            "/usr/share/vulkan/icd.d/virtio_icd.aarch64.json",
        ],
    )


def copr_repo_file(repo_id: str = COPR_REPO_ID) -> tuple[str, str]:
    """The file `dnf copr enable` writes under /etc/yum.repos.d: its name and text (dnf5's copr plugin)."""
    _, hub, owner, project = repo_id.split(":", 3)
    web_owner = "@" + owner[len("group_") :] if owner.startswith("group_") else owner
    text = (
        f"[{repo_id}]\nname=Copr repo for {project} owned by {web_owner}\n"
        f"baseurl=https://download.{hub}/results/{web_owner}/{project}/fedora-$releasever-$basearch/\n"
        "type=rpm-md\nskip_if_unavailable=True\ngpgcheck=1\n"
        f"gpgkey=https://download.{hub}/results/{web_owner}/{project}/pubkey.gpg\n"
        "repo_gpgcheck=0\nenabled=1\nenabled_metadata=1\n"
    )
    return f"_{repo_id}.repo", text


def nevras_toml(from_repo: dict[str, str]) -> str:
    """dnf5's /usr/lib/sysimage/libdnf5/nevras.toml, as libdnf5 (toml11 4) formats it."""
    lines = ['version = "1.0"', "", "[nevras]"]
    lines += [f'"{nevra}" = {{ from_repo = "{repo}" }}' for nevra, repo in sorted(from_repo.items())]
    return "\n".join(lines) + "\n"


def _put(root: Path, path: str, content: bytes | str) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content.encode() if isinstance(content, str) else content)


def _link(root: Path, path: str, target: str) -> None:
    link = root / path
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link)


def icd(library: str) -> str:
    return json.dumps({"file_format_version": "1.0.1", "ICD": {"library_path": library, "api_version": "1.4.318"}})


def fedora_tree(
    root: Path,
    *,
    vendor: str = COPR_VENDOR,
    release: str = "102.fc44",
    loader: bool = True,
    lock: bool = True,
    python: bool = True,
    machine: int = AARCH64,
    manifest: str | None = None,
    mesa_from: str = COPR_REPO_ID,
) -> Path:
    """A Fedora 44 rootfs with (by default) the libkrun Mesa build, pinned: the good Venus image.

    dnf's records are there as `krunkit/Containerfile` leaves them: the copr's repo file when
    Mesa came from a copr, and dnf5's record that Mesa came from `mesa_from` ("" for none).
    """
    for link, target in (
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
        ("bin", "usr/bin"),
        ("var/lib/rpm", "../../usr/lib/sysimage/rpm"),
    ):
        _link(root, link, target)
    _put(root, "etc/os-release", 'NAME="Fedora Linux"\nID=fedora\nPRETTY_NAME="Fedora Linux 44 (Container Image)"\n')
    _put(root, "usr/lib/ld-linux-aarch64.so.1", elf(machine))
    _put(root, "usr/lib64/libc.so.6", elf(machine))
    _put(root, "usr/bin/sh", elf(machine))
    if loader:
        _put(root, "usr/lib64/libvulkan.so.1.4.313", elf(machine))
        _link(root, "usr/lib64/libvulkan.so.1", "libvulkan.so.1.4.313")
    _put(root, "usr/lib64/libvulkan_virtio.so", elf(machine))
    _put(root, "usr/lib64/libvulkan_lvp.so", elf(machine))
    _put(
        root,
        "usr/share/vulkan/icd.d/virtio_icd.aarch64.json",
        manifest if manifest is not None else icd("/usr/lib64/libvulkan_virtio.so"),
    )
    _put(root, "usr/share/vulkan/icd.d/lvp_icd.aarch64.json", icd("/usr/lib64/libvulkan_lvp.so"))
    if python:
        _put(root, "usr/bin/python3.14", elf(machine))
        _link(root, "usr/bin/python3", "python3.14")
    headers = [
        rpm_header(NAME="glibc", VERSION="2.42", RELEASE="5.fc44", ARCH="aarch64", VENDOR=STOCK_VENDOR),
        mesa_header(vendor, release),
    ]
    if loader:
        headers.append(
            rpm_header(NAME="vulkan-loader", VERSION="1.4.313.0", RELEASE="1.fc44", ARCH="aarch64", VENDOR=STOCK_VENDOR)
        )
    write_rpmdb(root / "usr/lib/sysimage/rpm/rpmdb.sqlite", headers)
    if mesa_from.startswith("copr:"):
        _put(root, "etc/yum.repos.d/" + copr_repo_file(mesa_from)[0], copr_repo_file(mesa_from)[1])
    if mesa_from:
        nevra = f"mesa-vulkan-drivers-25.3.6-{release}.aarch64"
        _put(root, "usr/lib/sysimage/libdnf5/nevras.toml", nevras_toml({nevra: mesa_from}))
    if lock:
        _put(
            root,
            "etc/dnf/versionlock.toml",
            'version = "1.0"\n\n[[packages]]\nname = "mesa-vulkan-drivers"\ncomment = "added by dnf5"\n'
            '[[packages.conditions]]\nkey = "evr"\ncomparator = "="\nvalue = "25.3.6-102.fc44"\n',
        )
    return root


def debian_tree(root: Path) -> Path:
    """Debian 12 arm64 with its own Mesa (Venus included, but stock)."""
    _put(root, "etc/os-release", 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n')
    lib = "usr/lib/aarch64-linux-gnu"
    _put(root, f"{lib}/ld-linux-aarch64.so.1", elf())
    _put(root, f"{lib}/libc.so.6", elf())
    _put(root, f"{lib}/libvulkan.so.1.3.239", elf())
    _link(root, f"{lib}/libvulkan.so.1", "libvulkan.so.1.3.239")
    _put(root, f"{lib}/libvulkan_virtio.so", elf())
    _put(root, "usr/share/vulkan/icd.d/virtio_icd.json", icd(f"/{lib}/libvulkan_virtio.so"))
    _put(
        root,
        "var/lib/dpkg/status",
        "Package: libc6\nStatus: install ok installed\nArchitecture: arm64\nVersion: 2.36-9+deb12u10\n\n"
        "Package: mesa-vulkan-drivers\nStatus: install ok installed\nArchitecture: arm64\n"
        "Maintainer: Debian X Strike Force <debian-x@lists.debian.org>\nVersion: 22.3.6-1+deb12u1\n"
        "Description: Mesa Vulkan graphics drivers\n multi-line\n\n",
    )
    return root


def alpine_tree(root: Path) -> Path:
    """Alpine (musl) arm64 with Mesa's Venus driver."""
    _put(root, "etc/os-release", 'NAME="Alpine Linux"\nID=alpine\nPRETTY_NAME="Alpine Linux v3.22"\n')
    _put(root, "lib/ld-musl-aarch64.so.1", elf())
    _put(root, "usr/lib/libvulkan.so.1.4.313", elf())
    _link(root, "usr/lib/libvulkan.so.1", "libvulkan.so.1.4.313")
    _put(root, "usr/lib/libvulkan_virtio.so", elf())
    _put(root, "usr/share/vulkan/icd.d/virtio_icd.aarch64.json", icd("/usr/lib/libvulkan_virtio.so"))
    _put(
        root,
        "lib/apk/db/installed",
        "C:Q1x\nP:mesa-vulkan-virtio\nV:25.1.9-r0\nA:aarch64\nF:usr/lib\nR:libvulkan_virtio.so\n\n",
    )
    return root


# --- archives ---------------------------------------------------------------------------------


def layer_tar(root: Path | None = None, extra: list[tuple[tarfile.TarInfo, bytes]] = ()) -> bytes:
    """A layer tar of a tree (names like `./usr/...`, as `tar -C root .` makes them) plus extra members."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if root is not None:
            tar.add(root, arcname=".")
        for info, data in extra:
            tar.addfile(info, io.BytesIO(data) if data else None)
    return out.getvalue()


def member(
    name: str, data: bytes = b"", *, kind: bytes = tarfile.REGTYPE, link: str = ""
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info, data


def docker_archive(
    path: Path,
    layers: list[bytes],
    *,
    arch: str = "arm64",
    env: list[str] = (),
    tag: str = "localhost/cgpu-test:hand",
) -> Path:
    config = json.dumps(
        {
            "architecture": arch,
            "os": "linux",
            # the tag as a label: each run's image its own (a suite's `podman rmi -f` of its tag never
            # removes the image another suite is loading at the same time)
            "config": {"Env": list(env), "Labels": {"cgpu.test.tag": tag}},
            "rootfs": {"type": "layers", "diff_ids": [_diff_id(layer) for layer in layers]},
        }
    ).encode()
    files = {"config.json": config}
    names = []
    for number, layer in enumerate(layers):
        names.append(f"layer{number}/layer.tar")
        files[names[-1]] = layer
    files["manifest.json"] = json.dumps([{"Config": "config.json", "RepoTags": [tag], "Layers": names}]).encode()
    _write_tar(path, files)
    return path


def oci_archive(
    path: Path, layers: list[bytes], *, arch: str = "arm64", gzip_layers: bool = True, env: list[str] = ()
) -> Path:
    import gzip

    files: dict[str, bytes] = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}'}

    def blob(data: bytes, media_type: str) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        files[f"blobs/sha256/{digest}"] = data
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}

    config = blob(
        json.dumps(
            {
                "architecture": arch,
                "os": "linux",
                "config": {"Env": list(env)},
                "rootfs": {"type": "layers", "diff_ids": [_diff_id(layer) for layer in layers]},
            }
        ).encode(),
        "application/vnd.oci.image.config.v1+json",
    )
    layer_descs = [
        blob(
            gzip.compress(layer) if gzip_layers else layer,
            "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gzip_layers else ""),
        )
        for layer in layers
    ]
    manifest = blob(
        json.dumps({"schemaVersion": 2, "config": config, "layers": layer_descs}).encode(),
        "application/vnd.oci.image.manifest.v1+json",
    )
    manifest["platform"] = {"os": "linux", "architecture": arch}
    files["index.json"] = json.dumps({"schemaVersion": 2, "manifests": [manifest]}).encode()
    _write_tar(path, files)
    return path


def _diff_id(layer: bytes) -> str:
    return "sha256:" + hashlib.sha256(layer).hexdigest()


def _write_tar(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
