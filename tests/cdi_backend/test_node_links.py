"""The node's files under --root as the node's own kernel would find them: every link, absolute or
relative, at every component, resolved inside the root. The roots here copy Debian's and Ubuntu's
real layout (`var/run -> /run`, an absolute link; `lib -> usr/lib`, merged /usr's relative ones)
onto the nvidia-580 sample host; they are laid out by hand, not made by mmdebstrap."""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cgpu.node.host import MAX_SYMLINKS, PATH_MAX, HostFS, NodeFiles
from tests.cdi_backend import engine_files as ef
from tests.cdi_backend.helpers import HOSTS, SAMPLES, probe

CURRENT = SAMPLES / "nvidia-current" / "spec" / "nvidia.yaml"
ALL = ["cuda", "vulkan", "opencl"]


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))


def debian_node(tmp_path: Path, spec_at: str = "/run/cdi/nvidia.yaml") -> Path:
    """The nvidia-580 host as Debian 12/13 and Ubuntu lay a root out, the spec where
    nvidia-cdi-refresh writes it (`/var/run/cdi`, which is `/run/cdi`)."""
    root = tmp_path / "node"
    shutil.copytree(HOSTS / "nvidia-580", root, symlinks=True)
    for top in ("bin", "lib", "lib64", "sbin"):  # merged /usr: relative links, as usrmerge makes them
        if (root / top).is_dir() and not (root / top).is_symlink():
            shutil.copytree(root / top, root / "usr" / top, symlinks=True, dirs_exist_ok=True)
            shutil.rmtree(root / top)
        (root / "usr" / top).mkdir(parents=True, exist_ok=True)
        os.symlink(f"usr/{top}", root / top)
    (root / "var").mkdir(exist_ok=True)
    os.symlink("/run", root / "var" / "run")  # absolute, as base-files makes it
    os.symlink("/run/lock", root / "var" / "lock")
    spec = root / spec_at.lstrip("/")
    spec.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(CURRENT, spec)
    return root


def test_a_spec_under_debians_absolute_var_run_link_is_read_inside_the_root(tmp_path: Path):
    root = debian_node(tmp_path)
    report = probe([root / "var/run/cdi"], root)
    assert report["containers"] == ALL
    assert {d["spec"] for d in report["devices"]} == {str(root / "var/run/cdi/nvidia.yaml")}  # as the node names it


def test_an_engine_reading_var_run_cdi_under_the_root_reads_the_roots(tmp_path: Path):
    config = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n'
    root = debian_node(tmp_path)
    ef.node(
        root,
        {"/usr/bin/containerd": ef.upstream_containerd("v2.1.4", "v1.0.1"), "/etc/containerd/config.toml": config},
    )
    report = probe([], root, engine="auto")
    assert report["containers"] == ALL
    assert str(root / "var/run/cdi/nvidia.yaml") in {d["spec"] for d in report["devices"]}


def test_with_no_engine_judging_the_default_dirs_are_the_roots(tmp_path: Path):
    root = debian_node(tmp_path, spec_at="/etc/cdi/nvidia.yaml")
    report = probe([], root, engine="none")
    assert report["containers"] == ALL
    assert report["spec_dirs"] == [str(root / "etc/cdi"), str(root / "var/run/cdi")]


def test_a_spec_file_that_is_an_absolute_link_is_read_inside_the_root(tmp_path: Path):
    root = debian_node(tmp_path, spec_at="/opt/vendor/nvidia.yaml")
    (root / "etc/cdi").mkdir(parents=True)
    os.symlink("/opt/vendor/nvidia.yaml", root / "etc/cdi/nvidia.yaml")
    assert probe([root / "etc/cdi"], root)["containers"] == ALL


def test_a_spec_file_linked_to_a_file_of_this_machine_is_not_read(tmp_path: Path):
    root = debian_node(tmp_path, spec_at="/opt/unused.yaml")
    outside = tmp_path / "outside.yaml"
    shutil.copy(CURRENT, outside)  # a good spec, but on this machine, not on the node
    (root / "etc/cdi").mkdir(parents=True)
    os.symlink(str(outside), root / "etc/cdi/nvidia.yaml")
    report = probe([root / "etc/cdi"], root)
    assert report["containers"] == [] and report["devices"] == []
    assert any("symlink to a missing file" in p["message"] for p in report["problems"])


def test_a_symlinked_spec_dir_under_the_root_is_judged_by_its_own_link(tmp_path: Path):
    """The library does not enter a spec dir that is itself a link: so its last component is not
    followed, while the links above it (var/run) are."""
    root = debian_node(tmp_path, spec_at="/opt/cdi/nvidia.yaml")
    os.symlink("/opt/cdi", root / "run" / "cdi")
    report = probe([root / "var/run/cdi"], root)
    assert report["containers"] == []
    assert any(f"symlink (to {root / 'opt/cdi'})" in p["message"] for p in report["problems"])


def test_a_mount_path_of_1500_components_is_a_missing_file_not_an_internal_error(tmp_path: Path):
    root = debian_node(tmp_path)
    deep = "/x" * 1500
    (root / "run/cdi/deep.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: example.com/deep\ndevices:\n- name: d\n  containerEdits:\n"
        f"    mounts:\n    - hostPath: {deep}\n      containerPath: /deep\n"
    )
    report = probe([root / "run/cdi"], root)
    assert report["containers"] == ALL  # the good spec beside it still counts
    [deep_device] = [d for d in report["devices"] if d["name"] == "example.com/deep=d"]
    assert deep_device["status"] != "ok"


# --- the view itself ------------------------------------------------------------------------------


def test_every_component_is_resolved_inside_the_root(tmp_path: Path):
    root = debian_node(tmp_path)
    files = NodeFiles(str(root))
    assert files.real("/var/run/cdi/nvidia.yaml") == str(root / "run/cdi/nvidia.yaml")
    assert files.real("/lib/x86_64-linux-gnu/../../var/run/cdi") == str(root / "run/cdi")  # `..` after a link
    assert files.real("/var/run", follow_last=False) == str(root / "var/run")
    os.symlink("../../../../../../../../etc", root / "run/up")  # `..` stops at the root
    assert files.real("/run/up") == str(root / "etc")


def test_the_walk_is_bounded_as_the_kernels(tmp_path: Path):
    root = tmp_path / "node"
    (root / "file").parent.mkdir(parents=True)
    (root / "file").write_text("x")
    os.symlink("a", root / "b")
    os.symlink("b", root / "a")
    chain = root / "chain"
    chain.mkdir()
    for hop in range(MAX_SYMLINKS + 1):
        os.symlink(f"l{hop + 1}", chain / f"l{hop}")
    (chain / f"l{MAX_SYMLINKS + 1}").write_text("end")
    files = NodeFiles(str(root))
    cases = {
        "/a": errno.ELOOP,
        "/chain/l0": errno.ELOOP,  # 41 links: one over
        "/file/below": errno.ENOTDIR,
        "/missing/below": errno.ENOENT,
        "/x" * (PATH_MAX // 2): errno.ENAMETOOLONG,
    }
    for path, code in cases.items():
        with pytest.raises(OSError) as raised:
            files.real(path)
        assert raised.value.errno == code, path
    assert files.real("/chain/l1") == str(chain / f"l{MAX_SYMLINKS + 1}")  # 40 links: the bound itself
    # The bound is on the whole walk: a dir reached through 39 links, then a last component of 2
    for hop in range(MAX_SYMLINKS - 1):
        os.symlink(f"d{hop + 1}", root / f"d{hop}")
    (root / f"d{MAX_SYMLINKS - 1}").mkdir()
    os.symlink("y", root / f"d{MAX_SYMLINKS - 1}" / "x")
    os.symlink("z", root / f"d{MAX_SYMLINKS - 1}" / "y")
    (root / f"d{MAX_SYMLINKS - 1}" / "z").write_text("end")
    assert files.real("/d0/y") == str(root / f"d{MAX_SYMLINKS - 1}" / "z")  # 39 + 1
    with pytest.raises(OSError) as raised:
        files.real("/d0/x")  # 39 + 2
    assert raised.value.errno == errno.ELOOP
    assert HostFS(str(root)).resolve("/x" * 1500) is None  # iterative: no recursion to run out of


def test_machine_paths_outside_the_root_are_left_to_the_os(tmp_path: Path):
    root = debian_node(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(str(root / "run"), elsewhere / "run")
    files = NodeFiles(str(root))
    assert files.node_path(str(root / "var/run/cdi")) == "/var/run/cdi"
    assert files.node_path(str(elsewhere)) is None
    assert files.entries(str(elsewhere / "run/cdi")) == ["nvidia.yaml"]
    assert files.entries(str(root / "var/run/cdi")) == ["nvidia.yaml"]
    with files.open_regular(str(root / "var/run/cdi/nvidia.yaml")) as handle:
        assert handle.read() == CURRENT.read_bytes()


def test_every_reader_of_node_files_goes_through_the_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Spec dirs and spec files (the scan), host files (the answer) and engine files (learning the
    engine) are all looked up through NodeFiles._real (what `real` and HostFS.resolve share) under
    --root: none resolves a link on its own."""
    config = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n'
    root = debian_node(tmp_path)
    ef.node(
        root,
        {"/usr/bin/containerd": ef.upstream_containerd("v2.1.4", "v1.0.1"), "/etc/containerd/config.toml": config},
    )
    asked: list[str] = []
    real = NodeFiles._real

    def spy(self: NodeFiles, path: str, follow_last: bool) -> str | int:
        asked.append(path)
        return real(self, path, follow_last)

    monkeypatch.setattr(NodeFiles, "_real", spy)
    assert probe([], root, engine="auto")["containers"] == ALL
    assert "/var/run/cdi" in asked  # a spec dir
    assert "/var/run/cdi/nvidia.yaml" in asked  # a spec file
    assert "/proc/driver/nvidia/version" in asked  # a host file
    assert "/etc/containerd/config.toml" in asked  # an engine file
    assert "/usr/bin/containerd" in asked  # an engine binary


def test_the_rpm_write_ahead_log_is_resolved_inside_the_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from cgpu.engines import installed

    root = tmp_path / "node"
    outside = tmp_path / "outside-wal"
    outside.write_bytes(b"a machine file, not the node's")
    ef.node(root, {"/var/lib/rpm/rpmdb.sqlite": b"not sqlite", "/wal": b"the node's log"})
    os.symlink(str(outside), root / "var/lib/rpm/rpmdb.sqlite-wal")  # absolute: means ROOT/<outside>
    read: list[str] = []
    capped = installed.read_capped
    monkeypatch.setattr(installed, "read_capped", lambda path, limit: read.append(path) or capped(path, limit))
    packages = installed._Packages(installed.Files(str(root)))
    assert packages.find("podman") is None
    assert str(outside) not in read and read == [str(root / "var/lib/rpm/rpmdb.sqlite")]
    os.unlink(root / "var/lib/rpm/rpmdb.sqlite-wal")
    os.symlink("/wal", root / "var/lib/rpm/rpmdb.sqlite-wal")
    read.clear()
    installed._Packages(installed.Files(str(root))).find("podman")
    assert read == [str(root / "var/lib/rpm/rpmdb.sqlite"), str(root / "wal")]


# Trees of a few names, each a dir, a file or a link (relative, absolute, `..`, loops, dangling; never
# empty: Linux makes no empty link)
_NAMES = ("a", "b", "l", "f")
_TARGETS = ("a", "b", "l", "f", "..", ".", "/", "/a", "/a/b", "../l", "a/l", "/l/f", "b/../a", "missing")
_KINDS = st.sampled_from(["dir", "file", *(f"link:{t}" for t in _TARGETS)])
_PATHS = st.lists(st.sampled_from([*_NAMES, "..", ".", "missing"]), min_size=0, max_size=6).map(
    lambda parts: "/" + "/".join(parts)
)


@settings(max_examples=300, deadline=None)
@example({("f",): "file"}, [("/f/a", False)])  # a file as a dir, its last component not followed: ENOTDIR
@example({("a",): "dir", ("l",): "link:/a"}, [("/l/f", True), ("/l/f", False)])  # a link's dir, kept
@given(
    st.dictionaries(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=3).map(tuple), _KINDS, max_size=10),
    st.lists(st.tuples(_PATHS, st.booleans()), min_size=1, max_size=12),
)
def test_each_dirs_walk_kept_for_the_view_resolves_as_a_whole_walk(tree: dict[tuple[str, ...], str], asked):
    """`real` walks a path's dir once per view and the last component from there: every path asked of
    one view resolves (or fails, with the same errno) as a whole walk from the root does."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for parts, kind in sorted(tree.items(), key=lambda item: len(item[0])):
            place = root.joinpath(*parts)
            if not place.parent.is_dir() or place.is_symlink() or place.exists():
                continue
            if kind == "dir":
                place.mkdir()
            elif kind == "file":
                place.write_text("x")
            else:
                os.symlink(kind.removeprefix("link:"), place)
        view = NodeFiles(str(root))
        for path, follow_last in asked:
            whole = NodeFiles(str(root))
            # `..` is taken lexically first, as `real` takes it
            done, code = whole._walk("", posixpath.normpath(path).split("/")[::-1], 0, follow_last)
            expected = code if done is None else str(root) + done
            try:
                found: str | int = view.real(path, follow_last=follow_last)
            except OSError as exc:
                found = exc.errno
            assert found == expected, (path, follow_last)
