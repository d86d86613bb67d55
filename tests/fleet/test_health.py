"""Health of a running watch: `--check-age` (the DaemonSet's liveness and readiness probes) and the
node_exporter textfile written with `--metrics-file`, read back as Prometheus' text format says."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux paths")

SAMPLES = REPO / "cdi-samples"
# Prometheus text exposition format 0.0.4: `name{label="value",...} value`, HELP and TYPE comments
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})? (\S+)$')
_COMMENT = re.compile(r"^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$")


def parse_textfile(text: str) -> dict[str, float]:
    assert text.endswith("\n")
    samples: dict[str, float] = {}
    typed: set[str] = set()
    for line in text.splitlines():
        comment = _COMMENT.match(line)
        if comment:
            if comment.group(1) == "TYPE":
                assert comment.group(3) in ("gauge", "counter") and comment.group(2) not in typed
                typed.add(comment.group(2))
            continue
        match = _SAMPLE.match(line)
        assert match, line
        assert match.group(1) in typed, f"{match.group(1)} has no TYPE line before it"
        key = line.rsplit(" ", 1)[0]
        assert key not in samples, f"{key} twice"
        samples[key] = float(match.group(4))
    return samples


def test_check_age_is_the_liveness_and_readiness_signal(run_cli, tmp_path):
    answer = tmp_path / "answer.json"
    code, _, err = run_cli("watch", "--answer-file", str(answer), "--check-age", "60")
    assert code == 1 and "not written yet" in err  # not ready before the first answer
    answer.write_text("{}\n")
    assert run_cli("watch", "--answer-file", str(answer), "--check-age", "60")[0] == 0
    old = time.time() - 3600
    os.utime(answer, (old, old))
    code, _, err = run_cli("watch", "--answer-file", str(answer), "--check-age", "60")
    # 3600 s, or a second or two more on a busy host between the utime and the check
    assert code == 1 and re.search(r"last written 360[0-5] s ago \(more than 60 s\)", err), err
    assert "Traceback" not in err


def test_the_metrics_file_is_a_node_exporter_textfile_written_like_the_others(tmp_path):
    etc, out = tmp_path / "etc", tmp_path / "textfile"
    etc.mkdir()
    out.mkdir()
    shutil.copy(SAMPLES / "nvidia-current" / "spec" / "nvidia.yaml", etc / "nvidia.yaml")
    metrics, answer = out / "cgpu.prom", tmp_path / "answer.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu", "watch", "--spec-dir", str(etc), "--root", str(SAMPLES / "hosts" / "nvidia-580"),
         "--engine", "none", "--answer-file", str(answer), "--metrics-file", str(metrics), "--interval", "60"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not metrics.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        samples = parse_textfile(metrics.read_text())
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    report = json.loads(answer.read_text())
    for api in ("cuda", "vulkan", "opencl"):
        assert samples[f'cgpu_api_state{{api="{api}",state="provided"}}'] == 1
        assert samples[f'cgpu_api_state{{api="{api}",state="absent"}}'] == 0
    assert samples['cgpu_api_state{api="rocm",state="absent"}'] == 1
    assert samples["cgpu_devices"] == 1
    errors = sum(1 for p in report["problems"] if p["severity"] == "error")
    assert samples['cgpu_problems{severity="error"}'] == errors
    assert abs(samples["cgpu_last_probe_timestamp_seconds"] - time.time()) < 120
    assert 0 < samples["cgpu_last_probe_duration_seconds"] < 60
    assert samples['cgpu_write_ok{file="answer"}'] == 1
    assert os.listdir(out) == ["cgpu.prom"] or sorted(os.listdir(out)) == [".cgpu-tmp", "cgpu.prom"]
    assert os.stat(metrics).st_mode & 0o777 == 0o644  # node_exporter runs as another user


def test_check_age_takes_a_file_dated_in_the_future_as_stale(run_cli, tmp_path):
    answer = tmp_path / "answer.json"
    answer.write_text("{}\n")
    future = time.time() + 3600
    os.utime(answer, (future, future))
    code, _, err = run_cli("watch", "--answer-file", str(answer), "--check-age", "60")
    # its age says nothing of when the watch last wrote it: not alive, however fresh it looks
    assert code == 1 and re.search(r"dated 3\d{3} s in the future: the clock was set back", err), err
    soon = time.time() + 1  # a file system clock a second ahead is still just written
    os.utime(answer, (soon, soon))
    assert run_cli("watch", "--answer-file", str(answer), "--check-age", "60")[0] == 0
