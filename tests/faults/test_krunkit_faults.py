"""krunkit backend faults at the CLI, with the krunkit stand-in: a read-only cache dir and a
full disk (real tmpfs mounts), a krunkit that hangs on `--version`. The answer still comes,
the cache trouble is a warning, and no half-written cache entry stays."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.faults.conftest import STOPS, fill, hung, mount_tmpfs, unmount
from tests.krunkit.test_machine import VENUS, probe_output

FAKE_KRUNKIT = Path(__file__).resolve().parents[1] / "krunkit" / "fake_krunkit.py"


@pytest.fixture
def krunkit(bin_dir) -> Path:
    path = bin_dir / "krunkit"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_KRUNKIT}" "$@"\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def disk(tmp_path) -> str:
    path = tmp_path / "probe-vm.raw"
    path.write_text(json.dumps({"behaviour": "ready", "probe": {"rc": 0, "out": probe_output(VENUS)}}))
    return str(path)


@pytest.fixture
def tmpfs(tmp_path):
    """mount(options) -> a fresh small tmpfs, unmounted after the test."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        mounted.append(mount_tmpfs(tmp_path / f"mnt{len(mounted)}", options))
        return mounted[-1]

    yield mount
    for point in mounted:
        unmount(point)


def _probe(cli, disk, cache: Path) -> tuple[int, dict]:
    code, out, _ = cli(
        "probe", "--backend", "krunkit", "--json", "--vm-image", disk, env={"CGPU_CACHE_DIR": str(cache)}, timeout=60
    )
    return code, json.loads(out)


def test_read_only_cache_dir_still_answers(cli, krunkit, disk, tmpfs):
    cache = tmpfs("ro,size=1m")
    code, report = _probe(cli, disk, cache)
    assert code == 0 and report["containers"] == ["vulkan"]
    warnings = [p for p in report["problems"] if p["severity"] == "warning"]
    assert any(p["source"].startswith(str(cache)) and "Read-only file system" in p["message"] for p in warnings)
    _logs_went_to_a_temp_folder(report)


def _logs_went_to_a_temp_folder(report: dict) -> None:
    """The VM's folder could not go into the cache: it went to a temp folder, which the report
    names (its logs are kept for the user, so the test removes it)."""
    [logs] = [
        p["source"] for p in report["problems"] if "logs (krunkit.log, console.log) are kept here" in p["message"]
    ]
    assert Path(logs).name.startswith("cgpu-krunkit-vm-")
    assert any(f"using {logs} instead" in p["message"] for p in report["problems"] if p["severity"] == "warning")
    shutil.rmtree(logs)


def test_full_disk_for_the_cache_still_answers_and_leaves_no_temp_file(cli, krunkit, disk, tmpfs):
    cache = tmpfs("size=256k")  # room, once freed, for the VM folder with the probe copied into its share
    fill(cache)
    filler = cache / "filler"
    code, report = _probe(cli, disk, cache)
    assert code == 0 and report["containers"] == ["vulkan"]
    assert any("No space left on device" in p["message"] for p in report["problems"] if p["severity"] == "warning")
    _logs_went_to_a_temp_folder(report)
    left = [p for p in cache.rglob("*") if p.suffix == ".tmp" or (p.suffix == ".json" and p.stat().st_size == 0)]
    assert left == [], "a half-written cache entry stayed"
    filler.unlink()
    code, report = _probe(cli, disk, cache)  # space again: the answer is stored and read back
    assert code == 0 and not any("cache" in p["message"] and p["severity"] == "warning" for p in report["problems"])


def test_krunkit_that_hangs_on_version(cli, bin_dir, disk):
    hung(bin_dir, "krunkit")
    code, out, _ = cli("probe", "--backend", "krunkit", "--json", "--vm-image", disk, "--timeout", "1", timeout=30)
    report = json.loads(out)
    assert code == 1 and report["containers"] == []
    assert any("no answer within 1 s" in p["message"] for p in report["problems"]), report["problems"]


def test_hung_podman_machine_is_stopped_at_the_timeout(cli, bin_dir, krunkit):
    hung(bin_dir, "podman")
    code, out, _ = cli("probe", "--backend", "krunkit", "--json", "--timeout", "1", timeout=30)
    report = json.loads(out)
    assert code == 1 and report["containers"] == []
    assert any("no answer within 1 s" in p["message"] for p in report["problems"]), report["problems"]


@pytest.mark.parametrize("signum, status, said", STOPS)
def test_ctrl_c_while_podman_machine_answers(cli, bin_dir, krunkit, signum, status, said):
    hung(bin_dir, "podman")
    code, out, err = cli.interrupt_when(
        lambda: cli.running("sleep 600"), "probe", "--backend", "krunkit", signum=signum
    )
    assert code == status and out == "" and said in err
