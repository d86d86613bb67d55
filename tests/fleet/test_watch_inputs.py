"""What the cdi answer depends on, as the backend tells `watch` (`answer_inputs`): the spec dirs
the probe read, the driver version files and the engines' files. A change to each one listed is
seen, and an engine's configuration changed under the root is answered again."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cgpu.backends import Watching, run_backend
from cgpu.backends.cdi.inputs import answer_inputs
from cgpu.fleet import watch as watch_module
from cgpu.fleet.watch import WatchOptions
from cgpu.node.host import DRIVER_VERSION_FILES
from tests.cdi_backend import engine_files as ef
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watch tests use Linux paths")

SAMPLES = REPO / "cdi-samples"
SPEC = SAMPLES / "nvidia-current" / "spec" / "nvidia.yaml"
ALL = ["cuda", "vulkan", "opencl"]
CONFIG = "/etc/containerd/config.toml"
CDI_ON = 'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\nenable_cdi = true\n'
CDI_OFF = 'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\nenable_cdi = false\n'


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """The nvidia-580 sample host with containerd 2.1 (CDI on by default), its config and the current spec."""
    root = tmp_path / "node"
    shutil.copytree(SAMPLES / "hosts" / "nvidia-580", root, symlinks=True)
    (root / "etc/cdi").mkdir(parents=True, exist_ok=True)
    shutil.copy(SPEC, root / "etc/cdi/nvidia.yaml")
    return ef.node(root, {"/usr/bin/containerd": ef.upstream_containerd("v2.1.4", "v1.0.1"), CONFIG: CDI_ON})


def _answer(root: Path) -> dict:
    return run_backend("cdi", {"root": str(root)}).build()


def test_the_inputs_are_what_the_answer_read(node):
    report = _answer(node)
    assert report["containers"] == ALL
    inputs = answer_inputs(report, root=str(node))
    assert inputs.spec_dirs == [str(node / "etc/cdi"), str(node / "var/run/cdi")]  # containerd's, in the root
    assert inputs.host_files == list(DRIVER_VERSION_FILES)
    assert {"/usr/bin/containerd", CONFIG} <= set(inputs.engine_files)
    assert all(path.startswith("/") for path in inputs.engine_files)  # node paths, looked up in the root
    given = answer_inputs(report, root=str(node), spec_dirs=["/somewhere"], engine="none")
    assert (given.spec_dirs, given.engine_files) == (["/somewhere"], [])  # no engine judges: none of its files
    assert answer_inputs(report, root=str(node), engine="containerd@2.1.4").engine_files  # its files in the root
    assert answer_inputs(report, root=str(node), engine="not an engine").engine_files == []  # the probe says why


def _change(root: Path, path: str) -> None:
    """Edit a node file in place (size and times change), or create one that was absent."""
    target = root / path.lstrip("/")
    if target.is_file():
        with target.open("ab") as handle:
            handle.write(b"\n")
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("1.0\n")


def test_a_change_to_each_listed_input_wakes_watch(node, monkeypatch):
    monkeypatch.setitem(sys.modules, "inotify_simple", None)  # every input polled: each one checked the same way
    monkeypatch.setattr(watch_module, "ENGINE_POLL_S", 0.0)  # the engine files at every poll too
    inputs = answer_inputs(_answer(node), root=str(node))
    wakeup = watch_module.Wakeup([], str(node))
    try:
        wakeup.set_inputs(inputs)
        assert inputs.engine_files and inputs.host_files and inputs.spec_dirs
        for spec_dir in inputs.spec_dirs:
            os.makedirs(spec_dir, exist_ok=True)
        wakeup.snapshot()
        assert not wakeup.poll()  # nothing changed: no probe
        changes = [*inputs.host_files, *inputs.engine_files]
        for path in changes:
            wakeup.snapshot()
            _change(node, path)
            assert wakeup.poll(), f"a change to {path} was not seen"
        for spec_dir in inputs.spec_dirs:
            wakeup.snapshot()
            Path(spec_dir, "new.yaml").write_text("# new\n")
            assert wakeup.poll(), f"a spec added in {spec_dir} was not seen"
    finally:
        wakeup.close()


def test_engine_files_are_looked_at_less_often_than_the_spec_dirs(node, monkeypatch):
    inputs = answer_inputs(_answer(node), root=str(node))
    wakeup = watch_module.Wakeup([], str(node))
    try:
        wakeup.set_inputs(inputs)
        wakeup.snapshot()
        _change(node, CONFIG)
        assert not wakeup.poll()  # not due yet: an idle watch stats the engine files every ENGINE_POLL_S only
        later = time.monotonic() + watch_module.ENGINE_POLL_S + 1
        monkeypatch.setattr(watch_module.time, "monotonic", lambda: later)
        assert wakeup.poll()  # once due, the change is seen
    finally:
        wakeup.close()


def test_an_engine_configuration_changed_under_the_root_is_answered_again(node, tmp_path):
    answer = tmp_path / "answer.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu", "watch", "--root", str(node), "--answer-file", str(answer), "--interval", "600"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CGPU_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip

    def containers(wanted: list[str]) -> bool:
        try:
            return json.loads(answer.read_text())["containers"] == wanted
        except (FileNotFoundError, ValueError):
            return False

    def wait_for(wanted: list[str]) -> None:
        deadline = time.monotonic() + 120  # far beyond the interval's reach: only a change can do it
        while not containers(wanted):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, f"no answer {wanted}: {answer.read_text() if answer.exists() else ''}"
            time.sleep(0.05)

    try:
        wait_for(ALL)
        (node / CONFIG.lstrip("/")).write_text(CDI_OFF)
        wait_for([])
        (node / CONFIG.lstrip("/")).write_text(CDI_ON)
        wait_for(ALL)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert "engine files under" in err, err


def test_an_idle_node_is_not_answered_again(node):
    """The inputs asked after each probe are those polled since: nothing changed, no second probe."""
    import threading
    from functools import partial

    calls: list[float] = []
    stop = threading.Event()

    class Stop(Exception):
        pass

    def probe() -> dict:
        if stop.is_set():
            raise Stop()
        calls.append(time.monotonic())
        return _answer(node)

    def target() -> None:
        try:
            watch_module.watch(
                probe, WatchOptions(root=str(node), interval=600, expiry=1200, log=lambda message: None),
                Watching(inputs=partial(answer_inputs, root=str(node))),
            )  # fmt: skip
        except Stop:
            pass

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not calls:
        assert time.monotonic() < deadline, "no first probe"
        time.sleep(0.01)
    first = time.monotonic()
    while time.monotonic() - first < 3 * watch_module.POLL_S:  # a window of three polls, none may probe
        time.sleep(0.1)
    assert len(calls) == 1
    stop.set()
    (node / CONFIG.lstrip("/")).write_text(CDI_OFF)  # a change: the next probe ends the thread
    thread.join(timeout=60)
    assert not thread.is_alive() and len(calls) == 1
