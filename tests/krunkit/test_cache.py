"""The answer cache: keys, time limit, atomic writes, two concurrent runs, and a broken cache
directory (corrupt, unreadable, read-only, full disk) that only ever gives a warning."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgpu.backends.krunkit import answer_cache as cache_module
from cgpu.backends.krunkit.answer_cache import AnswerCache
from cgpu.node.files import default_cache_dir
from tests.conftest import REPO
from tests.timing import assert_within, interpreter_run, timed

KEY = {"krunkit": "1.2.1", "probe_image": {"id": "sha256:abc"}, "vm": {"podman_machine": "gpu"}, "host": "mac"}


@pytest.fixture
def warnings():
    return []


@pytest.fixture
def cache(tmp_path, warnings):
    return AnswerCache(
        "test", ttl=60, warn=lambda source, message: warnings.append((source, message)), directory=tmp_path / "c"
    )


def test_round_trip_and_key_change(cache, warnings):
    assert cache.get(KEY) is None
    assert cache.put(KEY, {"vulkan": True})
    value, stored_at = cache.get(KEY)
    assert value == {"vulkan": True} and abs(stored_at - time.time()) < 5
    for part, changed in (("krunkit", "1.3.2"), ("probe_image", {"id": "sha256:def"}), ("host", "other")):
        assert cache.get({**KEY, part: changed}) is None
    assert warnings == []
    assert [p.suffix for p in cache.directory.iterdir()] == [".json"]  # no temp files left


def test_time_limit(cache, monkeypatch):
    cache.put(KEY, {"v": 1})
    now = time.time()
    monkeypatch.setattr(cache_module.time, "time", lambda: now + 61)
    assert cache.get(KEY) is None
    monkeypatch.setattr(cache_module.time, "time", lambda: now - 3600)  # clock went back: distrust
    assert cache.get(KEY) is None
    monkeypatch.setattr(cache_module.time, "time", lambda: now + 30)
    assert cache.get(KEY) is not None


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b"[]",
        b'{"format": 1, "key": {}, "stored_at": "x"}',
        b'{"format": 1, "key": {}, "stored_at": 1, "value": []}',
        b"\xff\xfe\x00",
    ],
)
def test_corrupt_entry_is_a_warning_and_a_miss(cache, warnings, content):
    cache.put(KEY, {"v": 1})
    cache.path(KEY).write_bytes(content)
    assert cache.get(KEY) is None
    assert len(warnings) == 1 and "corrupt" in warnings[0][1] and warnings[0][0] == str(cache.path(KEY))
    assert cache.put(KEY, {"v": 2}) and cache.get(KEY)[0] == {"v": 2}


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
            max_leaves=10,
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_any_file_content_never_raises(cache, content):
    cache.directory.mkdir(parents=True, exist_ok=True)
    cache.path(KEY).write_bytes(content)
    result = cache.get(KEY)
    assert result is None or isinstance(result[0], dict)


def test_unreadable_entry(cache, warnings):
    cache.directory.mkdir(parents=True)
    cache.path(KEY).mkdir()  # a directory where the file should be: reading fails
    assert cache.get(KEY) is None
    assert warnings and "could not read" in warnings[0][1]


def test_read_only_directory(cache, warnings):
    cache.directory.mkdir(parents=True)
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(cache.directory)]).returncode != 0:
        pytest.skip("needs chattr +i (read-only even for root)")
    try:
        assert cache.put(KEY, {"v": 1}) is False
        assert cache.get(KEY) is None
        with cache.locked(KEY, timeout=1) as held:
            assert held is False
    finally:
        subprocess.run(["chattr", "-i", str(cache.directory)])
    assert [w[1].split(" (")[0] for w in warnings] == [
        "could not store the answer in the cache",
        "could not create the cache lock",
    ]
    assert list(cache.directory.iterdir()) == []


def test_cache_dir_under_a_file(tmp_path, warnings):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = AnswerCache("test", ttl=60, warn=lambda s, m: warnings.append((s, m)), directory=blocker)
    assert cache.put(KEY, {"v": 1}) is False and cache.get(KEY) is None
    assert "Not a directory" in warnings[0][1]


def test_full_disk_leaves_no_temp_file(cache, warnings, monkeypatch):
    cache.put(KEY, {"v": 1})

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache_module.os, "fsync", full)
    assert cache.put(KEY, {"v": 2}) is False
    assert "No space left on device" in warnings[0][1]
    assert cache.get(KEY)[0] == {"v": 1}  # the old answer is intact
    assert [p.name for p in cache.directory.iterdir() if p.suffix == ".tmp"] == []


def test_two_concurrent_runs_compute_once(tmp_path):
    """Two processes ask for the same key at once: one computes, the other waits for the lock
    and reads that answer instead of booting a second VM."""
    script = textwrap.dedent(f"""
        import json, os, sys, time
        from pathlib import Path
        from cgpu.backends.krunkit.answer_cache import AnswerCache
        cache = AnswerCache("race", ttl=60, warn=lambda s, m: print("WARN", m), directory=Path({str(tmp_path)!r}))
        key = {{"k": 1}}
        Path(sys.argv[1]).touch()
        while len(list(Path({str(tmp_path)!r}).glob("started-*"))) < 2:
            time.sleep(0.01)
        with cache.locked(key, timeout=30) as held:
            assert held
            hit = cache.get(key)
            if hit is None:
                with open({str(tmp_path / "computed")!r}, "a") as f:
                    f.write("x")
                time.sleep(0.5)
                value = {{"by": os.getpid()}}
                cache.put(key, value)
            else:
                value = hit[0]
        print(json.dumps(value))
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path / f"started-{i}")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    answers = [json.loads(out) for out, _ in outputs]
    assert answers[0] == answers[1]
    assert (tmp_path / "computed").read_text() == "x"


def test_lock_timeout_goes_on_without_it(cache, warnings):
    with cache.locked(KEY, timeout=5) as first:
        assert first
        other = AnswerCache("test", ttl=60, warn=lambda s, m: warnings.append((s, m)), directory=cache.directory.parent)
        started = time.monotonic()
        with other.locked(KEY, timeout=0.3) as second:  # flock is per open file: this one must wait
            assert second is False
        seconds = time.monotonic() - started
        assert seconds > 0.25
        assert_within(seconds, 0.3, interpreter_run, "a lock wait of 0.3 s")
    assert "held this lock" in warnings[0][1]


# --- another user against the cache: only this user's private files are read back ---------

OTHER_UID = 65534
root_only = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")


@pytest.fixture
def planted(cache):
    """A valid entry of this user's for KEY, to be tampered with by each test."""
    assert cache.put(KEY, {"vulkan": "provided"})
    assert cache.get(KEY)[0] == {"vulkan": "provided"}  # control: as it is, it is read
    return cache.path(KEY)


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda path: os.chown(path, OTHER_UID, OTHER_UID), marks=root_only, id="of-another-user"),
        pytest.param(lambda path: path.chmod(0o646), id="writable-by-others"),
        pytest.param(lambda path: path.chmod(0o664), id="writable-by-the-group"),
    ],
)
def test_an_entry_another_user_could_write_is_not_read(cache, warnings, planted, tamper):
    tamper(planted)
    assert cache.get(KEY) is None
    assert "could not read the cached answer" in warnings[0][1] and "no one else can write" in warnings[0][1]


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda cache: cache.directory.chmod(0o777), id="shared-entries-dir"),
        pytest.param(lambda cache: cache.directory.chmod(0o770), id="group-entries-dir"),
        pytest.param(lambda cache: cache.root.chmod(0o777), id="shared-root"),
        pytest.param(
            lambda cache: os.chown(cache.directory, OTHER_UID, OTHER_UID), marks=root_only, id="dir-of-another-user"
        ),
    ],
)
def test_a_shared_directory_is_not_used_at_all(cache, warnings, planted, tamper):
    tamper(cache)
    assert cache.get(KEY) is None
    assert cache.put(KEY, {"v": 2}) is False
    with cache.locked(KEY, timeout=1) as held:
        assert held is False
    assert all("writable by others" in message for _, message in warnings) and len(warnings) == 3
    assert json.loads(planted.read_text())["value"] == {"vulkan": "provided"}  # nothing written there either


def test_a_linked_entry_is_not_followed(cache, warnings, tmp_path):
    elsewhere = AnswerCache("elsewhere", ttl=60, warn=lambda s, m: None, directory=tmp_path / "c")
    elsewhere.put(KEY, {"vulkan": "provided"})
    cache.directory.mkdir(parents=True, exist_ok=True)
    cache.path(KEY).symlink_to(elsewhere.path(KEY))
    assert cache.get(KEY) is None
    assert "could not read the cached answer" in warnings[0][1]


def test_a_linked_directory_is_not_followed(tmp_path, warnings):
    real = AnswerCache("real", ttl=60, warn=lambda s, m: None, directory=tmp_path)
    real.put(KEY, {"vulkan": "provided"})
    (tmp_path / "linked").symlink_to(real.directory)
    cache = AnswerCache("linked", ttl=60, warn=lambda s, m: warnings.append((s, m)), directory=tmp_path)
    assert cache.get(KEY) is None and cache.put(KEY, {"v": 2}) is False
    assert "symbolic link" in warnings[0][1]
    assert real.get(KEY)[0] == {"vulkan": "provided"}


def test_a_fifo_entry_does_not_hang(cache, warnings):
    cache.directory.mkdir(parents=True)
    os.mkfifo(cache.path(KEY), 0o600)
    hit, seconds = timed(lambda: cache.get(KEY))
    assert hit is None and "could not read the cached answer" in warnings[0][1]
    assert_within(seconds, 0, interpreter_run, "reading a FIFO entry (it must not wait for a writer)")
    assert cache.put(KEY, {"v": 1}) and cache.get(KEY)[0] == {"v": 1}  # replaced by a real entry


def test_a_sparse_huge_entry_is_not_read(cache, warnings, planted, monkeypatch):
    with open(planted, "r+b") as f:
        f.truncate(4 << 30)  # 4 GiB on disk that takes no space: reading it would take 4 GiB of memory
    read = []
    monkeypatch.setattr(cache_module, "read_private", _spy(cache_module.read_private, read))
    assert cache.get(KEY) is None
    assert "above the cap" in warnings[0][1] and read == [None]  # refused before a byte was read


def _spy(function, calls):
    def wrapper(*args, **kwargs):
        try:
            result = function(*args, **kwargs)
        except OSError:
            calls.append(None)
            raise
        calls.append(len(result))
        return result

    return wrapper


def test_a_linked_lock_creates_nothing(cache, warnings, tmp_path):
    cache.directory.mkdir(parents=True)
    target = tmp_path / "created-through-the-lock"
    (cache.directory / f"{cache.path(KEY).stem}.lock").symlink_to(target)
    with cache.locked(KEY, timeout=1) as held:
        assert held is False
    assert not target.exists() and "could not create the cache lock" in warnings[0][1]


def test_a_fifo_lock_does_not_hang(cache, warnings):
    cache.directory.mkdir(parents=True)
    os.mkfifo(cache.directory / f"{cache.path(KEY).stem}.lock", 0o600)
    with cache.locked(KEY, timeout=1) as held:
        assert held is False
    assert "could not create the cache lock" in warnings[0][1]


def test_a_new_directory_is_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        cache = AnswerCache("fresh", ttl=60, warn=lambda s, m: None, directory=tmp_path / "root")
        assert cache.put(KEY, {"v": 1})
    finally:
        os.umask(old)
    for path in (cache.root, cache.directory):
        assert path.stat().st_mode & 0o777 == 0o700, path
    assert cache.path(KEY).stat().st_mode & 0o777 == 0o600


def test_old_entries_are_pruned(cache, tmp_path):
    cache.put(KEY, {"v": 1})
    old = {**KEY, "krunkit": "0.9"}
    cache.put(old, {"v": 0})
    with cache.locked(old, timeout=1):
        pass
    crashed = cache.directory / "crashed-write.tmp"
    crashed.write_text("{")
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    link = cache.directory / "link.json"
    link.symlink_to(victim)
    long_ago = time.time() - 2 * cache.ttl - 3600
    for path in (cache.path(old), cache.directory / f"{cache.path(old).stem}.lock", crashed):
        os.utime(path, (long_ago, long_ago))
    os.utime(link, (long_ago, long_ago), follow_symlinks=False)
    cache.put(KEY, {"v": 2})
    left = sorted(p.name for p in cache.directory.iterdir())
    assert left == sorted([cache.path(KEY).name, "link.json"])  # a link is never followed nor removed
    assert victim.read_text() == "precious"


@pytest.mark.parametrize(
    ("platform", "env", "expected"),
    [
        ("linux", {"XDG_CACHE_HOME": "/xdg"}, "/xdg/cgpu"),
        ("linux", {"XDG_CACHE_HOME": "relative"}, "~/.cache/cgpu"),
        ("linux", {}, "~/.cache/cgpu"),
        ("darwin", {"XDG_CACHE_HOME": "/xdg"}, "~/Library/Caches/cgpu"),
        ("win32", {"LOCALAPPDATA": "/appdata"}, "/appdata/cgpu/Cache"),
        ("darwin", {"CGPU_CACHE_DIR": "/override"}, "/override"),
    ],
)
def test_default_cache_dir(monkeypatch, platform, env, expected):
    for name in ("CGPU_CACHE_DIR", "XDG_CACHE_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "platform", platform)
    assert str(default_cache_dir()) == os.path.expanduser(expected)


def test_a_cached_answer_of_the_wrong_shape_is_not_used():
    from cgpu.backends.krunkit.cached import from_cache as _from_cache
    from cgpu.gpu_probe.answer import ApiAnswer, Device, ProbeAnswer
    from cgpu.problem import Problem

    venus = Device("Virtio-GPU Venus (Apple M4)", "vulkan", True, {"allocated": True, "reason": "a GPU"})
    answer = ProbeAnswer(
        "probe image x",
        {"vulkan": ApiAnswer("provided", "Venus on Apple M4", "Vulkan works", None, (venus,))},
        (Problem("info", "x", "y"),),
    )
    good = json.loads(json.dumps(answer.to_json()))
    assert _from_cache(good) == answer
    vulkan = good["apis"]["vulkan"]
    for bad in (
        {},
        [],
        None,
        {**good, "answer_format": 0},
        {**good, "apis": {"vulkan": {}}},
        {**good, "apis": {**good["apis"], "cuda": {**vulkan, "devices": []}}},  # krunkit answers Vulkan only
        {**good, "apis": {"vulkan": {**vulkan, "state": "yes"}}},
        {**good, "apis": {"vulkan": {**vulkan, "devices": [{**vulkan["devices"][0], "name": 1}]}}},
        {**good, "apis": {"vulkan": {**vulkan, "devices": [{**vulkan["devices"][0], "api": "glide"}]}}},
        {**good, "apis": {"vulkan": {**vulkan, "devices": [{**vulkan["devices"][0], "details": {"x": [1]}}]}}},
        {**good, "problems": [{"severity": "x", "source": "a", "message": "b"}]},
        {**good, "unusable": "no answer"},
    ):
        assert _from_cache(bad) is None, bad
