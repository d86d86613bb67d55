"""Every file cgpu writes or removes is reached through a directory it opened once and checked: a
directory swapped for a link between that check and the write or remove (another user who may
rename entries of its parent does it in a real race; here a hook does it at the worst moment)
redirects nothing. The link points at a victim dir laid out as cgpu's own would be."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cgpu.cdi import spec_cache
from cgpu.cdi.parse import parse_spec
from cgpu.node import files
from cgpu.node.files import TEMP_DIR, remove_stale_temporaries, write_atomic, write_private

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX links and permissions")

OLD = time.time() - 90 * 86_400


def swap(directory: Path, victim: Path) -> Path:
    """Move `directory` aside and put a link to `victim` in its place; returns where it went."""
    moved = directory.with_name(directory.name + ".moved")
    os.rename(directory, moved)
    os.symlink(victim, directory)
    return moved


@contextmanager
def swapped_on(owner: Any, name: str, directory: Path, victim: Path) -> Iterator[list[Path]]:
    """Swap `directory` for a link to `victim` at the first call of `owner.name` (a call every writer
    makes after its checks, before its write); yields [where the real dir went]."""
    real: Callable[..., Any] = getattr(owner, name)
    moved: list[Path] = []

    def hook(*args: Any, **kwargs: Any) -> Any:
        if not moved:
            moved.append(swap(directory, victim))
        return real(*args, **kwargs)

    setattr(owner, name, hook)
    try:
        yield moved
    finally:
        setattr(owner, name, real)


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    os.chmod(path, 0o700)
    return path


def test_a_watch_output_dir_swapped_after_the_check_is_not_written_through(tmp_path: Path):
    out, victim = private_dir(tmp_path / "features.d"), private_dir(tmp_path / "root-only")
    private_dir(victim / TEMP_DIR)  # as another output dir of cgpu's has it
    (victim / "cgpu").write_text("root's own file\n")
    with swapped_on(os, "urandom", out, victim) as moved:  # the temporary file's name: after every check
        write_atomic(str(out / "cgpu"), b"cgpu.answer=1\n")
    assert moved and (victim / "cgpu").read_text() == "root's own file\n"
    assert (moved[0] / "cgpu").read_bytes() == b"cgpu.answer=1\n"
    assert os.listdir(victim / TEMP_DIR) == []


def test_stale_temporaries_are_removed_only_in_the_dir_checked(tmp_path: Path):
    out, victim = private_dir(tmp_path / "features.d"), private_dir(tmp_path / "root-only")
    private_dir(victim / TEMP_DIR)
    planted = victim / TEMP_DIR / "cgpu.0123456789abcdef.tmp"
    planted.write_text("not cgpu's to remove\n")
    private_dir(out / TEMP_DIR)
    (out / TEMP_DIR / "cgpu.fedcba9876543210.tmp").write_text("left by a killed run\n")
    with swapped_on(os, "scandir", out, victim):
        assert remove_stale_temporaries(str(out / "cgpu")) == 1
    assert planted.exists()


def test_a_cache_dir_swapped_after_the_check_is_not_written_through(tmp_path: Path):
    cache, victim = private_dir(tmp_path / "cache"), private_dir(tmp_path / "root-only")
    (victim / "entry.json").write_text("root's own file\n")
    with swapped_on(os, "urandom", cache, victim) as moved:
        write_private(cache / "entry.json", b"{}")
    assert moved and (victim / "entry.json").read_text() == "root's own file\n"
    assert (moved[0] / "entry.json").read_bytes() == b"{}"


def test_a_cache_dir_swapped_after_the_check_is_not_pruned_through(tmp_path: Path):
    cache, victim = private_dir(tmp_path / "cache"), private_dir(tmp_path / "root-only")
    for folder in (cache, victim):
        (folder / "old.json").write_text("{}")
        os.utime(folder / "old.json", (OLD, OLD))
    with swapped_on(os, "scandir", cache, victim) as moved:
        files.prune(cache, older_than=86_400, suffixes=(".json",), keep=lambda _: False)
    assert (victim / "old.json").exists()
    assert not (moved[0] / "old.json").exists()


SPEC = b"cdiVersion: 0.5.0\nkind: example.com/gpu\ndevices:\n- name: a\n  containerEdits:\n    env: [A=1]\n"


def spec_in(tmp_path: Path) -> tuple[str, os.stat_result, Any]:
    path = tmp_path / "specs" / "x.yaml"
    path.parent.mkdir()
    path.write_bytes(SPEC)
    info = os.stat(path)
    return str(path), info, parse_spec(SPEC, path=str(path), priority=0)


def test_the_spec_cache_is_never_written_through_a_swapped_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(spec_cache, "RACY_SECONDS", 0)  # a file written just now is stored
    path, info, spec = spec_in(tmp_path)
    cache = private_dir(tmp_path / "cache")
    entries, victim = private_dir(cache / spec_cache.SUBDIR), private_dir(tmp_path / "root-only")
    with swapped_on(os, "urandom", entries, victim) as moved:  # the temporary file's name: after every check
        assert spec_cache.store(str(cache), path, info, info, spec)
    assert os.listdir(victim) == []
    assert [name for name in os.listdir(moved[0]) if name.endswith(".json")]  # stored where it was checked


def test_the_spec_cache_is_never_pruned_through_a_swapped_dir(tmp_path: Path):
    cache = private_dir(tmp_path / "cache")
    entries, victim = private_dir(cache / spec_cache.SUBDIR), private_dir(tmp_path / "root-only")
    for folder in (entries, victim):
        (folder / "0000beef.json").write_text("{}")
        os.utime(folder / "0000beef.json", (OLD, OLD))
    with swapped_on(spec_cache.time, "time_ns", entries, victim) as moved:
        spec_cache.prune(str(cache))
    assert (victim / "0000beef.json").exists()
    assert moved and not (moved[0] / "0000beef.json").exists()  # pruned where it was checked


def test_a_trusted_link_to_an_output_dir_is_still_written(tmp_path: Path):
    """A link only this user or root could have made (as macOS's /tmp is) is followed."""
    real = private_dir(tmp_path / "real")
    os.chmod(tmp_path, 0o755)
    os.symlink(real, tmp_path / "link")
    write_atomic(str(tmp_path / "link" / "cgpu"), b"x=1\n")
    assert (real / "cgpu").read_bytes() == b"x=1\n"


def test_an_output_dir_link_another_user_could_swap_is_refused(tmp_path: Path):
    real = private_dir(tmp_path / "real")
    os.chmod(tmp_path, 0o777)  # writable by every user, not sticky: anyone may swap what is there
    os.symlink(real, tmp_path / "link")
    with pytest.raises(files.UnsafeTargetError, match="symbolic link another user could have made or swapped"):
        write_atomic(str(tmp_path / "link" / "cgpu"), b"x=1\n")
    assert not (real / "cgpu").exists()
