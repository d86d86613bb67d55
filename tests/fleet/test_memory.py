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


def _probe(specs: Path, cache: Path) -> dict:
    builder = ReportBuilder("cdi")
    cdi_backend.probe(builder, spec_dirs=[str(specs)], root=str(HOST), engine="none")
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
    rss: dict[int, int] = {}
    for index in range(500):
        (specs / f"claim-{index}.yaml").write_text(CLAIM.format(uid=f"uid-{index:05d}"))
        if index >= live:
            (specs / f"claim-{index - live}.yaml").unlink()
        report = _probe(specs, tmp_path)
        assert len(report["devices"]) == min(index + 1, live)
        if index + 1 in (100, 500):
            rss[index + 1] = _rss_kib()
    assert len(scan_module._parse_cache) == live
    assert len(cdi_backend._RISKY) <= live  # the specs' edits (a device's are kept with its answer)
    assert len(cdi_backend._REMEMBERED) == 1
    # 400 more claims seen, none kept: the process does not grow with history (allocator noise only)
    assert rss[500] - rss[100] < 4096, rss


def test_more_specs_than_the_caches_old_limits_are_each_parsed_once(tmp_path, monkeypatch, parses):
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))
    specs = tmp_path / "cdi"
    specs.mkdir()
    count = scan_module.PARSE_CACHE_SIZE * 3
    for index in range(count):
        (specs / f"claim-{index:04d}.yaml").write_text(CLAIM.format(uid=f"uid-{index:05d}"))
    scan_module.clear_parse_cache()
    for _ in range(3):
        assert len(_probe(specs, tmp_path)["devices"]) == count
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
    scan_module.clear_parse_cache()
    first = _probe(specs, tmp_path)
    assert len(parses) == len(judged) == count
    parses.clear()
    judged.clear()
    (specs / "claim-0007.yaml").write_text(CLAIM.format(uid="uid-changed"))
    second = _probe(specs, tmp_path)
    assert parses == [str(specs / "claim-0007.yaml")]
    assert len(judged) == 1  # the other 1,999 devices' answers are reused, not judged again
    names = [device["name"] for device in second["devices"]]
    assert len(names) == count and "k8s.gpu.nvidia.com/claim=uid-changed" in names
    assert "k8s.gpu.nvidia.com/claim=uid-00007" not in names
    # the reused answers are the ones a fresh judgement gives
    unchanged = [d for d in second["devices"] if d["name"] != "k8s.gpu.nvidia.com/claim=uid-changed"]
    assert unchanged == [d for d in first["devices"] if d["name"] != "k8s.gpu.nvidia.com/claim=uid-00007"]
    assert second["apis"] == first["apis"] and second["evidence"] == first["evidence"]
    remembered = next(iter(cdi_backend._REMEMBERED.values())).results
    assert len({id(result[0]) for result in remembered.values()}) == 1  # equal findings: one dict, the new one's too
    # the host reads replayed from the last probe are carried over once each, not once per probe
    reads = [len(next(iter(cdi_backend._REMEMBERED.values())).trace.reads)]
    for _ in range(3):
        _probe(specs, tmp_path)
        reads.append(len(next(iter(cdi_backend._REMEMBERED.values())).trace.reads))
    assert len(set(reads)) == 1, reads


PER_SPEC_KIB = 1.2  # a claim spec's share of a deployed watch's RSS: 0.84 KiB measured; 2.8 before (3.7, 6.6)


def _deployed_env() -> dict[str, str]:
    """The environment the DaemonSet gives cgpu (its allocator among it): the figures are the deployed watch's."""
    from tests.fleet.test_deploy import _daemonset

    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item["value"] for item in container.get("env", [])}


def _watch_rss_kib(tmp_path: Path, count: int) -> int:
    """The RSS of a real `cgpu watch` over `count` claim specs once its first answer is written
    and it sleeps (no CPU used over a tenth of a second)."""
    import os
    import subprocess

    specs, out = tmp_path / f"specs-{count}", tmp_path / f"out-{count}"
    specs.mkdir()
    out.mkdir()
    for index in range(count):
        (specs / f"claim-{index:05d}.yaml").write_text(CLAIM.format(uid=f"uid-{index:05d}"))
    answer = out / "answer.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu", "watch", "--spec-dir", str(specs), "--root", str(HOST), "--engine", "none",
         "--answer-file", str(answer), "--interval", "3600"],
        cwd=REPO, env={**os.environ, **_deployed_env(), "CGPU_CACHE_DIR": str(out / "cache")},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: answer.exists() or proc.poll() is not None, within=600, what="watch's first answer")
        assert proc.poll() is None, "watch ended before its first answer"
        stat = Path(f"/proc/{proc.pid}/stat")
        ticks: list[int] = []  # user + system CPU, at each look

        def settled() -> bool:  # asleep, no CPU used since the last look: the collection and heap trim are done
            fields = stat.read_text().rsplit(")", 1)[1].split()
            ticks.append(int(fields[11]) + int(fields[12]))
            return len(ticks) > 1 and ticks[-1] == ticks[-2] and asleep(proc.pid)

        wait_for(settled, within=600, what="watch asleep after its first answer", every=0.1)
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_a_watch_over_thousands_of_claim_specs_keeps_a_few_kib_of_each(tmp_path):
    handful = _watch_rss_kib(tmp_path, 5)
    many = _watch_rss_kib(tmp_path, 3000)
    per_spec = (many - handful) / (3000 - 5)
    assert per_spec < PER_SPEC_KIB, f"{per_spec:.1f} KiB per spec ({handful} KiB with 5 specs, {many} with 3000)"
