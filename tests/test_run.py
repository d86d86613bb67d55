"""run.Helper, the one way cgpu starts, waits on and stops a long-lived helper process."""

from __future__ import annotations

import os
import sys
import time

import pytest

from cgpu.run import HELPER_OUTPUT_TAIL, CommandTimeoutError, Helper, HelperExitedError
from tests.timing import assert_within, interpreter_run, wait_for

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups and sh are POSIX")


def _ended(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def _alive(pid: int) -> bool:
    """Still running 30 s after a SIGKILL (which lands asynchronously, later on a busy host)."""
    try:
        wait_for(lambda: _ended(pid), within=30, what=f"process {pid} to end")
    except AssertionError:
        return True
    return False


def _stubborn(tmp_path) -> list[str]:
    """A helper that ignores SIGTERM and leaves a child (ignoring it too) in its group;
    the child's pid goes to child.pid."""
    script = tmp_path / "stubborn.sh"
    script.write_text(
        "trap '' TERM\n"
        f"sh -c 'trap \"\" TERM; echo $$ > {tmp_path}/child.pid; exec sleep 600' &\n"
        "echo started\nwhile :; do sleep 1; done\n"
    )
    return ["sh", str(script)]


def _child(tmp_path) -> int:
    pid = tmp_path / "child.pid"
    return int(wait_for(lambda: pid.exists() and pid.read_text().strip(), within=60, what="the helper's child"))


def test_stop_ends_the_whole_group_within_the_grace(tmp_path):
    helper = Helper(_stubborn(tmp_path), stop_grace=0.5)
    with helper:
        helper.wait_for(lambda: b"started" in helper.output() or None, timeout=10)
        child = _child(tmp_path)
        started = time.monotonic()
    # SIGTERM ignored: killed after the 0.5 s grace
    assert_within(time.monotonic() - started, 0.5, interpreter_run, "stopping a helper that ignores SIGTERM")
    assert not _alive(helper.pid) and not _alive(child)
    helper.stop()  # again: nothing to do, no error


def test_ctrl_c_kills_it_at_once(tmp_path):
    helper = Helper(_stubborn(tmp_path), stop_grace=60)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), helper:
        helper.wait_for(lambda: b"started" in helper.output() or None, timeout=10)
        child = _child(tmp_path)
        raise KeyboardInterrupt
    assert_within(time.monotonic() - started, 0, interpreter_run, "Ctrl-C: killed at once, not after the 60 s grace")
    assert not _alive(helper.pid) and not _alive(child)


def test_graceful_stop_asks_its_own_way(tmp_path):
    asked = []
    helper = Helper(["sh", "-c", "sleep 600"], stop_grace=5, ask_to_stop=lambda: asked.append(True))
    with helper:
        pass
    assert asked == [True] and not _alive(helper.pid)


def test_output_keeps_only_the_tail(tmp_path):
    helper = Helper(
        [
            sys.executable,
            "-c",
            f"import sys; sys.stdout.write('x' * {4 * HELPER_OUTPUT_TAIL}); print('END', flush=True)",
        ],
        stop_grace=1,
    )
    with pytest.raises(HelperExitedError), helper:
        helper.wait_for(lambda: None, timeout=20)
    said = helper.output()
    assert len(said) == HELPER_OUTPUT_TAIL and said.endswith(b"END\n")


def test_wait_for_tells_an_exit_from_a_timeout(tmp_path):
    with Helper(["sh", "-c", "echo oops; exit 3"], stop_grace=1) as helper:
        with pytest.raises(HelperExitedError) as exited:
            helper.wait_for(lambda: None, timeout=20)
    assert exited.value.returncode == 3 and b"oops" in helper.output()
    with Helper(["sleep", "600"], stop_grace=1) as helper:
        started = time.monotonic()
        with pytest.raises(CommandTimeoutError):
            helper.wait_for(lambda: None, timeout=0.5)
        assert_within(time.monotonic() - started, 0.5, interpreter_run, "wait_for with a timeout of 0.5 s")


def test_an_answer_given_just_before_the_exit_counts(tmp_path):
    answer = tmp_path / "answer"
    with Helper(["sh", "-c", f"echo 42 > {answer}"], stop_grace=1) as helper:
        wait_for(lambda: helper.returncode is not None, within=60, what="the helper to end", every=0.01)
        looks = []

        def ready() -> str | None:
            looks.append(1)
            return answer.read_text().strip() if len(looks) > 1 and answer.exists() else None

        assert helper.wait_for(ready, timeout=5) == "42"


def test_a_missing_program_is_a_command_error():
    from cgpu.run import CommandNotFoundError

    with pytest.raises(CommandNotFoundError, match="not found"):
        Helper([os.path.join("/nonexistent", "helper")], stop_grace=1).start()
