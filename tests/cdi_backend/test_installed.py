"""The engine that will inject, learned from its installed files under --root: Go build info, the
package database, its configuration (CDI on or off, spec dirs), the kubelet's runtime; remembered
by file identity. Fabricated nodes laid out as real ones are (the Debian stanzas are the control
data of Debian 13's and unstable's packages)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgpu.engines import buildinfo, containerd, crio, docker, podman_files
from cgpu.engines import config as engine_config
from cgpu.engines.buildinfo import BuildInfoError, parse_blob, read_build_info
from tests.cdi_backend import engine_files as ef
from tests.cdi_backend.helpers import HOSTS, SAMPLES, probe

CURRENT = SAMPLES / "nvidia-current/spec/nvidia.yaml"  # cdiVersion 0.7.0 (nvidia-ctk 1.19+)
ALL = ["cuda", "vulkan", "opencl"]


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))


def nvidia_node(tmp_path: Path, files: dict[str, bytes | str], spec_dir: str = "/etc/cdi") -> Path:
    """The nvidia-580 sample host with the current spec in `spec_dir` and these engine files."""
    root = tmp_path / "node"
    shutil.copytree(HOSTS / "nvidia-580", root, symlinks=True)
    (root / spec_dir.lstrip("/")).mkdir(parents=True, exist_ok=True)
    shutil.copy(CURRENT, root / spec_dir.lstrip("/") / "nvidia.yaml")
    return ef.node(root, files)


def judge(root: Path, **options: object) -> dict:
    options.setdefault("engine", "auto")
    return probe([], root, **options)


def judged(report: dict) -> dict:
    [entry] = [e for e in report["engines"] if e["judged"]]
    return entry


# --- Go build info ------------------------------------------------------------------------------


def test_build_info_of_an_upstream_containerd_names_its_cdi_library(tmp_path: Path):
    binary = tmp_path / "containerd"
    binary.write_bytes(ef.upstream_containerd("v2.0.4", "v0.8.1"))
    info = read_build_info(str(binary))
    assert info is not None and info.module_mode
    assert info.version_flag() == "v2.0.4"
    assert info.dep(ef.CDI) == "v0.8.1"
    assert info.path == "github.com/containerd/containerd/v2/cmd/containerd"


def test_build_info_in_a_plain_file_and_the_replacement_of_a_dep(tmp_path: Path):
    plain = tmp_path / "k3s"
    plain.write_bytes(b"#!junk" + bytes(9) + ef.blob(["path\tx", "mod\tx\t(devel)\t", f"dep\t{ef.CDI}\tv0.8.0\t"]))
    assert read_build_info(str(plain)) is None  # the blob must sit at a 16-byte boundary
    plain.write_bytes(bytes(32) + ef.blob(["mod\tx\t(devel)\t", "dep\ta\tv1.0.0\t", "=>\tb\tv1.0.0-fork\t"]))
    info = read_build_info(str(plain))
    assert info is not None and info.deps == {"a": "v1.0.0-fork"}


def test_debian_builds_have_no_module_list(tmp_path: Path):
    binary = tmp_path / "dockerd"
    binary.write_bytes(ef.debian_binary("github.com/docker/docker/cmd/dockerd"))
    info = read_build_info(str(binary))
    assert info is not None and not info.module_mode and info.deps == {}


def test_an_elf_without_build_info_and_files_that_are_not_binaries(tmp_path: Path):
    other = tmp_path / "other"
    other.write_bytes(ef.elf_with_section(b"hello", name=b".rodata"))
    assert read_build_info(str(other)) is None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        read_build_info(str(fifo))  # refused, never waited on
    old = tmp_path / "go117"
    old.write_bytes(ef.elf_with_section(ef.blob(["mod\tx\tv1\t"], inline=False)))
    assert read_build_info(str(old)) is None  # Go 1.17's pointer format: no module list read


def test_a_cut_blob_is_a_clear_error():
    whole = ef.blob(["mod\tx\tv1\t", f"dep\t{ef.CDI}\tv0.8.1\t"])
    with pytest.raises(BuildInfoError, match="runs past"):
        parse_blob(whole[:60])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=200))
def test_any_bytes_after_the_magic_parse_or_fail_cleanly(tail: bytes, cut: int):
    data = buildinfo.MAGIC + tail
    try:
        info = parse_blob(data[: len(buildinfo.MAGIC) + cut])
    except BuildInfoError:
        return
    assert info is None or isinstance(info.deps, dict)


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(st.sampled_from(["dep", "mod", "=>", "build", "path", "junk"]), st.text(max_size=30)), max_size=12
    )
)
def test_any_module_list_is_read_without_error(lines: list[tuple[str, str]]):
    info = parse_blob(ef.blob([f"{kind}\t{rest}" for kind, rest in lines]))
    assert info is not None
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in info.deps.items())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=0, max_size=600), st.sampled_from([b"\x7fELF\x02\x01", b"\x7fELF\x01\x02", b""]))
def test_any_file_is_read_for_build_info_without_an_unexpected_error(tmp_path: Path, body: bytes, magic: bytes):
    path = tmp_path / "binary"
    path.write_bytes(magic + body)
    try:
        info = read_build_info(str(path))
    except BuildInfoError:
        return
    assert info is None or isinstance(info.deps, dict)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.integers(0, 400),
    st.integers(0, 200),
    st.integers(0, 8),
    st.integers(0, 8),
    st.binary(max_size=500),
)
def test_any_elf_section_table_is_read_bounded(tmp_path: Path, shoff: int, entsize: int, count: int, names: int, rest):
    import struct

    header = bytearray(ef.elf_with_section(ef.blob(["mod\tx\tv1\t"]))[:64])
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, entsize, count, names)
    path = tmp_path / "binary"
    path.write_bytes(bytes(header) + rest)
    try:
        info = read_build_info(str(path))
    except BuildInfoError:
        return
    assert info is None or isinstance(info.deps, dict)


# --- hostile engine files: linear, bounded, a problem naming the file (never an internal error) -----

# The regex `version_flag` replaced, kept as the oracle for short inputs (it is quadratic on long ones)
_OLD_VERSION_FLAG = re.compile(r"-X\s*\\?\"?[\w./-]*?version\.Version=([0-9A-Za-z.+~_-]+)")


@settings(max_examples=500)
@given(
    st.lists(
        st.sampled_from(["-X", "-", "X", " ", "\t", "\\", '"', "=", "version.Version=", "version", ".Version=", "v1.2"])
        | st.sampled_from(["a", "/", ".", "_", "é", "٣", "\u00a0", "+", "~", "github.com/c/v2/"]),
        max_size=24,
    )
)
def test_the_version_flag_reads_as_the_regex_did(parts: list[str]):
    ldflags = "".join(parts)
    expected = _OLD_VERSION_FLAG.search(ldflags)
    assert buildinfo.version_flag(ldflags) == (expected.group(1) if expected else None)


def _seconds(action: object) -> float:
    started = time.monotonic()
    action()  # type: ignore[operator]
    return time.monotonic() - started


@pytest.mark.parametrize(
    "hostile",
    [
        "-X" * 60_000,  # 120 KB: 59 s before
        "-X " * 40_000,
        "version.Version=" * 7_500,
        ("a" * 1000 + " -X version.Version= ") * 100,
        "-X" + "a/" * 60_000 + "version.Version",
    ],
    ids=["x-run", "x-spaced", "settings", "long-runs", "long-package"],
)
def test_the_version_flag_is_linear_in_the_ldflags(hostile: str):
    """Against a benign -ldflags of the same length on this host, now (the old regex: 59 s for the first)."""
    benign = ("-s -w -X main.commit=abc " * len(hostile))[: len(hostile)]
    took = _seconds(lambda: parse_blob(ef.blob([f"build\t-ldflags={hostile}"])))
    assert took <= 1 + 20 * _seconds(lambda: parse_blob(ef.blob([f"build\t-ldflags={benign}"]))), f"{took:.1f} s"


def _elf64(shoff: int = 64, entsize: int = 64, count: int = 3, names: int = 2) -> bytearray:
    header = bytearray(ef.elf_with_section(ef.blob(["mod\tx\tv1\t"]))[:64])
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, entsize, count, names)
    return header


def test_cut_and_lying_elf_headers_are_read_without_an_internal_error(tmp_path: Path):
    path = tmp_path / "binary"
    path.write_bytes(b"\x7fELF\x02\x01" + bytes(48))  # 54 bytes: an ELF64 header cut short
    assert read_build_info(str(path)) is None
    path.write_bytes(b"\x7fELF\x01\x01" + bytes(40))  # 46: an ELF32 header cut short
    assert read_build_info(str(path)) is None
    path.write_bytes(bytes(_elf64(shoff=1 << 63)) + ef.blob(["mod\tx\tv1\t"]))  # a table past any file
    assert read_build_info(str(path)).main == ("x", "v1")  # type: ignore[union-attr]  # found by the scan
    good = ef.elf_with_section(ef.blob(["mod\tx\tv1\t"]))
    table = struct.unpack_from("<Q", good, 0x28)[0]
    lying = bytearray(good)
    struct.pack_into("<Q", lying, table + 64 + 24, (1 << 63) + 5)  # .go.buildinfo's offset
    path.write_bytes(bytes(lying))
    with pytest.raises(BuildInfoError, match="past the file"):
        read_build_info(str(path))
    struct.pack_into("<Q", lying, table + 128 + 24, 1 << 63)  # the section names' offset
    path.write_bytes(bytes(lying))
    assert read_build_info(str(path)).main == ("x", "v1")  # type: ignore[union-attr]


def test_a_sparse_section_table_is_not_read(tmp_path: Path):
    """65,535-byte entries x 4,096 at the end of a sparse file: 268 MB read before, now none of it."""
    path = tmp_path / "binary"
    with path.open("wb") as file:
        file.write(bytes(_elf64(shoff=4096, entsize=0xFFFF, count=4096, names=1)))
        file.truncate(4096 + 0xFFFF * 4096)
    tracemalloc.start()
    try:
        assert read_build_info(str(path)) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak >> 20} MiB held at once"


def test_a_version_of_5000_digits_is_a_problem_naming_the_binary(tmp_path: Path):
    """Python converts at most 4,300 digits to an int: before, an internal error."""
    huge = "v" + "9" * 5000
    for binary in (ef.upstream_containerd(huge, "v0.8.1"), ef.upstream_containerd("v2.0.4", huge)):
        root = nvidia_node(tmp_path, {"/usr/local/bin/containerd": binary})
        report = judge(root)
        [warning] = [p for p in report["problems"] if "Go build info" in p["message"]]
        assert warning["source"] == str(root / "usr/local/bin/containerd")
        assert "characters long" in warning["message"]
        shutil.rmtree(root)


ELF_FIELDS = [0x4, 0x5, 0x20, 0x28, 0x2E, 0x30, 0x3A, 0x3C, 0x3E]  # class, order, e_shoff (32/64), sizes


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.integers(0, 400), st.binary(min_size=1, max_size=8))
        | st.tuples(st.sampled_from(ELF_FIELDS), st.sampled_from([b"\xff" * 8, b"\x00" * 8, b"\x80" * 8, b"\x02"])),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 500),
)
def test_any_mutant_of_a_go_binary_is_read_or_refused_cleanly(
    tmp_path: Path, changes: list[tuple[int, bytes]], cut: int
):
    """A real-shaped ELF with a few fields overwritten anywhere (header, table, names, blob) and cut
    anywhere: a BuildInfo, None or BuildInfoError (82 of 3,000 such mutants were internal errors)."""
    data = bytearray(ef.upstream_containerd("v2.0.4", "v0.8.1"))
    for at, value in changes:
        data[at : at + len(value)] = value
    path = tmp_path / "binary"
    path.write_bytes(bytes(data[: len(data) - cut]))
    try:
        info = read_build_info(str(path))
    except BuildInfoError:
        return
    if info is not None:
        info.version_flag()


# --- learned as installed ---------------------------------------------------------------------------


def test_debian_13_containerd_reads_0_8_0_but_has_cdi_off_by_default(tmp_path: Path):
    root = nvidia_node(
        tmp_path,
        {
            "/usr/bin/containerd": ef.debian_binary("github.com/containerd/containerd/cmd/containerd"),
            "/var/lib/dpkg/status": ef.DEBIAN_13_CONTAINERD,
        },
    )
    report = judge(root)
    entry = judged(report)
    assert entry["name"] == "containerd" and entry["version"] == "1.7.24"
    assert entry["cdi_library"] == "v0.8.0" and entry["max_cdi_version"] == "0.8.0"
    assert entry["learned_from"] == "package" and entry["sources"] == [str(root / "var/lib/dpkg/status")]
    assert entry["cdi_enabled"] is False and entry["containers"] == []
    assert report["containers"] == []
    error = next(p for p in report["problems"] if p["severity"] == "error")
    assert error["source"] == str(root / "etc/containerd/config.toml")
    assert "CDI switched off" in error["message"] and "enable_cdi = true" in error["message"]
    assert str(root / "etc/containerd/config.toml") in error["message"]
    assert "enable_cdi" in report["evidence"]["cuda"]
    # Switched on: the 0.7.0 spec is read (upstream 1.7.24 would not: v0.7.2 reads up to 0.7.0 too, but
    # the library is Debian's)
    ef.node(
        root, {"/etc/containerd/config.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n'}
    )
    report = judge(root)
    assert report["containers"] == ALL and judged(report)["cdi_enabled"] is True
    assert judged(report)["containers"] == ALL


def test_upstream_containerd_1_7_15_refuses_the_current_nvidia_spec(tmp_path: Path):
    config = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n'
    root = nvidia_node(
        tmp_path,
        {
            "/usr/local/bin/containerd": ef.upstream_containerd("v1.7.15", "v0.6.2"),
            "/etc/containerd/config.toml": config,
        },
    )
    report = judge(root)
    entry = judged(report)
    assert (entry["version"], entry["cdi_library"], entry["learned_from"]) == ("1.7.15", "v0.6.2", "build-info")
    assert entry["sources"] == [str(root / "usr/local/bin/containerd")]
    assert report["containers"] == [] and all(d["status"] == "blocked" for d in report["devices"])
    assert "containerd 1.7.15 ignores its spec" in report["devices"][0]["reason"]


def test_containerd_2_config_version_3_imports_and_spec_dirs(tmp_path: Path):
    root = nvidia_node(
        tmp_path,
        {
            "/usr/bin/containerd": ef.upstream_containerd("v2.1.4", "v1.0.1"),
            "/etc/containerd/config.toml": 'version = 3\nimports = ["conf.d/*.toml"]\n',
            "/etc/containerd/conf.d/10-cdi.toml": (
                "version = 3\n[plugins.'io.containerd.cri.v1.runtime']\ncdi_spec_dirs = ['/opt/cdi']\n"
            ),
        },
        spec_dir="/opt/cdi",
    )
    report = judge(root)
    entry = judged(report)
    assert entry["cdi_enabled"] is True and entry["spec_dirs"] == ["/opt/cdi"]
    assert report["containers"] == ALL
    assert report["devices"][0]["spec"] == str(root / "opt/cdi/nvidia.yaml")  # read inside the root
    ef.node(
        root, {"/etc/containerd/conf.d/20-off.toml": "[plugins.'io.containerd.cri.v1.runtime']\nenable_cdi = false\n"}
    )
    assert judge(root)["containers"] == []


def test_containerd_without_a_cdi_library_reads_no_cdi(tmp_path: Path):
    root = nvidia_node(tmp_path, {"/usr/bin/containerd": ef.upstream_containerd("v1.6.33", None)})
    report = judge(root)
    entry = judged(report)
    assert entry["cdi_library"] is None and entry["max_cdi_version"] is None and entry["learned_from"] == "build-info"
    assert report["containers"] == []
    assert any("reads no CDI specs at all" in p["message"] for p in report["problems"])


def test_k3s_is_judged_by_its_embedded_containerd(tmp_path: Path):
    k3s_config = "var/lib/rancher/k3s/agent/etc/containerd/config.toml"
    root = nvidia_node(
        tmp_path,
        {
            "/usr/local/bin/k3s": ef.k3s_binary("v2.0.5-k3s1", "v1.0.1"),
            k3s_config: "version = 3\n[plugins.'io.containerd.cri.v1.runtime']\nenable_cdi = true\n",
        },
    )
    entry = judged(judge(root))
    assert (entry["name"], entry["version"], entry["cdi_library"]) == ("containerd", "2.0.5-k3s1", "v1.0.1")
    assert entry["cdi_enabled"] is True


K3S_DATA = "/var/lib/rancher/k3s/data/" + "3f" * 32  # data/<sha256 of the payload>


def _k3s_node(tmp_path: Path, *, unpacked: bool) -> Path:
    """A k3s node as installed: the launcher, and (once k3s ran) its payload unpacked, data/current an
    absolute link to it and bin/containerd a link to the multicall k3s (k3s-io/k3s cmd/k3s, scripts/build)."""
    files: dict[str, bytes | str] = {"/usr/local/bin/k3s": ef.k3s_launcher("v1.33.4+k3s1")}
    if unpacked:
        files[f"{K3S_DATA}/bin/k3s"] = ef.k3s_binary("v2.1.5-k3s1", "v1.0.1")
    root = nvidia_node(tmp_path, files)
    if unpacked:
        (root / K3S_DATA.lstrip("/") / "bin" / "containerd").symlink_to("k3s")
        (root / "var/lib/rancher/k3s/data/current").symlink_to(K3S_DATA)  # absolute: resolved inside the root
    return root


def test_k3s_is_judged_by_the_containerd_it_unpacked_not_its_launchers_version(tmp_path: Path):
    entry = judged(judge(_k3s_node(tmp_path, unpacked=True)))
    assert (entry["name"], entry["version"], entry["cdi_library"]) == ("containerd", "2.1.5-k3s1", "v1.0.1")
    assert entry["cdi_enabled"] is True  # containerd 2.x: CDI on, and k3s's config never sets it


def test_a_k3s_launcher_alone_is_not_read_as_containerd_of_kubernetes_version(tmp_path: Path):
    report = judge(_k3s_node(tmp_path, unpacked=False))
    [entry] = [e for e in report["engines"] if e["name"] == "containerd"]
    assert entry["version"] is None  # before: "1.33.4+k3s1", k3s's own version, and CDI off
    assert report["apis"]["cuda"]["state"] == "unknown"  # a layout cgpu does not recognise: never a yes
    assert any("data/current/bin/containerd" in p["message"] for p in report["problems"])


@pytest.mark.parametrize(
    ("binary", "config_path"),
    [
        ("/snap/microk8s/current/bin/containerd", "/var/snap/microk8s/current/args/containerd.toml"),
        ("/var/lib/k0s/bin/containerd", "/etc/k0s/containerd.toml"),
    ],
)
def test_microk8s_and_k0s_containerd_are_found_with_their_own_config(tmp_path: Path, binary, config_path):
    cdi_on = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n'
    root = nvidia_node(tmp_path, {binary: ef.upstream_containerd("v1.7.29", "v0.8.1"), config_path: cdi_on})
    report = judge(root)
    entry = judged(report)
    assert (entry["version"], entry["cdi_enabled"]) == ("1.7.29", True)
    assert report["containers"] == ALL
    (root / config_path.lstrip("/")).unlink()  # 1.7 without the setting: CDI off
    assert judged(judge(root))["cdi_enabled"] is False


@pytest.mark.parametrize(
    ("stanza", "daemon_json", "enabled", "containers"),
    [
        (ef.DEBIAN_13_DOCKER, None, False, []),  # 26.1: CDI only with features.cdi
        (ef.DEBIAN_13_DOCKER, '{"features": {"cdi": true}}', True, ALL),  # reads 0.7.0
        (ef.DEBIAN_SID_DOCKER, None, True, ALL),  # 28.5: on by default
        (ef.DEBIAN_SID_DOCKER, '{"features": {"cdi": false}}', False, []),
    ],
)
def test_docker_engine_cdi_on_or_off_by_version_and_daemon_json(tmp_path, stanza, daemon_json, enabled, containers):
    files: dict[str, bytes | str] = {
        "/usr/sbin/dockerd": ef.debian_binary("github.com/docker/docker/cmd/dockerd"),
        "/var/lib/dpkg/status": stanza,
    }
    if daemon_json:
        files["/etc/docker/daemon.json"] = daemon_json
    report = judge(nvidia_node(tmp_path, files))
    entry = judged(report)
    assert entry["name"] == "docker" and entry["cdi_enabled"] is enabled
    assert report["containers"] == containers
    if stanza is ef.DEBIAN_13_DOCKER:
        assert (entry["version"], entry["max_cdi_version"], entry["learned_from"]) == ("26.1.5", "0.7.0", "version")
    else:
        assert (entry["cdi_library"], entry["learned_from"]) == ("v1.0.1", "package")
    if not enabled:
        assert "is refused" in report["evidence"]["cuda"] and '"features": {"cdi": true}' in report["evidence"]["cuda"]
        error = next(p for p in report["problems"] if p["severity"] == "error")
        assert error["source"] == str(tmp_path / "node/etc/docker/daemon.json")


def test_rpm_bundled_provides_name_the_library(tmp_path: Path):
    from tests.image.trees import rpm_header, write_rpmdb

    root = nvidia_node(tmp_path, {"/usr/bin/crio": b"not a go binary"})
    header = rpm_header(
        NAME="cri-o",
        VERSION="1.30.4",
        RELEASE="1.fc41",
        PROVIDENAME=["cri-o", f"bundled(golang({ef.CDI}))"],
        PROVIDEVERSION=["1.30.4-1.fc41", "0.7.2"],
    )
    write_rpmdb(root / "var/lib/rpm/rpmdb.sqlite", [header])
    entry = judged(judge(root))
    assert (entry["name"], entry["version"], entry["cdi_library"], entry["learned_from"]) == (
        "crio",
        "1.30.4",
        "v0.7.2",
        "package",
    )
    assert entry["cdi_enabled"] is True


def test_crio_spec_dirs_from_its_drop_ins(tmp_path: Path):
    root = nvidia_node(
        tmp_path,
        {
            "/usr/bin/crio": ef.elf_with_section(
                ef.blob(["path\tgithub.com/cri-o/cri-o/cmd/crio", "mod\tgithub.com/cri-o/cri-o\tv1.33.2\t"])
            ),
            "/etc/crio/crio.conf": "[crio.runtime]\ncdi_spec_dirs = ['/etc/cdi']\n",
            "/etc/crio/crio.conf.d/10-gpu.conf": "[crio.runtime]\ncdi_spec_dirs = ['/srv/cdi']\n",
        },
        spec_dir="/srv/cdi",
    )
    report = judge(root)
    entry = judged(report)
    assert entry["version"] == "1.33.2" and entry["cdi_library"] is None and entry["max_cdi_version"] is None
    assert entry["spec_dirs"] == ["/srv/cdi"]


# --- which one judges ---------------------------------------------------------------------------------


def two_runtimes(tmp_path: Path, kubelet: dict[str, str]) -> Path:
    return nvidia_node(
        tmp_path,
        {
            "/usr/bin/containerd": ef.upstream_containerd("v2.1.4", "v1.0.1"),
            "/usr/bin/crio": ef.elf_with_section(
                ef.blob(["mod\tgithub.com/cri-o/cri-o\t(devel)\t", f"dep\t{ef.CDI}\tv0.6.2\t"])
            ),
            "/var/lib/dpkg/status": ef.dpkg_stanza("cri-o", "1.28.2-1"),
            **kubelet,
        },
    )


def test_the_kubelets_runtime_judges_and_every_engine_answers(tmp_path: Path):
    config = "kind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n"
    root = two_runtimes(tmp_path, {"/var/lib/kubelet/config.yaml": config})
    report = judge(root)
    names = {e["name"]: e for e in report["engines"]}
    assert names["containerd"]["judged"] and not names["crio"]["judged"]
    assert names["containerd"]["containers"] == ALL == report["containers"]
    assert names["crio"]["containers"] == [] and names["crio"]["max_cdi_version"] == "0.6.0"
    assert any(
        "the kubelet's runtime unix:///run/containerd/containerd.sock" in p["message"] for p in report["problems"]
    )
    chosen = judge(root, engine="crio")  # --engine NAME chooses
    assert judged(chosen)["name"] == "crio" and chosen["containers"] == []


def test_an_older_kubelet_flag_names_the_runtime_and_without_one_the_order_decides(tmp_path: Path):
    flags = 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/crio/crio.sock --pod-infra=x"\n'
    root = two_runtimes(tmp_path, {"/var/lib/kubelet/kubeadm-flags.env": flags})
    assert judged(judge(root))["name"] == "crio"
    (root / "var/lib/kubelet/kubeadm-flags.env").unlink()
    assert judged(judge(root))["name"] == "crio"  # the documented order: crio before containerd
    assert [e["name"] for e in judge(root)["engines"]] == ["crio", "containerd"]


def test_engine_name_at_version_under_root_keeps_the_roots_configuration(tmp_path: Path):
    root = nvidia_node(
        tmp_path,
        {
            "/usr/bin/containerd": ef.debian_binary("github.com/containerd/containerd/cmd/containerd"),
            "/var/lib/dpkg/status": ef.DEBIAN_13_CONTAINERD,
        },
    )
    report = judge(root, engine="containerd@2.1.4")
    entry = judged(report)
    assert (entry["learned_from"], entry["max_cdi_version"], entry["cdi_enabled"]) == ("option", "1.0.0", True)
    assert judge(root, engine="containerd@1.7.27")["containers"] == []  # CDI off in 1.7 by default
    assert judge(root, engine="none")["engines"] == []


# --- bad and hostile files ----------------------------------------------------------------------------


def containerd_node(tmp_path: Path) -> Path:
    return nvidia_node(
        tmp_path,
        {
            "/usr/bin/containerd": ef.upstream_containerd("v1.7.27", "v0.8.1"),
            "/etc/containerd/config.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n',
        },
    )


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("bad-toml", "is not valid TOML"),
        ("wrong-type", "enable_cdi is 'yes'"),
        ("fifo", "not a regular file"),
        ("huge", "above the"),
    ],
)
def test_a_bad_config_is_a_problem_naming_the_file_and_the_answer_unknown(tmp_path: Path, damage: str, said: str):
    root = containerd_node(tmp_path)
    config = root / "etc/containerd/config.toml"
    config.unlink()
    if damage == "bad-toml":
        config.write_text('[plugins."io.containerd.grpc.v1.cri"\nenable_cdi = true\n')
    elif damage == "wrong-type":
        config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = "yes"\n')
    elif damage == "fifo":
        os.mkfifo(config)
    else:
        with open(config, "wb") as handle:
            handle.truncate(engine_config.MAX_CONFIG_BYTES + 1)
    report = judge(root)
    problem = next(p for p in report["problems"] if p["source"] == str(config))
    assert problem["severity"] == "error" and said in problem["message"]
    assert all(report["apis"][api]["state"] == "unknown" for api in ALL)
    assert judged(report)["cdi_enabled"] is None


def test_a_config_linked_out_of_the_root_is_read_inside_it(tmp_path: Path):
    root = containerd_node(tmp_path)
    outside = tmp_path / "outside.toml"
    outside.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n')
    config = root / "etc/containerd/config.toml"
    config.unlink()
    config.symlink_to(outside)  # an absolute link: resolved inside the root, where it names nothing
    report = judge(root)
    assert judged(report)["cdi_enabled"] is False  # no config file there: containerd 1.7's default, off
    assert report["containers"] == []


def test_a_binary_linked_out_of_the_root_is_not_read(tmp_path: Path):
    root = nvidia_node(tmp_path, {})
    outside = tmp_path / "containerd"
    outside.write_bytes(ef.upstream_containerd("v2.1.4", "v1.0.1"))
    (root / "usr/bin").mkdir(parents=True, exist_ok=True)
    (root / "usr/bin/containerd").symlink_to(outside)
    report = judge(root)
    assert report["engines"] == []  # the link names /…/containerd inside the root: nothing there


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_config_text_gives_problems_never_an_exception(text: str):
    def read(path: str) -> tuple[str | None, str | None, str]:
        return text, None, path

    for config in (
        *(  # each release line's loading: 1.7 (replace), 2.0-2.2 (merge), 2.3 and an unknown one (step by step)
            containerd.read_config(read, lambda _: ["a.toml"], "/etc/containerd/config.toml", release)
            for release in ((1, 7, 27), (2, 1, 4), (2, 3, 0), None)
        ),
        crio.read_config(read, lambda _: ["a.conf"], "/etc/crio/crio.conf", "/etc/crio/crio.conf.d"),
        podman_files.read_config(read, lambda _: ["a.conf"]),
        docker.read_config(read, "/etc/docker/daemon.json"),
    ):
        assert config.enabled in (True, False, None)
        assert config.spec_dirs is None or all(isinstance(d, str) for d in config.spec_dirs)
        assert all(severity in ("error", "warning", "info") for severity, _, _ in config.problems)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["enable_cdi", "cdi_spec_dirs", "other"]),
        st.one_of(st.booleans(), st.text(max_size=5), st.lists(st.text(max_size=5), max_size=3), st.integers()),
    )
)
def test_any_cri_table_is_judged_by_its_types(table: dict):
    document = {"version": 2, "plugins": {"io.containerd.grpc.v1.cri": table}}
    text = _toml(document)

    def read(path: str) -> tuple[str | None, str | None, str]:
        return text, None, path

    config = containerd.read_config(read, lambda _: [], "/etc/containerd/config.toml", (1, 7, 27))
    value = table.get("enable_cdi")
    if isinstance(value, bool):
        assert config.enabled is value
    elif "enable_cdi" in table:
        assert config.enabled is None and config.problems


def _toml(document: dict) -> str:
    """A small TOML writer for the property test's documents (json's strings are TOML basic strings)."""

    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")  # TOML refuses a raw DEL

    table = document["plugins"]["io.containerd.grpc.v1.cri"]
    lines = [f"version = {document['version']}", '[plugins."io.containerd.grpc.v1.cri"]']
    lines += [f"{key} = {value(v)}" for key, v in table.items()]
    return "\n".join(lines) + "\n"


# --- remembered by file identity --------------------------------------------------------------------


def test_what_was_learned_is_remembered_until_a_file_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from cgpu.engines import installed

    root = containerd_node(tmp_path)
    calls = []
    real_learn = installed.learn

    def counting(*args: object, **kwargs: object):
        calls.append(1)
        return real_learn(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(installed, "learn", counting)
    first = judge(root)
    assert judge(root)["engines"] == first["engines"] and len(calls) == 1
    config = root / "etc/containerd/config.toml"
    config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = false\n')
    assert judge(root)["containers"] == [] and len(calls) == 2
    (root / "var/lib/kubelet").mkdir(parents=True)
    (root / "var/lib/kubelet/config.yaml").write_text("kind: KubeletConfiguration\n")  # consulted before, absent
    judge(root)
    assert len(calls) == 3
    monkeypatch.setenv("DOCKER_HOST", "unix:///elsewhere.sock")
    judge(root)
    assert len(calls) == 4


def test_a_kubelet_runtime_that_is_not_installed_makes_every_api_unknown(tmp_path: Path):
    """The kubelet runs pods through CRI-O, which is not under the root: containerd's yes would be for
    containers the kubelet never starts, so every API is unknown, with the reason (not another engine's yes)."""
    config = "containerRuntimeEndpoint: unix:///var/run/crio/crio.sock\n"
    root = nvidia_node(
        tmp_path,
        {"/usr/bin/containerd": ef.upstream_containerd("v2.1.4", "v1.0.1"), "/var/lib/kubelet/config.yaml": config},
    )
    report = judge(root)
    assert not [e for e in report["engines"] if e["judged"]] and report["containers"] == []
    assert {report["apis"][api]["state"] for api in ("cuda", "vulkan", "opencl")} == {"unknown"}
    error = next(p for p in report["problems"] if p["source"] == str(root / "var/lib/kubelet/config.yaml"))
    assert error["severity"] == "error" and "found no crio installed" in error["message"]


def test_a_kubelet_on_cri_dockerd_gets_no_cdi_device_whatever_docker_says(tmp_path: Path):
    """cri-dockerd up to v0.4.3 passes no CDI device on to Docker (Mirantis/cri-dockerd#558): the pods get
    none, even with Docker's CDI on and the spec read by Docker."""
    flags = 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/cri-dockerd.sock"\n'
    root = nvidia_node(
        tmp_path,
        {
            "/usr/bin/cri-dockerd": ef.cri_dockerd("0.4.3"),
            "/var/lib/kubelet/kubeadm-flags.env": flags,
        },
    )
    report = judge(root)
    entry = judged(report)
    assert (entry["name"], entry["version"], entry["max_cdi_version"]) == ("cri-dockerd", "0.4.3", None)
    assert report["containers"] == [] and entry["cdi_enabled"] is False
    assert any("passes no CDI device on to Docker" in p["message"] for p in report["problems"])
    assert judge(root, engine="cri-dockerd@0.4.3")["containers"] == []
    newer = judge(root, engine="cri-dockerd@0.5.0")  # a release cgpu has not read: said, never silent
    assert any("newer than v0.4.3" in p["message"] for p in newer["problems"])


# --- NVIDIA's runtime in front of the engine -------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime_config", "mode", "mode_from"),
    [
        (None, "auto", None),  # no config.toml: the runtime's default
        ('[nvidia-container-runtime]\nmode = "legacy"\n', "legacy", "etc/nvidia-container-runtime/config.toml"),
        ('[nvidia-container-runtime]\nmode = "bogus"\n', None, "etc/nvidia-container-runtime/config.toml"),
        ("[nvidia-container-runtime\n", None, "etc/nvidia-container-runtime/config.toml"),
    ],
)
def test_nvidias_runtime_as_the_default_is_data(tmp_path: Path, runtime_config, mode, mode_from):
    config = (
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "nvidia"\n'
    )
    files: dict[str, bytes | str] = {
        "/usr/bin/containerd": ef.upstream_containerd("v1.7.27", "v0.8.1"),
        "/etc/containerd/config.toml": config,
    }
    if runtime_config is not None:
        files["/etc/nvidia-container-runtime/config.toml"] = runtime_config
    root = nvidia_node(tmp_path, files)
    report = judge(root)
    facts = judged(report)["nvidia_runtime"]
    assert facts["runtime"] == "nvidia" and facts["configured_in"] == str(root / "etc/containerd/config.toml")
    assert facts["mode"] == mode
    assert facts["mode_from"] == (str(root / mode_from) if mode_from else None)
    assert facts["capabilities"]["vulkan"] == "graphics" and facts["default_capabilities"] == ["compute", "utility"]
    note = next(p for p in report["problems"] if "default runtime is NVIDIA's" in p["message"])
    assert "NVIDIA_VISIBLE_DEVICES" in note["message"] and "no vulkan" in note["message"]
    assert report["containers"] == ALL  # containers asking for CDI devices: judged by the specs as before


def test_docker_default_runtime_nvidia_cdi_fixes_the_mode(tmp_path: Path):
    root = nvidia_node(
        tmp_path,
        {
            "/usr/sbin/dockerd": ef.debian_binary("github.com/docker/docker/cmd/dockerd"),
            "/var/lib/dpkg/status": ef.DEBIAN_SID_DOCKER,
            "/etc/docker/daemon.json": '{"default-runtime": "nvidia-cdi", "runtimes": {"nvidia-cdi": {}}}',
        },
    )
    facts = judged(judge(root))["nvidia_runtime"]
    assert (facts["mode"], facts["mode_from"]) == ("cdi", "the runtime's name nvidia-cdi")


def test_no_nvidia_runtime_no_entry(tmp_path: Path):
    assert judged(judge(containerd_node(tmp_path)))["nvidia_runtime"] is None


# --- the CLI on node roots laid out as the real-engine suite lays them out ------------------------


def _hard_linked(root: Path, path: str, content: bytes, store: Path) -> None:
    """The engine binary hard-linked into the root, as the suite links an unpacked package's file."""
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_bytes(content)
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    os.link(store, target)


@pytest.mark.parametrize(
    ("engine", "stanza", "config", "containers", "reads"),
    [
        ("containerd", ef.DEBIAN_13_CONTAINERD, ("etc/containerd/config.toml", ""), [], "0.8.0"),
        (
            "containerd",
            ef.DEBIAN_13_CONTAINERD,
            ("etc/containerd/config.toml", 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n'),
            ALL,
            "0.8.0",
        ),
        ("docker", ef.DEBIAN_13_DOCKER, ("etc/docker/daemon.json", "{}"), [], "0.7.0"),
        ("docker", ef.DEBIAN_13_DOCKER, ("etc/docker/daemon.json", '{"features": {"cdi": true}}'), ALL, "0.7.0"),
        ("docker", ef.DEBIAN_SID_DOCKER, ("etc/docker/daemon.json", "{}"), ALL, "1.0.0"),
    ],
)
def test_cli_judges_by_the_roots_engine(run_cli, tmp_path: Path, engine, stanza, config, containers, reads):
    root = nvidia_node(tmp_path, {"/var/lib/dpkg/status": stanza, config[0]: config[1]})
    binary = "/usr/bin/containerd" if engine == "containerd" else "/usr/bin/dockerd"
    go_path = "github.com/containerd/containerd/cmd/containerd" if engine == "containerd" else "cmd/dockerd"
    _hard_linked(root, binary, ef.debian_binary(go_path), tmp_path / "unpacked" / engine)
    code, out, err = run_cli(
        "probe", "--backend", "cdi", "--root", str(root), "--json", env={"CGPU_CACHE_DIR": str(tmp_path / "c")}
    )
    assert code == 0, err
    report = json.loads(out)
    [entry] = report["engines"]
    assert entry["name"] == engine and entry["judged"] and entry["max_cdi_version"] == reads
    assert report["containers"] == containers == entry["containers"]


def test_a_named_release_without_its_configuration_is_judged_as_cdi_on_and_said(tmp_path: Path):
    report = probe([SAMPLES / "nvidia-current/spec"], HOSTS / "nvidia-580", engine="containerd@1.7.27")
    entry = judged(report)
    assert entry["cdi_enabled"] is None and report["containers"] == ALL
    assert any(
        "has CDI off unless its configuration sets enable_cdi = true" in p["message"] for p in report["problems"]
    )
    assert (
        probe([SAMPLES / "nvidia-current/spec"], HOSTS / "nvidia-580", engine="containerd@1.7.15")["containers"] == []
    )


def test_podman_spec_dirs_from_containers_conf_and_its_drop_ins(tmp_path: Path):
    root = nvidia_node(
        tmp_path,
        {
            "/usr/bin/podman": ef.debian_binary("github.com/containers/podman/v5/cmd/podman"),
            "/var/lib/dpkg/status": ef.dpkg_stanza("podman", "5.6.1+ds1-1"),
            "/usr/share/containers/containers.conf": "[engine]\ncdi_spec_dirs = ['/usr/share/cdi']\n",
            "/etc/containers/containers.conf.d/50-gpu.conf": "[engine]\ncdi_spec_dirs = ['/etc/gpu-cdi']\n",
        },
        spec_dir="/etc/gpu-cdi",
    )
    report = judge(root)
    entry = judged(report)
    assert (entry["name"], entry["version"], entry["max_cdi_version"]) == ("podman", "5.6.1", "1.0.0")
    assert entry["spec_dirs"] == ["/etc/gpu-cdi"] and entry["cdi_enabled"] is True
    assert report["containers"] == ALL


def test_an_unreadable_package_database_is_a_problem_and_the_version_unknown(tmp_path: Path):
    root = nvidia_node(tmp_path, {"/usr/bin/containerd": ef.debian_binary("github.com/containerd/containerd")})
    status = root / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    with open(status, "wb") as handle:
        handle.truncate(200 << 20)  # sparse: refused by its size, never read
    report = judge(root)
    problem = next(p for p in report["problems"] if p["source"] == str(status))
    assert "could not read the package database" in problem["message"] and "above the" in problem["message"]
    assert any("could not learn its version or CDI library" in p["message"] for p in report["problems"])
    assert report["containers"] == ALL  # the newest rules, said so
    status.unlink()
    (root / "var/lib/rpm").mkdir(parents=True)
    (root / "var/lib/rpm/rpmdb.sqlite").write_bytes(b"SQLite format 3\0" + b"\xff" * 200)
    report = judge(root)
    assert any("could not read the rpm database" in p["message"] for p in report["problems"])


def test_containerd_imports_of_imports_once_each_and_a_missing_import(tmp_path: Path):
    cri = "[plugins.'io.containerd.cri.v1.runtime']"
    root = nvidia_node(
        tmp_path,
        {
            "/usr/bin/containerd": ef.upstream_containerd("v2.1.4", "v1.0.1"),
            "/etc/containerd/config.toml": 'version = 3\nimports = ["a.toml"]\n',
            "/etc/containerd/a.toml": f'imports = ["b.toml", "a.toml"]\n{cri}\nenable_cdi = true\n',
            "/etc/containerd/b.toml": f'imports = ["a.toml"]\n{cri}\nenable_cdi = false\n',  # a cycle: read once
        },
    )
    assert judged(judge(root))["cdi_enabled"] is False  # b.toml, merged last, wins
    ef.node(root, {"/etc/containerd/b.toml": 'imports = ["gone.toml"]\n'})
    report = judge(root)
    problem = next(p for p in report["problems"] if p["source"] == str(root / "etc/containerd/gone.toml"))
    assert "does not exist" in problem["message"]
    assert all(report["apis"][api]["state"] == "unknown" for api in ALL)


def test_verify_through_a_cri_runtime_says_it_cannot(tmp_path: Path):
    report = probe([SAMPLES / "nvidia-current/spec"], HOSTS / "nvidia-580", engine="containerd@2.1.4", verify=True)
    assert report["containers"] == ALL  # the static answer stands
    assert any("no client for containerd's CRI" in p["message"] for p in report["problems"])


# --- the engine as learned: typed, frozen, kept in the cache as JSON -------------------------------------


def test_an_installed_engine_is_frozen_and_changed_by_replace(tmp_path: Path):
    from cgpu.engines.installed import InstalledEngine, learn

    [engine], _ = learn(str(containerd_node(tmp_path)), run_allowed=False, timeout=5)
    with pytest.raises(AttributeError, match="frozen"):
        engine.version = "9.9"  # type: ignore[misc]
    changed = engine.replace(sources=[*engine.sources, "containerd version"])
    assert (
        engine.sources == (str(tmp_path / "node/usr/bin/containerd"),) and changed.sources[-1] == "containerd version"
    )
    assert changed.version == engine.version == "1.7.27" and changed != engine
    assert InstalledEngine.from_json(json.loads(json.dumps(engine.as_json()))) == engine
    entry = engine.report_entry(judged=True, containers=["cuda"])
    assert list(entry) == ["name", "version", "cdi_library", "max_cdi_version", "cdi_enabled", "spec_dirs"] + [
        "learned_from",
        "sources",
        "config_files",
        "defaulted",
        "judged",
        "containers",
        "nvidia_runtime",
    ]
    assert entry["spec_dirs"] == ["/etc/cdi", "/var/run/cdi"] and entry["containers"] == ["cuda"]
    # its config.toml sets enable_cdi; the spec dirs are containerd's defaults
    assert entry["config_files"] == [str(tmp_path / "node/etc/containerd/config.toml")]
    assert entry["defaulted"] == ["cdi_spec_dirs"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["version", "spec_dirs", "problems", "cdi_enabled", "nvidia_runtime"]), JSON))
def test_a_cached_engine_of_any_content_is_read_back_or_refused_never_an_exception(changes: dict):
    from cgpu.engines.installed import InstalledEngine

    facts = {**InstalledEngine("containerd", version="2.0.5").as_json(), **changes}
    if not changes:
        assert InstalledEngine.from_json(facts).version == "2.0.5"
    try:
        engine = InstalledEngine.from_json(facts)
    except ValueError:
        return
    assert InstalledEngine.from_json(engine.as_json()) == engine
    assert all(isinstance(d, str) for d in engine.spec_dirs) and engine.version == facts["version"]


def test_containerd_imports_are_queued_once_each_and_bounded():
    """Every file's `imports` globbing the same folder of many files: each file is queued once (containerd's
    loop skips one loaded before, so the order is the same), no more than MAX_IMPORTS are read, and the
    folder is listed once, not once per pattern of every file read (was: 443 MB and 44 s for 1,000 files)."""
    folder = "/etc/containerd/conf.d"
    names = [f"{n:03}.toml" for n in range(100)]
    patterns = [f"{folder}/{prefix}*.toml" for prefix in ("", "0", "00", "0?", "[0-9]", "*", "?", "[!x]")]
    imports = "imports = [" + ", ".join(json.dumps(p) for p in patterns) + "]\n"
    files = {"/etc/containerd/config.toml": imports, **{f"{folder}/{n}": imports for n in names}}
    reads: list[str] = []
    listings: list[str] = []

    def read(path: str) -> tuple[str | None, str | None, str]:
        reads.append(path)
        return files.get(path), None, path

    def listdir(path: str) -> list[str]:
        listings.append(path)
        return list(names) if path == folder else []

    config = containerd.read_config(read, listdir, "/etc/containerd/config.toml", (2, 1, 4))
    assert config.problems == []
    read_once = list(dict.fromkeys(reads))
    assert read_once == ["/etc/containerd/config.toml", *(f"{folder}/{n}" for n in names[: containerd.MAX_IMPORTS])]
    assert len(reads) <= 3 * len(read_once) and listings == [folder]


def crio_node_with_drop_ins(tmp_path: Path, count: int, size: int) -> Path:
    """A node with CRI-O and `count` drop-ins of valid TOML, about `size` bytes each (slow to parse)."""
    root = tmp_path / "node"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/crio").write_bytes(b"not a Go binary")
    (root / "etc/crio/crio.conf.d").mkdir(parents=True)
    body = "[crio.runtime]\n" + "".join(f'k{n} = [1, 2, "x"]\n' for n in range(size // 20))
    for n in range(count):
        (root / f"etc/crio/crio.conf.d/{n:02}.conf").write_text(body)
    return root


def test_engine_configuration_is_read_within_a_total_cap(tmp_path: Path):
    """Many large drop-ins (each under the 1 MiB cap of one file) stop at the cap on all of an engine's
    configuration, with the files past it named: 20 of 1 MiB took 120 s under --timeout 5."""
    from cgpu.engines import installed

    root = crio_node_with_drop_ins(tmp_path, 6, 600_000)
    [crio_entry], _ = installed.learn(str(root), run_allowed=False, timeout=60)
    refused = [p for p in crio_entry.problems if "of engine configuration in all" in p.message]
    read = 6 - len(refused)
    assert 0 < read * 600_000 <= installed.MAX_CONFIG_TOTAL < (read + 1) * 600_000
    assert refused[0].source == str(root / f"etc/crio/crio.conf.d/{read:02}.conf")
    assert crio_entry.config_broken is not None and crio_entry.cdi_enabled is None  # what it reads is not known


def test_engine_configuration_is_read_within_the_probes_time_limit(tmp_path: Path):
    from cgpu.engines import installed

    root = crio_node_with_drop_ins(tmp_path, 2, 1000)
    [crio_entry], node = installed.learn(str(root), run_allowed=False, timeout=0.0)
    assert any("time limit" in p.message for p in crio_entry.problems)
    assert node["cut_short"] is True  # not remembered: the next probe reads it again
    [crio_entry], node = installed.learn(str(root), run_allowed=False, timeout=60)
    assert crio_entry.problems == () and node["cut_short"] is False


def test_a_version_of_thousands_of_digits_is_no_release_and_no_internal_error(tmp_path):
    """A package database may say anything: a 5,001-digit Version is past int()'s limit (4,300 digits) and
    would be quadratic below it; it is read as no version cgpu knows, named briefly, never a traceback."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/containerd").write_bytes(b"\x7fELF")
    version = "1" + "9" * 5000
    status = f"Package: containerd\nStatus: install ok installed\nVersion: {version}\nArchitecture: amd64\n"
    (tmp_path / "var/lib/dpkg/status").write_text(status)
    done = subprocess.run(
        [sys.executable, "-m", "cgpu", "probe", "--root", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**__import__("os").environ, "CGPU_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    problems = json.loads(done.stdout)["problems"]
    warning = next(p for p in problems if p["source"].startswith("containerd 1999"))
    assert "is not a version number" in warning["message"] and len(warning["source"]) < 60
    assert all("internal error" not in p["message"] for p in problems)
