"""The image tree readers: layers with whiteouts, symlinks inside the root, hostile tars, limits."""

from __future__ import annotations

import io
import os
import tarfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgpu.image.fs import Deadline, DeadlineExceeded, DirTree, ImageReadError, LayerTree, Limits
from cgpu.image.tarstream import TarReader
from tests.image import hostile
from tests.image.trees import layer_tar, member
from tests.timing import assert_within, timed

DIR, SYM, LNK = tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE


def tree_of(*layers: list, limits: Limits | None = None) -> LayerTree:
    tree = LayerTree(limits)
    for number, members in enumerate(layers):
        tree.add_layer(io.BytesIO(layer_tar(extra=members)), f"{number + 1}")
    return tree


def test_whiteouts_and_opaque_dirs_hide_lower_layers_only():
    tree = tree_of(
        [member("a/b", b"1"), member("a/c", b"2"), member("d/e", b"3"), member("etc/os-release", b"ID=x\n")],
        [member("a/.wh.b"), member("d/.wh..wh..opq"), member("d/f", b"4"), member("etc/.wh.os-release")],
    )
    assert not tree.exists("a/b") and tree.exists("a/c")
    assert not tree.exists("d/e") and tree.exists("d/f")
    assert not tree.exists("etc/os-release")
    assert tree.listdir("d") == ["f"]


def test_a_file_or_symlink_over_a_directory_hides_what_was_below():
    tree = tree_of(
        [member("lib/libc.so.6", b"old")],
        [member("lib", kind=SYM, link="usr/lib"), member("usr/lib/libc.so.6", b"new")],
    )
    assert tree.read("lib/libc.so.6", 100) == b"new"


def test_symlinks_resolve_inside_the_root_never_on_the_host():
    assert os.path.exists("/etc/passwd")  # the host has one; the image does not
    tree = tree_of(
        [
            member("etc/vulkan/icd.d/virtio_icd.json", kind=SYM, link="/etc/passwd"),
            member("usr/share/vulkan/icd.d/up.json", kind=SYM, link="../../../../../../../../etc/hostname"),
            member("etc/hostname", b"image-host\n"),
            member("loop/a", kind=SYM, link="b"),
            member("loop/b", kind=SYM, link="a"),
        ]
    )
    assert tree.lookup("etc/vulkan/icd.d/virtio_icd.json") == ("etc/passwd", None)
    assert tree.read("usr/share/vulkan/icd.d/up.json") == b"image-host\n"  # `..` stops at the image root
    assert tree.lookup("loop/a")[1] is None
    with pytest.raises(ImageReadError, match="virtio_icd.json points to /etc/passwd, which does not exist"):
        tree.read("etc/vulkan/icd.d/virtio_icd.json")


def test_hostile_member_names_become_problems_not_paths():
    tree = tree_of(
        [
            member("../../escape.json", b"{}"),
            member("usr/../../escape2", b"x"),
            member("/etc/os-release", b"ID=fedora\n"),
            member("usr/lib64/libc.so.6", b"\x7fELF"),
            member("usr/lib64/hard-ok", kind=LNK, link="usr/lib64/libc.so.6"),
            member("usr/lib64/hard-out", kind=LNK, link="../../../etc/shadow"),
            member("usr/lib64/hard-none", kind=LNK, link="usr/lib64/not-there"),
        ]
    )
    assert set(tree.entries) == {"etc/os-release", "usr/lib64/libc.so.6", "usr/lib64/hard-ok"}
    assert tree.read("etc/os-release") == b"ID=fedora\n"
    assert tree.head("usr/lib64/hard-ok") == b"\x7fELF"
    messages = " | ".join(message for _, message in tree.notes)
    assert "'../../escape.json' is a name that climbs out of the root" in messages
    assert "'usr/../../escape2'" in messages
    assert "'/etc/os-release' has an absolute name" in messages
    assert "hardlink /usr/lib64/hard-out -> '../../../etc/shadow'" in messages
    assert "hardlink /usr/lib64/hard-none" in messages and "names no earlier file" in messages


def test_limits_stop_a_huge_or_crowded_layer():
    with pytest.raises(ImageReadError, match="more than 3 files"):
        tree_of([member(f"f{n}", b"x") for n in range(5)], limits=Limits(max_members=3))
    with pytest.raises(ImageReadError, match="more than 100 bytes"):
        tree_of([member("big", b"x" * 200)], limits=Limits(max_total_bytes=100))


def test_kept_content_is_capped():
    tree = tree_of(
        [member("etc/os-release", b"x" * 500), member("etc/ld.so.conf", b"y" * 500)], limits=Limits(max_kept_bytes=600)
    )
    assert tree.read("etc/os-release") == b"x" * 500
    with pytest.raises(ImageReadError, match="does not keep"):
        tree.read("etc/ld.so.conf")
    assert any("not read" in message for _, message in tree.notes)


def test_compressed_layers_are_read():
    import gzip

    tree = LayerTree()
    tree.add_layer(io.BytesIO(gzip.compress(layer_tar(extra=[member("etc/os-release", b"ID=fedora\n")]))), "1")
    assert tree.read("etc/os-release") == b"ID=fedora\n"


def test_dir_tree_never_follows_host_symlinks(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    os.symlink("/etc/passwd", root / "etc/vk.json")  # absolute: means the image's /etc/passwd
    os.symlink("/", root / "hostroot")
    os.symlink("../../../../..", root / "up")
    (root / "etc/hostname").write_text("image\n")
    tree = DirTree(str(root))
    assert tree.lookup("etc/vk.json")[1] is None
    assert tree.lookup("hostroot/etc/passwd")[1] is None
    assert tree.read("up/etc/hostname") == b"image\n"
    with pytest.raises(ImageReadError):
        tree.read("etc/vk.json")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4096))
def test_random_layer_bytes_give_only_image_read_errors(data):
    tree = LayerTree(Limits(max_total_bytes=1 << 20))
    try:
        tree.add_layer(io.BytesIO(data), "fuzz")
    except ImageReadError:
        return
    for path in list(tree.entries)[:20]:
        tree.lookup(path)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=40), st.sampled_from([tarfile.REGTYPE, DIR, SYM, LNK]), st.text(max_size=40)
        ),
        max_size=12,
    )
)
def test_random_member_names_and_links_never_escape(items):
    members = []
    for name, kind, link in items:
        if "\x00" in name or "\x00" in link:
            continue
        members.append(member(name, b"data" if kind == tarfile.REGTYPE else b"", kind=kind, link=link))
    try:
        tree = tree_of(members)
    except ImageReadError:
        return
    for path in tree.entries:
        assert not path.startswith(("/", "../")) and "/../" not in f"/{path}/"
        resolved, _ = tree.lookup(path)
        assert not resolved.startswith(("/", "../"))


def raw_tree(*layers: bytes, limits: Limits | None = None, deadline: Deadline | None = None) -> LayerTree:
    tree = LayerTree(limits, deadline)
    for number, layer in enumerate(layers):
        tree.add_layer(io.BytesIO(layer), f"{number + 1}")
    return tree


@pytest.mark.parametrize(
    "layer, words",
    [
        (hostile.header(b"f", size_field=hostile.NEGATIVE_512) + bytes(1024), "has a negative size"),
        (hostile.header(b"f", size_field=b"\x80" + b"\xff" * 11) + bytes(1024), "more than 1048576 bytes"),
        (hostile.header(b"f", size_field=b"12345678901x") + bytes(1024), "has a malformed size field"),
        (bytes(100) + b"x" + bytes(411) + bytes(1024), "bad checksum"),
        (hostile.pax_header(b"1" * 5000) + hostile.header(b"f") + bytes(1024), "malformed record"),
        (hostile.pax_header(b"99 path=x\n") + hostile.header(b"f") + bytes(1024), "record of the wrong length"),
        (hostile.pax_header(b"11 size=-5\n") + hostile.header(b"f") + bytes(1024), "malformed size '-5'"),
        (hostile.header(b"././@PaxHeader", size=2 * 1024**2, kind=b"x") + bytes(1024), "more than 1048576"),
        (hostile.pax_header(b"") * 9 + hostile.header(b"f") + bytes(1024), "more than 8 extended headers in a row"),
        (hostile.header(b"f", size=10_000) + bytes(512), "ends inside a member's data"),
    ],
)
def test_hostile_tar_headers_are_refused_before_they_are_acted_on(layer, words):
    with pytest.raises(ImageReadError, match=words):
        raw_tree(layer, limits=Limits(max_total_bytes=1024**2))


def test_a_deep_or_long_name_is_ignored_with_a_warning():
    deep = "/".join(["d"] * 300) + "/f"
    tree = raw_tree(hostile.member(deep, b"x") + hostile.member("ok", b"y") + hostile.end())
    assert tree.exists("ok") and not tree.entries.keys() - {"ok"}
    assert any("deeper than 256 folders; ignored" in message for _, message in tree.notes)


def test_symlink_resolution_is_linear_in_the_path_and_capped():
    import time

    chain = [member(f"l{n}", kind=SYM, link=f"l{n + 1}") for n in range(45)]
    tree = tree_of(
        [
            member("usr/lib/x", b"1"),
            member("up", kind=SYM, link="../" * 1000 + "usr"),
            member("far", kind=SYM, link="../" * 300_000 + "usr"),  # longer than PATH_MAX: broken
            *chain,
            member("l45", kind=SYM, link="usr"),
        ]
    )
    started = time.monotonic()
    assert tree.read("up/lib/x") == b"1"
    assert tree.lookup("far/lib/x")[1] is None
    assert tree.lookup("/".join([".."] * 200_000) + "/usr/lib/x")[1] is None  # a 600 KB path
    assert tree.lookup("l6")[1] is not None and tree.lookup("l5")[1] is None  # 40 links, not 41
    seconds = time.monotonic() - started

    def linear() -> float:  # the 600 KB path's work, were it linear: 100 paths a hundredth as long
        short = "/".join([".."] * 2_000) + "/usr/lib/x"
        return timed(lambda: [tree.lookup(short) for _ in range(100)])[1]

    assert_within(seconds, 1, linear, "long paths and link chains")


def test_the_deadline_stops_a_layer_between_blocks():
    layer = b"".join(hostile.member(f"f{n}", b"x" * 600) for n in range(100)) + hostile.end()
    with pytest.raises(DeadlineExceeded, match="not done within --timeout 0 s"):
        raw_tree(layer, deadline=Deadline(0))


def test_too_many_per_member_warnings_are_counted_not_kept():
    layer = b"".join(hostile.member(f"../x{n}") for n in range(500)) + hostile.end()
    tree = raw_tree(layer)
    assert len(tree.notes) == 51
    assert tree.notes[-1] == ("warning", "layer 1: 450 more members like these; ignored")


_SAMPLE = layer_tar(
    extra=[
        member("etc/os-release", b"ID=fedora\n"),
        member("usr/lib64/libvulkan.so.1", kind=SYM, link="libvulkan.so.1.4"),
        member("d/" + "n" * 150, b"long name"),
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_SAMPLE) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_tar_headers_give_only_image_read_errors(edits):
    """Damage anywhere in a real PAX tar (sizes, checksums, PAX lengths): an answer or an ImageReadError."""
    data = bytearray(_SAMPLE)
    for at, value in edits:
        data[at] = value
    try:
        tree = raw_tree(bytes(data), limits=Limits(max_total_bytes=1 << 20))
    except ImageReadError:
        return
    for path in list(tree.entries)[:20]:
        tree.lookup(path)


def test_links_and_folders_carry_no_data_whatever_their_size_field_says():
    """As tarfile and GNU tar read them: the next header follows at once."""
    layer = (
        hostile.header(b"lib", size=4096, kind=b"2", link=b"usr/lib")
        + hostile.header(b"usr/", size=4096, kind=b"5")
        + hostile.member("usr/lib/x", b"1")
        + hostile.end()
    )
    tree = raw_tree(layer)
    assert tree.read("lib/x") == b"1"


_NAMES = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), min_size=1, max_size=300)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    st.lists(st.tuples(_NAMES, st.sampled_from([tarfile.REGTYPE, DIR, SYM, LNK]), _NAMES, st.binary(max_size=700))),
)
def test_the_reader_sees_what_tarfile_wrote(fmt, items):
    """Whatever tarfile writes in each of its formats, cgpu's reader reads back the same members."""
    out = io.BytesIO()
    written = []
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, kind, link, data in items:
            info, content = member(name, data if kind == tarfile.REGTYPE else b"", kind=kind, link=link)
            try:
                tar.addfile(info, io.BytesIO(content) if content else None)
            except ValueError:  # a name too long for ustar, or not encodable: tarfile refuses, nothing written
                continue
            written.append((info.name, info.type, info.size, info.linkname if kind in (SYM, LNK) else "", content))
    reader = TarReader(io.BytesIO(out.getvalue()), max_size=1 << 20, tick=lambda: None)
    kinds = {tarfile.REGTYPE: "file", DIR: "dir", SYM: "symlink", LNK: "hardlink"}
    read = [
        (
            m.name.rstrip("/") if m.kind == "dir" else m.name,  # tarfile writes a folder's name with a slash
            m.kind,
            m.size,
            m.linkname if m.kind in ("symlink", "hardlink") else "",
            reader.read(m.size),
        )
        for m in reader
    ]
    expected = [
        (name.rstrip("/") if kind == DIR else name, kinds[kind], size, link, data)
        for name, kind, size, link, data in written
    ]
    assert read == expected
