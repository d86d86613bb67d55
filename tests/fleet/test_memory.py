"""A long-running watch on a node where a DRA driver writes a spec per claim: what the process
keeps is bounded by the spec dirs' current files, not by every spec seen since start-up, and a
dir with more specs than any fixed limit does not thrash the caches (each file parsed once)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cgpu.backends import cdi as cdi_backend
from cgpu.cdi import scan as scan_module
from cgpu.report import ReportBuilder
from tests.conftest import REPO
from tests.timing import asleep, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux paths and /proc")

HOST = REPO / "cdi-samples" / "hosts" / "nvidia-580"
CLAIM = """cdiVersion: 0.6.0
kind: k8s.gpu.nvidia.com/claim
devices:
  - name: {uid}
    containerEdits:
      env: [CLAIM_UID={uid}]
      deviceNodes: [{{path: /dev/nvidia0}}]
containerEdits:
  deviceNodes: [{{path: /dev/nvidiactl}}, {{path: /dev/nvidia-uvm}}]
"""


def _probe(specs: Path, memory: cdi_backend.Memory) -> dict:
    builder = ReportBuilder("cdi")
    cdi_backend.probe(builder, memory, spec_dirs=[str(specs)], root=str(HOST), engine="none")
    return builder.build()


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_500_claim_specs_come_and_go_and_nothing_of_them_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))
    specs = tmp_path / "cdi"
    specs.mkdir()
    live = 5
    memory = cdi_backend.new_memory()
    rss: dict[int, int] = {}
    for index in range(500):
        (specs / f"claim-{index}.yaml").write_text(CLAIM.format(uid=f"uid-{index:05d}"))
        if index >= live:
            (specs / f"claim-{index - live}.yaml").unlink()
        report = _probe(specs, memory)
        assert len(report["devices"]) == min(index + 1, live)
        if index + 1 in (100, 500):
            rss[index + 1] = _rss_kib()
    stats = memory.stats()  # the specs, their answers and risky edits: of the current files alone
    assert stats["files"] == stats["answers"] == stats["risky"] == live
    # 400 more claims seen, none kept: the process does not grow with history (allocator noise only)
    assert rss[500] - rss[100] < 4096, rss


def test_more_specs_than_the_caches_old_limits_are_each_parsed_once(tmp_path, monkeypatch, parses):
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))
    specs = tmp_path / "cdi"
    specs.mkdir()
    count = scan_module.PARSE_CACHE_SIZE * 3
    for index in range(count):
        (specs / f"claim-{index:04d}.yaml").write_text(CLAIM.format(uid=f"uid-{index:05d}"))
    memory = cdi_backend.new_memory()
    for _ in range(3):
        assert len(_probe(specs, memory)["devices"]) == count
    assert len(parses) == count  # the first probe parsed each file; the others read none again


def test_one_changed_claim_among_thousands_is_the_only_file_parsed_and_judged_again(tmp_path, monkeypatch, parses):
    from cgpu.backends.cdi import answer as answer_module

    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))
    specs = tmp_path / "cdi"
    specs.mkdir()
    count = 2000
    for index in range(count):
        (specs / f"claim-{index:04d}.yaml").write_text(CLAIM.format(uid=f"uid-{index:05d}"))
    judged: list[str] = []
    real_judge = answer_module.judge

    def counting_judge(view, kind):
        judged.append(kind)
        return real_judge(view, kind)

    monkeypatch.setattr(answer_module, "judge", counting_judge)
    memory = cdi_backend.new_memory()
    first = _probe(specs, memory)
    assert len(parses) == len(judged) == count
    parses.clear()
    judged.clear()
    (specs / "claim-0007.yaml").write_text(CLAIM.format(uid="uid-changed"))
    second = _probe(specs, memory)
    assert parses == [str(specs / "claim-0007.yaml")]
    assert len(judged) == 1  # the other 1,999 devices' answers are reused, not judged again
    names = [device["name"] for device in second["devices"]]
    assert len(names) == count and "k8s.gpu.nvidia.com/claim=uid-changed" in names
    assert "k8s.gpu.nvidia.com/claim=uid-00007" not in names
    # the reused answers are the ones a fresh judgement gives
    unchanged = [d for d in second["devices"] if d["name"] != "k8s.gpu.nvidia.com/claim=uid-changed"]
    assert unchanged == [d for d in first["devices"] if d["name"] != "k8s.gpu.nvidia.com/claim=uid-00007"]
    assert second["apis"] == first["apis"] and second["evidence"] == first["evidence"]
    remembered = [results for _, results in memory.reader.recalled("answers")]
    assert len(remembered) == count
    assert len({id(result[0]) for result in remembered}) == 1  # equal findings: one dict, the new one's too
    # the host reads replayed from the last probe are carried over once each, not once per probe
    reads = [memory.stats()["host_reads"]]
    for _ in range(3):
        _probe(specs, memory)
        reads.append(memory.stats()["host_reads"])
    assert len(set(reads)) == 1, reads


CLAIMS = 2000  # 18 times the kubelet's default maxPods (110): a node with a CDI spec per claim holds hundreds
REQUEST_KIB = 32 * 1024  # the DaemonSet's memory request (deploy/kubernetes/daemonset.yaml)
CHANGE_CPU_S = 1.0  # one changed claim spec among them, re-judged


def _deployed_env() -> dict[str, str]:
    """The environment the DaemonSet gives cgpu (its allocator among it): the figures are the deployed watch's."""
    from tests.fleet.test_deploy import _daemonset

    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item["value"] for item in container.get("env", [])}


class _Watch:
    """A real `cgpu watch` over a dir of claim specs, as deployed."""

    def __init__(self, tmp_path: Path, count: int) -> None:
        import os
        import subprocess

        self.specs, out = tmp_path / "specs", tmp_path / "out"
        self.specs.mkdir()
        out.mkdir()
        for index in range(count):
            self.write(index, f"uid-{index:05d}")
        self.answer = out / "answer.json"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cgpu", "watch", "--spec-dir", str(self.specs), "--root", str(HOST),
             "--engine", "none", "--answer-file", str(self.answer), "--interval", "3600"],
            cwd=REPO, env={**os.environ, **_deployed_env(), "CGPU_CACHE_DIR": str(out / "cache")},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def write(self, index: int, uid: str) -> None:
        (self.specs / f"claim-{index:05d}.yaml").write_text(CLAIM.format(uid=uid))

    def written(self) -> int:
        return self.answer.stat().st_mtime_ns if self.answer.exists() else 0

    def cpu_ticks(self) -> int:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    def settle(self, after: int) -> int:
        """Once an answer newer than `after` is written and the watch sleeps again (no CPU used
        over a tenth of a second: the collection and heap trim are done): its RSS in KiB."""
        wait_for(lambda: self.written() > after or self.proc.poll() is not None, within=600, what="watch's answer")
        assert self.proc.poll() is None, "watch ended"
        ticks: list[int] = []

        def settled() -> bool:
            ticks.append(self.cpu_ticks())
            return len(ticks) > 1 and ticks[-1] == ticks[-2] and asleep(self.proc.pid)

        wait_for(settled, within=600, what="watch asleep after its answer", every=0.1)
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.mark.slow
def test_a_watch_over_2000_claim_specs_stays_within_its_request_and_rejudges_a_change_quickly(tmp_path):
    import os

    watch = _Watch(tmp_path, CLAIMS)
    try:
        between = watch.settle(0)
        assert between < REQUEST_KIB, f"{between / 1024:.1f} MiB between probes with {CLAIMS} claim specs"
        before, ticks = watch.written(), watch.cpu_ticks()
        watch.write(CLAIMS // 2, "uid-changed")
        watch.settle(before)
        cpu = (watch.cpu_ticks() - ticks) / os.sysconf("SC_CLK_TCK")
        assert cpu < CHANGE_CPU_S, f"{cpu:.2f} s of CPU to answer one changed claim spec among {CLAIMS}"
        for index in range(5, CLAIMS):  # the claims end: what the watch keeps is that of the files left
            (watch.specs / f"claim-{index:05d}.yaml").unlink()
        after = watch.settle(watch.written())
        assert after < between, f"{after / 1024:.1f} MiB with 5 specs left, {between / 1024:.1f} with {CLAIMS}"
    finally:
        watch.stop()
