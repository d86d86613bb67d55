"""A hostile or odd host under `--root` never stops `watch`: a FIFO where the driver version
file belongs, a link to one out of the root, a device node; files are type-checked without
being opened, links are not followed out of the root, and what is refused is a problem."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from cgpu.node import files
from cgpu.node.files import NotRegularFileError, open_regular
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIFOs, O_PATH and Linux paths")

SAMPLES = REPO / "cdi-samples"
SPEC = SAMPLES / "nvidia-current" / "spec" / "nvidia.yaml"
VERSION = "proc/driver/nvidia/version"


@pytest.fixture
def host(tmp_path):
    etc, out, root = tmp_path / "etc", tmp_path / "out", tmp_path / "host"
    etc.mkdir()
    out.mkdir()
    shutil.copytree(SAMPLES / "hosts" / "nvidia-580", root, symlinks=True)
    shutil.copy(SPEC, etc / "nvidia.yaml")
    (root / VERSION).unlink()
    return etc, root, out


def _first_answer(etc, root, out, *, within: float) -> dict:
    answer = out / "answer.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu", "watch", "--spec-dir", str(etc), "--root", str(root), "--engine", "none",
         "--answer-file", str(answer), "--interval", "60"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + within
        while not answer.exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, f"no answer within {within} s: watch hangs"
            time.sleep(0.05)
        return json.loads(answer.read_text())
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def _baseline(etc, root, out) -> float:
    """How long the first answer takes on this host with a plain version file."""
    (root / VERSION).write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.82.07\n")
    started = time.monotonic()
    _first_answer(etc, root, out, within=120)
    (root / VERSION).unlink()
    (out / "answer.json").unlink()
    return time.monotonic() - started


def test_a_fifo_as_the_driver_version_is_a_problem_not_a_hang(host):
    etc, root, out = host
    limit = 3 * _baseline(etc, root, out) + 5
    os.mkfifo(root / VERSION)
    report = _first_answer(etc, root, out, within=limit)
    assert report["containers"] == ["cuda", "vulkan", "opencl"]
    (problem,) = [p for p in report["problems"] if p["source"].endswith(VERSION)]
    assert problem["severity"] == "warning" and "FIFO" in problem["message"] and "did not open" in problem["message"]


def test_a_link_to_a_fifo_out_of_the_root_is_not_followed(host, tmp_path):
    etc, root, out = host
    limit = 3 * _baseline(etc, root, out) + 5
    outside = tmp_path / "outside-fifo"
    os.mkfifo(outside)
    (root / VERSION).symlink_to(outside)  # absolute: inside the root it names <root>/<outside>, which is not there
    report = _first_answer(etc, root, out, within=limit)
    assert report["containers"] == ["cuda", "vulkan", "opencl"]


@pytest.mark.parametrize("make", ["fifo", "device", "socket", "dir"])
def test_open_regular_refuses_without_opening(tmp_path, monkeypatch, make):
    path = tmp_path / "thing"
    if make == "fifo":
        os.mkfifo(path)
    elif make == "device":
        path = type(path)("/dev/null")
    elif make == "socket":
        import socket

        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    else:
        path.mkdir()
    opened: list[tuple[str, int]] = []
    real_open = os.open

    def recording_open(name, flags, *args, **kwargs):
        opened.append((str(name), flags))
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    with pytest.raises(NotRegularFileError):
        open_regular(str(path))
    # the only open of the path is O_PATH (which opens nothing); no reopen through /proc
    assert opened and all(flags & os.O_PATH for name, flags in opened if name == str(path)), opened
    assert not [name for name, _ in opened if name.startswith("/proc/self/fd/")], opened


def test_open_regular_reads_a_regular_file_and_refuses_a_link_when_asked(tmp_path):
    target = tmp_path / "version"
    target.write_text("580.82.07\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    with open_regular(str(link)) as handle:
        assert handle.read() == b"580.82.07\n"
    with pytest.raises(NotRegularFileError, match="symbolic link"):
        open_regular(str(link), follow_links=False)


def test_open_regular_without_proc_still_checks_before_opening(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_reopen_by_fd", [False])
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(NotRegularFileError, match="FIFO"):
        open_regular(str(tmp_path / "fifo"))
    (tmp_path / "file").write_text("x")
    with open_regular(str(tmp_path / "file")) as handle:
        assert handle.read() == b"x"
