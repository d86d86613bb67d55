"""How watch's files are written: what a watcher of the directory sees (nfd-worker >= v0.19 acts
on at most one features.d event a second, so a write must be one event on the visible name), the
mode set on the descriptor, targets that must not be replaced, leftovers of a killed run, and a
failed write that names the file and why without ending anything."""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

import pytest

from cgpu.fleet.watch import Publisher
from cgpu.node import files
from cgpu.node.files import (
    TEMP_DIR,
    UnsafeCacheError,
    UnsafeTargetError,
    remove_stale_temporaries,
    write_atomic,
    write_failure,
)

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX modes, owners and inotify")


def _inotify_events(directory: Path):
    inotify_simple = pytest.importorskip("inotify_simple", reason="inotify_simple is a Linux dependency")
    if not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux's")
    inotify = inotify_simple.INotify()
    inotify.add_watch(str(directory), inotify_simple.masks.ALL_EVENTS)
    return inotify, inotify_simple.flags


@posix_only
def test_each_write_is_one_event_on_the_visible_name_and_none_on_a_temporary_one(tmp_path):
    target = tmp_path / "cgpu"
    files.temp_dir(str(tmp_path))  # made once, at start-up (Publisher.prepare)
    inotify, flags = _inotify_events(tmp_path)
    try:
        for index in range(20):
            write_atomic(str(target), f"label=v{index}\n".encode())
            events = inotify.read(timeout=0)
            changes = [
                (event.name, flags.from_mask(event.mask))
                for event in events
                if event.mask & ~(flags.OPEN | flags.ACCESS | flags.CLOSE_NOWRITE | flags.ISDIR)
            ]
            # fsnotify maps IN_MOVED_TO to Create: one event nfd-worker acts on, for "cgpu"
            assert changes == [("cgpu", [flags.MOVED_TO])], changes
            assert target.read_text() == f"label=v{index}\n"
    finally:
        inotify.close()


@posix_only
def test_the_mode_is_set_on_the_descriptor_before_the_rename(tmp_path, monkeypatch):
    def no_chmod_by_path(*args, **kwargs):
        raise AssertionError("chmod by path: a link swapped in between would be followed")

    monkeypatch.setattr(os, "chmod", no_chmod_by_path)
    modes: list[int] = []
    real_replace = os.replace

    def replace(source, destination, *, src_dir_fd=None, dst_dir_fd=None):
        modes.append(stat.S_IMODE(os.lstat(source, dir_fd=src_dir_fd).st_mode))
        real_replace(source, destination, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "replace", replace)
    write_atomic(str(tmp_path / "answer.json"), b"{}\n", mode=0o640)
    assert modes == [0o640]
    assert stat.S_IMODE(os.stat(tmp_path / "answer.json").st_mode) == 0o640


@posix_only
def test_temporary_files_are_unguessable_and_in_a_private_dir(tmp_path, monkeypatch):
    seen: list[str] = []
    folders: list[tuple[int, int]] = []
    real_replace = os.replace

    def replace(source, destination, *, src_dir_fd=None, dst_dir_fd=None):
        seen.append(source)
        folder = os.fstat(src_dir_fd)  # the temporary file is named in a dir opened once
        folders.append((folder.st_dev, folder.st_ino))
        real_replace(source, destination, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "replace", replace)
    for _ in range(3):
        write_atomic(str(tmp_path / "cgpu"), b"x=1\n")
    private = tmp_path / TEMP_DIR
    info = os.lstat(private)
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    assert set(folders) == {(info.st_dev, info.st_ino)} and all("/" not in path for path in seen)
    assert len(set(seen)) == 3  # random names, not the pid or a counter
    assert all(str(os.getpid()) not in Path(path).name for path in seen)


@posix_only
def test_a_temporary_dir_others_can_write_or_a_link_is_refused(tmp_path):
    private = tmp_path / TEMP_DIR
    private.mkdir(mode=0o777)
    os.chmod(private, 0o777)
    with pytest.raises(UnsafeCacheError, match="writable by others"):
        write_atomic(str(tmp_path / "cgpu"), b"x=1\n")
    private.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    private.symlink_to(elsewhere)
    with pytest.raises(UnsafeCacheError, match="symbolic link"):
        write_atomic(str(tmp_path / "cgpu"), b"x=1\n")
    assert not (tmp_path / "cgpu").exists() and os.listdir(elsewhere) == []


@posix_only
def test_a_target_that_is_a_link_a_directory_or_another_users_file_is_refused(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    os.chmod(secret, 0o600)
    link = tmp_path / "answer.json"
    link.symlink_to(secret)
    with pytest.raises(UnsafeTargetError, match="symbolic link"):
        write_atomic(str(link), b"{}\n")
    assert link.is_symlink() and secret.read_text() == "root only\n"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    (tmp_path / "dir").mkdir()
    with pytest.raises(UnsafeTargetError, match="a directory"):
        write_atomic(str(tmp_path / "dir"), b"{}\n")
    theirs = tmp_path / "theirs"
    theirs.write_text("theirs\n")
    if os.geteuid() == 0:
        os.chown(theirs, 4242, 4242)
    else:
        pytest.skip("making another user's file needs root")
    with pytest.raises(UnsafeTargetError, match="another user"):
        write_atomic(str(theirs), b"{}\n")
    assert theirs.read_text() == "theirs\n"


@posix_only
def test_stale_temporary_files_of_a_killed_run_are_removed_at_start(tmp_path):
    (tmp_path / TEMP_DIR).mkdir(mode=0o700)
    for name in (f"{TEMP_DIR}/cgpu.k3j9x.tmp", f"{TEMP_DIR}/answer.json.a1b2.tmp", ".cgpu.old1.tmp"):
        (tmp_path / name).write_text("half")
    (tmp_path / f"{TEMP_DIR}/other.tmp").write_text("not ours to judge")  # another file's: kept
    (tmp_path / ".keep").write_text("not a temporary file")
    logged: list[str] = []
    Publisher(
        answer_file=str(tmp_path / "answer.json"), nfd_file=str(tmp_path / "cgpu"), expiry=60, log=logged.append
    ).prepare()
    assert sorted(os.listdir(tmp_path / TEMP_DIR)) == ["other.tmp"]
    assert sorted(os.listdir(tmp_path)) == [".cgpu-tmp", ".keep"]
    assert any("removed 2 temporary file(s)" in line and "cgpu" in line for line in logged), logged
    assert remove_stale_temporaries(str(tmp_path / "cgpu")) == 0


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.ENOSPC, "the file system is full"),
        (errno.EROFS, "read-only"),
        (errno.ENOENT, "does not exist"),
        (errno.EACCES, "permission denied"),
        (errno.EDQUOT, "quota"),
    ],
)
def test_a_failed_write_is_described_in_words_not_a_raw_errno(code, words, tmp_path):
    why = write_failure(str(tmp_path / "x" / "cgpu"), OSError(code, os.strerror(code)))
    assert words in why and os.strerror(code) in why


def _report() -> dict:
    from cgpu.report import ReportBuilder

    builder = ReportBuilder("cdi")
    builder.provide("cuda", "cuda is here")
    return builder.build()


@posix_only
def test_a_failed_write_is_logged_once_the_other_file_is_written_and_the_retry_succeeds(tmp_path, monkeypatch):
    answers, features = tmp_path / "answers", tmp_path / "features.d"
    answers.mkdir()
    logged: list[str] = []
    publisher = Publisher(
        answer_file=str(answers / "answer.json"), nfd_file=str(features / "cgpu"), expiry=60, log=logged.append
    )
    publisher.prepare()  # features.d is missing: nothing to prepare there, no exception
    for _ in range(3):
        publisher.publish(_report(), finished_at=0.0, duration=0.1)
    assert (answers / "answer.json").is_file() and publisher.failing
    assert logged == [
        f"cannot write the NFD feature file {features / 'cgpu'}: its directory {features} does not exist "
        "(No such file or directory); trying again at the next wake-up"
    ]
    features.mkdir()
    publisher.retry()
    assert (features / "cgpu").read_text().count("cgpu.feature.node.kubernetes.io/cuda=true") == 1
    assert not publisher.failing and logged[-1] == f"wrote the NFD feature file {features / 'cgpu'} again"

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    publisher.publish(_report(), finished_at=0.0, duration=0.1)
    assert "the file system is full" in logged[-1] and len(logged[-2:]) == 2
    assert os.listdir(features / TEMP_DIR) == [] and os.listdir(answers / TEMP_DIR) == []


@posix_only
def test_the_first_feature_file_write_after_making_the_temporary_dir_waits_out_nfds_rate_limit(tmp_path):
    """Making `.cgpu-tmp` in features.d is an event nfd-worker acts on; one within the same second
    would be dropped, so the first write comes at least NFD_RATE_S later (once, interruptibly)."""
    import time

    from cgpu.fleet import watch as watch_module

    features = tmp_path / "features.d"
    features.mkdir()
    publisher = Publisher(answer_file=None, nfd_file=str(features / "cgpu"), expiry=60, log=lambda line: None)
    made = time.monotonic()
    publisher.prepare()
    publisher.settle()
    assert time.monotonic() - made >= watch_module.NFD_RATE_S
    again = time.monotonic()
    publisher.settle()  # once only
    later = Publisher(answer_file=None, nfd_file=str(features / "cgpu"), expiry=60, log=lambda line: None)
    later.prepare()
    later.settle()
    assert time.monotonic() - again < watch_module.NFD_RATE_S  # the dir was there already: no wait
