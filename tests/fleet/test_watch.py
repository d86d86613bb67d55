"""`cgpu watch` through the real CLI (and `watch()` in-process where a test must count probes):
changes are seen within 2 s with inotify and within one poll without it, readers never see a
partial file, SIGTERM ends it at once with nothing half-written, and bursts are coalesced."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cgpu.backends import Watching
from cgpu.fleet import watch as watch_module
from cgpu.fleet.watch import WatchOptions
from cgpu.node.files import TEMP_DIR
from tests.conftest import REPO, validate_report
from tests.timing import assert_within, interpreter_run, timed, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watch tests use Linux paths")

SAMPLES = REPO / "cdi-samples"
SPEC = SAMPLES / "nvidia-current" / "spec" / "nvidia.yaml"
COMPUTE_ONLY = next((SAMPLES / "nvidia-compute-only" / "spec").glob("*.yaml"))
NVIDIA_HOST = SAMPLES / "hosts" / "nvidia-580"


@pytest.fixture
def node(tmp_path):
    """A spec dir, a private copy of a host root (so its driver version can change) and an output dir."""
    etc, out = tmp_path / "etc", tmp_path / "out"
    etc.mkdir()
    out.mkdir()
    host = tmp_path / "host"
    shutil.copytree(NVIDIA_HOST, host, symlinks=True)
    return etc, host, out


class Watcher:
    """A running `cgpu watch` and a reader that polls its files meanwhile, as an agent would."""

    def __init__(self, etc: Path, host: Path, out: Path, *extra: str) -> None:
        self.answer, self.nfd, self.out = out / "answer.json", out / "cgpu", out
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cgpu", "watch", "--spec-dir", str(etc), "--root", str(host), "--engine", "none",
             "--answer-file", str(self.answer), "--nfd-file", str(self.nfd), "--interval", "120", *extra],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.partial: list[str] = []
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read_files, daemon=True)
        self._reader.start()

    def _read_files(self) -> None:
        while not self._stop.is_set():
            for path in (self.answer, self.nfd):
                try:
                    text = path.read_text()
                except FileNotFoundError:
                    continue
                if path == self.answer:
                    try:
                        json.loads(text)
                    except ValueError:
                        self.partial.append(text)
                elif not (text.endswith("\n") and "# +expiry-time=" in text and "/format=2" in text):
                    self.partial.append(text)

    def containers(self) -> list[str] | None:
        try:
            return json.loads(self.answer.read_text())["containers"]
        except (FileNotFoundError, ValueError):
            return None

    def wait_for(self, containers: list[str], within: float) -> float:
        start = time.monotonic()
        while time.monotonic() - start < within:
            if self.containers() == containers:
                return time.monotonic() - start
            time.sleep(0.02)
        raise AssertionError(f"containers {self.containers()} after {within} s, expected {containers}")

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, float, str]:
        sent = time.monotonic()
        self.proc.send_signal(signum)
        try:
            _, err = self.proc.communicate(timeout=10)
        finally:
            self._stop.set()
            self._reader.join()
        return self.proc.returncode, time.monotonic() - sent, err

    def leftovers(self) -> list[str]:
        """Temporary files: hidden ones beside the outputs, and any in the private temporary dir."""
        hidden = [name for name in os.listdir(self.out) if name.startswith(".") and name != TEMP_DIR]
        private = self.out / TEMP_DIR
        return hidden + (os.listdir(private) if private.is_dir() else [])


@pytest.fixture
def watcher(node):
    started: list[Watcher] = []

    def start(*extra: str) -> Watcher:
        started.append(Watcher(*node, *extra))
        return started[-1]

    yield start
    for running in started:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait()


def _probe_once(etc: Path, host: Path) -> float:
    """Seconds of one `cgpu probe` of the same node here and now: the baseline of how soon a busy
    host can have the new answer (a reprobe in watch is less: no interpreter to start)."""
    argv = [sys.executable, "-m", "cgpu", "probe", "--backend", "cdi", "--json", "--spec-dir", str(etc),
            "--root", str(host), "--engine", "none"]  # fmt: skip
    return timed(lambda: subprocess.run(argv, cwd=REPO, capture_output=True, timeout=600))[1]


def _soon(running: Watcher, containers: list[str], node: tuple[Path, Path, Path], limit: float = 0) -> None:
    """The answer becomes `containers` within 2 s (past `limit`), or twice a probe's time here."""
    took = running.wait_for(containers, within=120)
    assert_within(took, limit, lambda: _probe_once(*node[:2]), f"the answer {containers}")


def _stops_at_once(running: Watcher) -> str:
    """SIGTERM: exit 143 within 1 s, or twice an interpreter's start and end here; its stderr."""
    code, took, err = running.stop()
    assert code == 143, err
    assert_within(took, 0, interpreter_run, "stopping on SIGTERM", promise=1)
    return err


def test_spec_changes_reach_the_answer_within_two_seconds(node, watcher):
    etc, _, _ = node
    running = watcher()
    running.wait_for([], within=120)
    shutil.copy(SPEC, etc / "nvidia.yaml")  # added
    _soon(running, ["cuda", "vulkan", "opencl"], node)
    (etc / "nvidia.yaml").write_bytes(COMPUTE_ONLY.read_bytes())  # edited
    _soon(running, ["cuda"], node)
    (etc / "nvidia.yaml").unlink()  # removed
    _soon(running, [], node)
    err = _stops_at_once(running)
    assert running.partial == [] and running.leftovers() == []
    validate_report(running.answer.read_text())
    assert "containers get: cuda, vulkan, opencl" in err and "containers get: cuda\n" in err


def test_a_driver_version_change_under_the_root_is_seen(node, watcher):
    etc, host, _ = node
    shutil.copy(SPEC, etc / "nvidia.yaml")
    running = watcher()
    running.wait_for(["cuda", "vulkan", "opencl"], within=120)
    version = host / "proc" / "driver" / "nvidia" / "version"
    # The kernel module moves on while the spec and libraries stay 580: nothing works until they agree.
    version.write_text(version.read_text().replace("580.82.07", "590.10.01"))  # procfs: no inotify, polled
    _soon(running, [], node, limit=watch_module.POLL_S)
    assert running.stop()[0] == 143
    assert running.partial == []


@pytest.mark.parametrize("delay", [0.0, 0.15, 0.25, 0.35])
def test_sigterm_during_a_reprobe_exits_143_at_once_with_nothing_half_written(node, watcher, delay):
    etc, _, _ = node
    running = watcher()
    running.wait_for([], within=120)
    for index in range(20):  # a bigger node: the probe after the change takes a while
        (etc / f"nvidia-{index}.yaml").write_text(
            SPEC.read_text().replace("kind: nvidia.com/gpu", f"kind: n{index}.com/gpu")
        )
    time.sleep(delay)  # the moment of the signal, the parameter under test
    err = _stops_at_once(running)
    assert "Traceback" not in err
    assert running.partial == [] and running.leftovers() == []
    validate_report(running.answer.read_text())


def test_usage_errors_and_missing_outputs(run_cli, tmp_path):
    code, _, err = run_cli("watch", "--spec-dir", str(tmp_path))
    assert code == 2 and "--answer-file, --nfd-file or both" in err
    code, _, err = run_cli("watch", "--answer-file", str(tmp_path / "a.json"), "--device", "nvidia.com/gpu")
    assert code == 2 and "Traceback" not in err
    assert not (tmp_path / "a.json").exists()


class _Stop(Exception):
    pass


def _run_in_thread(probe, etc: Path, host: Path, interval: float) -> threading.Thread:
    def target() -> None:
        try:
            watch_module.watch(
                probe, WatchOptions(spec_dirs=[str(etc)], root=str(host), interval=interval, expiry=60,
                                    log=lambda message: None),
            )  # fmt: skip
        except _Stop:
            pass

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def _counting_probe(stop: threading.Event):
    calls: list[float] = []

    def probe() -> dict:
        if stop.is_set():
            raise _Stop()
        calls.append(time.monotonic())
        return {"containers": [], "apis": {api: {"state": "absent"} for api in watch_module.API_ORDER}}

    return probe, calls


def test_a_burst_of_a_hundred_changes_costs_a_bounded_number_of_probes(node):
    etc, host, _ = node
    stop = threading.Event()
    probe, calls = _counting_probe(stop)
    thread = _run_in_thread(probe, etc, host, interval=4)
    wait_for(lambda: calls, within=60, what="the first probe", every=0.01)
    for index in range(100):
        (etc / f"spec-{index % 10}.yaml").write_text(f"# change {index}\n")
        time.sleep(0.003)  # a burst spread over about 0.3 s
    wait_for(lambda: len(calls) > 1, within=60, what="a probe after the burst")
    # then a window in which any further probe of this burst would come (an absence needs one)
    time.sleep(watch_module.BURST_S + watch_module.QUIET_S + 0.5)
    reprobes = len(calls) - 1
    stop.set()
    thread.join(timeout=10)
    assert 1 <= reprobes <= 3, reprobes


def test_without_inotify_polling_sees_a_change_within_one_poll(node, monkeypatch):
    monkeypatch.setitem(sys.modules, "inotify_simple", None)  # import fails: polling alone
    assert not watch_module.Wakeup([]).uses_inotify
    etc, host, _ = node
    stop = threading.Event()
    probe, calls = _counting_probe(stop)
    thread = _run_in_thread(probe, etc, host, interval=60)
    wait_for(lambda: calls, within=60, what="the first probe", every=0.01)
    changed = time.monotonic()
    (etc / "new.yaml").write_text("# new\n")
    wait_for(lambda: len(calls) >= 2, within=60, what="a probe after the change", every=0.02)
    stop.set()
    assert len(calls) == 2
    seen = calls[1] - changed
    assert_within(seen, watch_module.POLL_S, interpreter_run, "polling for a change", promise=0.5)
    (etc / "new.yaml").unlink()  # wakes the watcher, whose next probe stops it
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_idle_watch_uses_next_to_no_cpu(node, watcher):
    running = watcher()
    running.wait_for([], within=120)
    pid = running.proc.pid
    before = _cpu_seconds(pid)
    time.sleep(3)  # the window over which its CPU time is counted (CPU seconds, not wall: load cannot inflate them)
    assert _cpu_seconds(pid) - before < 0.1
    running.stop()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (["--interval", "0.01"], "--interval 0.01 is under 1 second"),
        (["--interval", "60", "--expiry", "30"], "--expiry 30 is shorter than --interval 60"),
        (["--expiry", "100"], "--expiry 100 is shorter than --interval 300"),
    ],
)
def test_options_that_make_no_sense_are_refused_with_the_reason(run_cli, tmp_path, options, reason):
    code, _, err = run_cli("watch", "--spec-dir", str(tmp_path), "--answer-file", str(tmp_path / "a.json"), *options)
    assert code == 2 and reason in err, err
    assert not (tmp_path / "a.json").exists()


def test_a_spec_dir_created_after_start_up_is_put_under_inotify(tmp_path):
    pytest.importorskip("inotify_simple", reason="inotify_simple is a Linux dependency")
    later = tmp_path / "later"
    wakeup = watch_module.Wakeup([str(later)], str(tmp_path))
    try:
        assert wakeup.uses_inotify and wakeup.watched() == []
        assert "not there yet" in wakeup.describe()
        wakeup.snapshot()
        assert not wakeup.poll()
        later.mkdir()
        assert wakeup.poll() and wakeup.watched() == [str(later)]  # a change, and watched from now on
        assert wakeup.newly_watched == [str(later)] and "(inotify)" in wakeup.describe()
        (later / "nvidia.yaml").write_text("# new\n")
        assert wakeup.wait(5)  # an inotify event, not a poll
        later.rename(tmp_path / "gone")  # moved away: off inotify, looked for again
        wakeup.wait(5)
        assert wakeup.watched() == []
        later.mkdir()
        assert wakeup.poll() and wakeup.watched() == [str(later)]
    finally:
        wakeup.close()


def test_the_log_says_when_a_spec_dir_appears_and_its_changes_reach_the_answer(node, tmp_path):
    _, host, out = node
    later = tmp_path / "later"
    answer = out / "answer.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu", "watch", "--spec-dir", str(later), "--root", str(host), "--engine", "none",
         "--answer-file", str(answer), "--interval", "120"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not answer.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        later.mkdir()
        shutil.copy(SPEC, later / "nvidia.yaml")
        while json.loads(answer.read_text())["containers"] != ["cuda", "vulkan", "opencl"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert f"{later} (not there yet" in err and f"{later} is there now: watching it (inotify)" in err, err


def test_without_spec_dirs_watch_follows_the_judging_engines_dirs_under_the_root(tmp_path):
    pytest.importorskip("inotify_simple", reason="inotify_simple is a Linux dependency")
    from cgpu.backends.cdi.inputs import answer_inputs

    report = {"engines": [{"name": "containerd", "judged": True, "spec_dirs": ["/etc/cdi", "/opt/cdi"]}]}
    assert answer_inputs(report, root=str(tmp_path), engine="none").spec_dirs == [
        str(tmp_path / "etc/cdi"),
        str(tmp_path / "opt/cdi"),
    ]
    before = answer_inputs(None, root=str(tmp_path), engine="containerd@2.1.4")  # until a report says
    assert before.spec_dirs == [str(tmp_path / "etc/cdi"), str(tmp_path / "var/run/cdi")]
    # no engine judged: the probe read the CDI defaults inside the root (the node's), and so they are watched
    assert answer_inputs({"engines": []}, root=str(tmp_path), engine="none").spec_dirs == [
        str(tmp_path / "etc/cdi"),
        str(tmp_path / "var/run/cdi"),
    ]
    assert answer_inputs(None, root="/", engine="none").spec_dirs == ["/etc/cdi", "/var/run/cdi"]
    (tmp_path / "etc/cdi").mkdir(parents=True)
    (tmp_path / "opt/cdi").mkdir(parents=True)
    wakeup = watch_module.Wakeup(before.spec_dirs, str(tmp_path))
    try:
        assert wakeup.watched() == [str(tmp_path / "etc/cdi")]
        assert wakeup.set_inputs(answer_inputs(report, root=str(tmp_path), engine="none"))
        assert wakeup.watched() == [str(tmp_path / "etc/cdi"), str(tmp_path / "opt/cdi")]
        (tmp_path / "opt/cdi/dra.yaml").write_text("# a claim\n")
        assert wakeup.wait(5)
    finally:
        wakeup.close()


def test_under_root_without_spec_dir_the_nodes_engine_dirs_are_watched(node, tmp_path):
    """The node's engine reads its spec dirs inside the root: a spec added there reaches the answer."""
    from tests.cdi_backend.engine_files import upstream_containerd

    _, host, out = node
    (host / "usr/bin").mkdir(parents=True, exist_ok=True)
    (host / "usr/bin/containerd").write_bytes(upstream_containerd("v2.1.4", "v1.0.1"))  # CDI on by default
    (host / "etc/cdi").mkdir(parents=True, exist_ok=True)
    answer = out / "answer.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu", "watch", "--root", str(host), "--answer-file", str(answer), "--interval", "120"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CGPU_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    try:

        def containers() -> list[str] | None:
            try:
                return json.loads(answer.read_text())["containers"]
            except (FileNotFoundError, ValueError):
                return None

        def wait_for(wanted: list[str], within: float) -> float:
            start = time.monotonic()
            while time.monotonic() - start < within:
                if containers() == wanted:
                    return time.monotonic() - start
                time.sleep(0.02)
            raise AssertionError(f"containers {containers()} after {within} s, expected {wanted}")

        wait_for([], within=10)
        shutil.copy(SPEC, host / "etc/cdi/nvidia.yaml")
        assert wait_for(["cuda", "vulkan", "opencl"], within=2) < 2
        report = json.loads(answer.read_text())
        assert [e["name"] for e in report["engines"] if e["judged"]] == ["containerd"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)


def test_a_write_that_fails_never_ends_watch_and_is_retried_at_the_next_wake_up(node, tmp_path):
    etc, host, out = node
    features = tmp_path / "features.d"  # missing at start, as before NFD made it
    answer = out / "answer.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu", "watch", "--spec-dir", str(etc), "--root", str(host), "--engine", "none",
         "--answer-file", str(answer), "--nfd-file", str(features / "cgpu"), "--interval", "120"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not answer.exists():  # the other file is written
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        features.mkdir()
        made = time.monotonic()
        while not (features / "cgpu").exists():  # no spec change: the retry at the next wake-up writes it
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() - made < watch_module.POLL_S + 30
            time.sleep(0.02)
        shutil.rmtree(features)  # removed under it: the next write fails, watch goes on
        shutil.copy(SPEC, etc / "nvidia.yaml")
        while json.loads(answer.read_text())["containers"] != ["cuda", "vulkan", "opencl"]:
            assert proc.poll() is None and time.monotonic() < deadline + 60
            time.sleep(0.05)
        assert proc.poll() is None
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    failures = [line for line in err.splitlines() if "cannot write the NFD feature file" in line]
    assert len(failures) == 2, err  # once at start, once after the removal: not at every retry
    assert all(f"its directory {features} does not exist" in line for line in failures)
    assert f"wrote the NFD feature file {features / 'cgpu'} again" in err
    assert "Traceback" not in err and ".tmp" not in err


def test_two_spec_dirs_that_are_one_dir_are_watched_once_and_do_not_wake_it(tmp_path):
    pytest.importorskip("inotify_simple", reason="inotify_simple is a Linux dependency")
    (tmp_path / "run/cdi").mkdir(parents=True)
    (tmp_path / "var").mkdir()
    (tmp_path / "var/run").symlink_to(tmp_path / "run")  # /var/run -> /run, as on most hosts
    dirs = [str(tmp_path / "var/run/cdi"), str(tmp_path / "run/cdi")]
    wakeup = watch_module.Wakeup(dirs, str(tmp_path))
    try:
        assert wakeup.watched() == dirs
        wakeup.snapshot()
        assert not wakeup.poll() and not wakeup.poll()  # no change: no probe every poll
        (tmp_path / "run/cdi/a.yaml").write_text("# a\n")
        assert wakeup.wait(5)
        assert wakeup.set_spec_dirs(dirs[1:]) and wakeup.watched() == dirs[1:]
        (tmp_path / "run/cdi/b.yaml").write_text("# b\n")
        assert wakeup.wait(5)  # the shared watch stayed for the dir still wanted
    finally:
        wakeup.close()


class _Report(dict):  # a dict that a weak reference can follow
    pass


def test_the_backends_tidying_runs_after_each_probe_once_its_report_is_gone(node):
    import weakref

    etc, host, _ = node
    answer = etc.parent / "answer.json"
    reports: list[weakref.ref] = []
    seen: list[tuple[bool, bool]] = []  # at each tidying: (the last report collected, its answer written)

    def probe() -> dict:
        report = _Report(containers=[], apis={api: {"state": "absent"} for api in watch_module.API_ORDER})
        reports.append(weakref.ref(report))
        return report

    def between() -> None:
        seen.append((reports[-1]() is None, answer.exists()))
        answer.unlink()
        (etc / "next.yaml").write_text(f"# probe {len(seen)}\n")  # a change: the next probe at once

    watch_module.watch(
        probe, WatchOptions(spec_dirs=[str(etc)], root=str(host), answer_file=str(answer), interval=60, expiry=180,
                            log=lambda message: None, rounds=3),
        Watching(tidy=between),
    )  # fmt: skip
    assert seen == [(True, True)] * 3


def test_watch_asks_the_backend_for_what_it_offers_by_name(monkeypatch, tmp_path):
    from cgpu import cli

    given: dict = {}
    monkeypatch.setattr(watch_module, "watch", lambda probe, options, backend: given.update(backend=backend))
    argv = ["watch", "--backend", "cdi", "--spec-dir", str(tmp_path), "--answer-file", str(tmp_path / "a.json")]
    assert cli.main(argv) == 0
    assert given["backend"].inputs(None).spec_dirs == [str(tmp_path)]  # the cdi backend's answer_inputs
    assert given["backend"].tidy is None  # it keeps nothing that needs tidying between probes
