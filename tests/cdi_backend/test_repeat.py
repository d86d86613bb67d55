"""A repeated call reuses the last answers only while every host read gives the same result:
after any host change its report is exactly what a fresh process would answer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cgpu.backends import memory

from .helpers import HOSTS, SAMPLES, probe

SPEC = SAMPLES / "nvidia-8gpu-mig" / "spec"
NVRM = "proc/driver/nvidia/version"


def fresh(root: Path) -> dict:
    """The report with nothing remembered, as a new process computes it."""
    memory("cdi").clear()
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


def _kept(reader) -> list[tuple[object, object]]:
    """What the reader keeps per spec file: its answers and risky edits, the very objects."""
    return list(zip(reader.recalled("answers"), reader.recalled("risky"), strict=True))


def test_a_repeat_call_over_unchanged_specs_leaves_the_memos_as_they_were(host):
    """No new object is kept by a call that finds nothing changed: what is remembered per spec
    file is the very objects it was (a new one made per device at each call would sit among that
    call's short-lived objects and keep their memory from being returned)."""
    fresh(host)
    kept = memory("cdi")
    before = _kept(kept.reader)
    probe([SPEC], host)
    after = _kept(kept.reader)
    assert len(before) == len(after) > 0
    for was, now in zip(before, after, strict=True):
        assert was[0] is now[0] and was[1] is now[1]


def test_a_call_while_another_holds_the_memos_answers_alone_and_keeps_nothing(host):
    before = fresh(host)
    kept = memory("cdi")
    answers = [entry[0] for entry in _kept(kept.reader)]
    assert kept.begin()  # as another thread's probe does
    try:
        (host / LIBCUDA).unlink()
        during = probe([SPEC], host)
    finally:
        kept.end()
    assert all(a is b for a, b in zip(answers, [entry[0] for entry in _kept(kept.reader)], strict=True))
    assert without_timestamps(during) != without_timestamps(before)
    assert without_timestamps(during) == without_timestamps(fresh(host))
