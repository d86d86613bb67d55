"""One writer of the files cgpu replaces (`cgpu.node.files.write_atomic`) and one set of rules for
every cache (`cgpu.node.files`): what another user or a link put in the way is refused."""

from __future__ import annotations

import ast
import os
import stat
import sys
from pathlib import Path

import pytest

from cgpu.node.files import TEMP_DIR, UnsafeCacheError, UnsafeTargetError, read_private, write_atomic, write_private

PACKAGE = Path(__file__).resolve().parent.parent / "cgpu"
posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX owners and modes")
# What only the one writer calls: creating the temporary, setting its mode, the rename over.
WRITER_CALLS = {"os.replace", "os.rename", "os.fchmod", "tempfile.mkstemp", "tempfile.NamedTemporaryFile", "mkstemp"}


def _writer_calls(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in WRITER_CALLS:
            found.append(f"{node.lineno}: {ast.unparse(node.func)}")
    return found


def test_no_module_but_the_writer_replaces_files():
    # the probe is copied into containers and runs alone: it has no writer of cgpu's to call
    modules = [p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "node" / "files.py" and p.name != "standalone.py"]
    assert len(modules) > 40
    found = [
        f"{p.relative_to(PACKAGE.parent)}:{c}" for p in modules for c in _writer_calls(p.read_text(encoding="utf-8"))
    ]
    assert found == []
    assert _writer_calls(
        (PACKAGE / "node" / "files.py").read_text(encoding="utf-8")
    )  # the writer is where the test looks


def test_the_check_sees_each_writer_call():
    source = (
        "os.replace(a, b)\nos.fchmod(fd, 0o600)\nfd, name = tempfile.mkstemp(dir=d)\nos.rename(a, b)\nos.open(a, 0)\n"
    )
    assert [call.split(": ")[1] for call in _writer_calls(source)] == [
        "os.replace",
        "os.fchmod",
        "tempfile.mkstemp",
        "os.rename",
    ]


@posix_only
def test_a_cache_file_is_private_and_replaced_whole(tmp_path):
    path = tmp_path / "cache" / "cgpu" / "entry.json"
    write_private(path, b"one")
    write_private(path, b"two")
    assert read_private(path, limit=10) == b"two"
    info = os.lstat(path)
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
    for folder in (path.parent, path.parent.parent):  # made 0700, whatever the umask
        assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700
    # the temporary lives beside the entry (each cache's pruning removes a killed writer's), none is left
    assert sorted(p.name for p in path.parent.iterdir()) == ["entry.json"]
    assert not (path.parent / TEMP_DIR).exists()


@posix_only
def test_a_link_or_fifo_in_a_cache_dir_is_replaced_never_followed(tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"theirs")
    (folder / "link.json").symlink_to(elsewhere)
    os.mkfifo(folder / "fifo.json", 0o600)
    for name in ("link.json", "fifo.json"):
        write_private(folder / name, b"ours")
        assert stat.S_ISREG(os.lstat(folder / name).st_mode) and read_private(folder / name, limit=10) == b"ours"
    assert elsewhere.read_bytes() == b"theirs"
    (folder / "dir.json").mkdir()
    with pytest.raises(IsADirectoryError):
        write_private(folder / "dir.json", b"ours")
    assert sorted(p.name for p in folder.iterdir()) == ["dir.json", "fifo.json", "link.json"]  # no temporary left


@posix_only
def test_in_a_shared_dir_a_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"theirs")
    (tmp_path / "cgpu").symlink_to(elsewhere)
    with pytest.raises(UnsafeTargetError, match="symbolic link"):
        write_atomic(str(tmp_path / "cgpu"), b"ours")
    assert elsewhere.read_bytes() == b"theirs"


@posix_only
@pytest.mark.parametrize("setup", ["group-writable", "link"])
def test_a_cache_dir_others_could_change_is_not_written(tmp_path, setup):
    folder = tmp_path / "cache"
    if setup == "link":
        real = tmp_path / "real"
        real.mkdir(mode=0o700)
        folder.symlink_to(real)
    else:
        folder.mkdir()
        os.chmod(folder, 0o770)
    with pytest.raises(UnsafeCacheError):
        write_private(folder / "entry.json", b"ours")
    assert not os.path.lexists(folder / "entry.json")


@posix_only
def test_a_cache_file_above_its_cap_or_someone_elses_is_not_read(tmp_path):
    path = tmp_path / "cache" / "entry.json"
    write_private(path, b"x" * 11)
    with pytest.raises(UnsafeCacheError, match="above the cap"):
        read_private(path, limit=10)
    os.chmod(path, 0o666)
    with pytest.raises(UnsafeCacheError, match="no one else can write"):
        read_private(path, limit=100)


@posix_only
def test_reading_an_entry_in_use_refreshes_its_mtime_once_it_is_old(tmp_path):
    path = tmp_path / "cache" / "entry.json"
    write_private(path, b"{}")
    os.utime(path, (1, 1))
    read_private(path, limit=10)
    assert os.stat(path).st_mtime == 1  # not asked to
    read_private(path, limit=10, touch_after_ns=10**9)
    assert os.stat(path).st_mtime > 1
