"""A repeated call reuses the last answers only while every host read gives the same result:
after any host change its report is exactly what a fresh process would answer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import cgpu.backends.cdi as backend
from cgpu.cdi.scan import clear_parse_cache

from .helpers import HOSTS, SAMPLES, probe

SPEC = SAMPLES / "nvidia-8gpu-mig" / "spec"
NVRM = "proc/driver/nvidia/version"


def fresh(root: Path) -> dict:
    """The report with nothing remembered, as a new process computes it."""
    backend._REMEMBERED.clear()
    clear_parse_cache()
    return probe([SPEC], root)


def without_timestamps(report: dict) -> dict:
    return {key: value for key, value in report.items() if key != "checked_at"}


@pytest.fixture
def host(tmp_path) -> Path:
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "nvidia-580", root, symlinks=True)
    return root


LIBCUDA = "usr/lib/x86_64-linux-gnu/libcuda.so.580.82.07"


def library_to_link(root: Path) -> None:
    (root / LIBCUDA).rename(root / (LIBCUDA + ".real"))
    (root / LIBCUDA).symlink_to("libcuda.so.580.82.07.real")  # same answers: the link resolves inside the root


def retarget_link(root: Path) -> None:
    (root / LIBCUDA).unlink()
    (root / LIBCUDA).symlink_to("/nowhere")


def upgrade_driver(root: Path) -> None:
    (root / NVRM).write_text((root / NVRM).read_text().replace("580.82.07", "580.95.05"))
    (root / "sys/module/nvidia/version").write_text("580.95.05\n")


def stale_spec(root: Path) -> None:
    (root / LIBCUDA).unlink()
    upgrade_driver(root)


def unreadable_driver_version(root: Path) -> None:
    (root / NVRM).unlink()
    (root / NVRM).mkdir()  # a read error, not a missing file
    (root / "sys/module/nvidia/version").unlink()


# change -> (what the host looks like first, the change, whether the report must differ)
CHANGES = {
    "a library removed": (None, lambda root: (root / LIBCUDA).unlink(), True),
    "a library turned into a link": (None, library_to_link, False),
    "a link retargeted to nothing": (library_to_link, retarget_link, True),
    "a device node removed": (None, lambda root: (root / "dev/nvidia3").unlink(), True),
    # with a missing versioned library the spec reads as stale, and the message names the host's driver
    "the driver upgraded, same file size": (lambda root: (root / LIBCUDA).unlink(), upgrade_driver, True),
    "the driver version unreadable": (stale_spec, unreadable_driver_version, True),
    "a render node's vendor changed": (
        None,
        lambda root: (root / "sys/class/drm/renderD128/device/vendor").write_text("0x1002\n"),
        True,
    ),
    "the ICD file emptied": (None, lambda root: (root / "etc/OpenCL/vendors/nvidia.icd").write_text(""), True),
    "a folder of nodes moved away": (
        None,
        lambda root: (root / "dev/nvidia-caps").rename(root / "dev/nvidia-caps-gone"),
        True,
    ),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_host_change_shows_on_the_next_call(host, change):
    setup, apply, matters = CHANGES[change]
    if setup is not None:
        setup(host)
    before = fresh(host)
    assert without_timestamps(probe([SPEC], host)) == without_timestamps(before)  # reused, unchanged
    apply(host)
    after = probe([SPEC], host)  # the last answers are remembered: this call must see the change
    assert without_timestamps(after) == without_timestamps(fresh(host))
    assert (without_timestamps(after) != without_timestamps(before)) == matters


def test_a_repeat_call_over_unchanged_specs_leaves_the_memos_as_they_were(host):
    """No new object is kept by a call that finds nothing changed: the remembered answers and the
    risky-edits memo hold the very objects they held (a new one made per device at each call would
    sit among that call's short-lived objects and keep their memory from being returned)."""
    fresh(host)
    memos = [next(iter(backend._REMEMBERED.values())).results, backend._RISKY]
    before = [(list(memo._values), list(memo._values.values()), list(memo._held)) for memo in memos]
    probe([SPEC], host)
    assert next(iter(backend._REMEMBERED.values())).results is memos[0]
    after = [(list(memo._values), list(memo._values.values()), list(memo._held)) for memo in memos]
    for was, now in zip(before, after, strict=True):
        assert len(was[0]) == len(now[0]) > 0
        for old, new in zip(was, now, strict=True):
            assert all(a is b for a, b in zip(old, new, strict=True))


def test_a_call_while_another_holds_the_memos_answers_alone_and_keeps_nothing(host):
    before = fresh(host)
    memos = [next(iter(backend._REMEMBERED.values())).results, backend._RISKY]
    kept = [dict(memo._values) for memo in memos]
    for memo in memos:
        assert memo.begin()  # as another thread's probe does
    try:
        (host / LIBCUDA).unlink()
        during = probe([SPEC], host)
    finally:
        for memo in memos:
            memo.end()
    assert [dict(memo._values) for memo in memos] == kept
    assert without_timestamps(during) != without_timestamps(before)
    assert without_timestamps(during) == without_timestamps(fresh(host))


def test_a_remembered_answer_is_never_given_to_another_object(host):
    """An id names an object only while it lives: the memo holds what its keys name."""
    from cgpu.backends.cdi.device import ByIdentity

    memo = ByIdentity()
    assert memo.begin()
    first = [object() for _ in range(100)]
    for index, item in enumerate(first):
        memo.keep(item, index)
    memo.commit()
    memo.end()
    ids = {id(item) for item in first}
    del first  # still held by the memo: no new object can take one of their ids
    assert all(id(object()) not in ids for _ in range(1000))
    assert memo.begin()
    memo.commit()  # a call that kept nothing: nothing is remembered or held
    memo.end()
    assert len(memo) == 0 and not memo._held


def test_a_commit_keeps_exactly_what_the_call_kept():
    from cgpu.backends.cdi.device import ByIdentity

    items = [object() for _ in range(5)]
    memo = ByIdentity()

    def call(kept: dict[int, int]) -> None:
        assert memo.begin()
        memo.keep_all([items[index] for index in kept], list(kept.values()))
        memo.commit()
        memo.end()

    def remembered() -> dict[int, int]:
        return {index: memo.get(item) for index, item in enumerate(items) if memo.get(item) is not None}

    values = [1000 + n for n in range(5)]  # ints above the small-int cache: one object each
    call({0: values[0], 1: values[1], 2: values[2]})
    assert remembered() == {0: 1000, 1: 1001, 2: 1002}
    call({0: values[0], 1: values[1], 2: values[2]})  # the same again: nothing changes
    assert remembered() == {0: 1000, 1: 1001, 2: 1002}
    call({0: values[0], 1: values[3], 3: values[2]})  # as many entries, one key and one value new
    assert remembered() == {0: 1000, 1: 1003, 3: 1002}
    call({4: values[4]})
    assert remembered() == {4: 1004} and len(memo) == 1
