"""krunkit backend faults at the CLI, with the krunkit stand-in: a read-only cache dir and a
full disk (real tmpfs mounts), a krunkit that hangs on `--version`. The answer still comes,
the cache trouble is a warning, and no half-written cache entry stays."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.faults.conftest import STOPS, fill, hung, mount_tmpfs, need_root, unmount
from tests.krunkit.test_machine import LLVMPIPE, VENUS, probe_output
from tests.timing import allowed, timed

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
    """mount(options) -> a fresh small tmpfs, unmounted after the test; mode 700, as a cache
    root must be (a tmpfs is 1777 by default, which cgpu refuses to cache in)."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        mounted.append(mount_tmpfs(tmp_path / f"mnt{len(mounted)}", f"mode=0700,{options}"))
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


# --- another user against the answer cache (issue: caches that trust only their owner) ------
# "Another user" is uid 65534 (nobody): root plants what nobody could have, had the folder been
# shared. Each attack first gets a real answer (no Vulkan: llvmpipe only), then forges it.

OTHER_UID = 65534


@pytest.fixture
def plain_disk(tmp_path) -> str:
    path = tmp_path / "llvmpipe-vm.raw"
    path.write_text(json.dumps({"behaviour": "ready", "probe": {"rc": 0, "out": probe_output(LLVMPIPE)}}))
    return str(path)


def _first_run(cli, disk: str) -> tuple[Path, Path, Path]:
    """One real run: (cache root, the answer entry, the VM folder)."""
    need_root("files of another user are planted with chown")
    cache = Path(cli.env["CGPU_CACHE_DIR"])
    code, report = _probe(cli, disk, cache)
    assert code == 0 and report["containers"] == [], report["problems"]
    (entry,) = (cache / "krunkit").glob("*.json")
    (folder,) = (cache / "krunkit-vm").iterdir()
    return cache, entry, folder


def _forge(entry: Path) -> None:
    """Rewrite the entry to say Vulkan is provided, as another user would."""
    stored = json.loads(entry.read_text())
    vulkan = stored["value"]["apis"]["vulkan"]
    vulkan.update(state="provided", evidence="provided: FORGED by another user")
    vulkan["devices"] = [{"name": "Forged GPU", "api": "vulkan", "counted": True, "details": {"reason": ""}}]
    entry.write_text(json.dumps(stored))


def _warned(report: dict, text: str) -> bool:
    return any(text in p["message"] for p in report["problems"] if p["severity"] == "warning")


@pytest.mark.parametrize(
    "plant",
    [
        pytest.param(lambda cache, entry: os.chown(entry, OTHER_UID, OTHER_UID), id="entry-of-another-user"),
        pytest.param(lambda cache, entry: entry.chmod(0o666), id="entry-writable-by-others"),
        pytest.param(lambda cache, entry: entry.parent.chmod(0o777), id="shared-entries-dir"),
        pytest.param(lambda cache, entry: cache.chmod(0o777), id="shared-cache-root"),
        pytest.param(lambda cache, entry: os.chown(entry.parent, OTHER_UID, OTHER_UID), id="dir-of-another-user"),
    ],
)
def test_a_planted_answer_is_not_reported(cli, krunkit, plain_disk, plant):
    cache, entry, folder = _first_run(cli, plain_disk)
    _forge(entry)
    code, report = _probe(cli, plain_disk, cache)
    assert code == 0 and report["containers"] == ["vulkan"], "control: the forged entry of this user is read"
    plant(cache, entry)
    code, report = _probe(cli, plain_disk, cache)
    assert code == 0 and report["containers"] == [], report["problems"]
    assert "FORGED" not in json.dumps(report)
    assert _warned(report, "writable by others") or _warned(report, "no one else can write"), report["problems"]
    for leftover in Path(cli.env["TMPDIR"]).glob("cgpu-krunkit-vm-*"):  # where the VM's logs went instead
        shutil.rmtree(leftover)


def test_write_check_link_overwrites_nothing(cli, krunkit, plain_disk, tmp_path):
    cache, _, folder = _first_run(cli, plain_disk)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (folder / ".write-check").symlink_to(victim)
    code, report = _probe_refresh(cli, plain_disk, cache)
    assert code == 0 and victim.read_text() == "precious"
    assert not (folder / ".write-check").exists()


def test_linked_vm_folder_deletes_nothing(cli, krunkit, plain_disk, tmp_path):
    cache, _, folder = _first_run(cli, plain_disk)
    victim = tmp_path / "victim"
    (victim / "shared").mkdir(parents=True)
    (victim / "shared" / "keep").write_text("precious")
    (victim / "console.log").write_text("precious")
    shutil.rmtree(folder)
    folder.symlink_to(victim)
    code, report = _probe_refresh(cli, plain_disk, cache)
    assert code == 0, report["problems"]
    assert (victim / "shared" / "keep").read_text() == "precious" and (victim / "console.log").read_text() == "precious"
    assert _warned(report, "symbolic link")
    _logs_went_to_a_temp_folder(report)


def test_lock_link_creates_nothing(cli, krunkit, plain_disk, tmp_path):
    cache, entry, _ = _first_run(cli, plain_disk)
    target = tmp_path / "created-through-the-lock"
    lock = entry.with_suffix(".lock")
    lock.unlink()
    lock.symlink_to(target)
    code, report = _probe_refresh(cli, plain_disk, cache)
    assert code == 0 and not target.exists()
    assert _warned(report, "could not create the cache lock")


def test_fifo_entry_does_not_hang(cli, krunkit, plain_disk):
    """The run takes about what the first one did (reading the FIFO would wait for ever)."""
    (cache, entry, _), first = timed(lambda: _first_run(cli, plain_disk))
    entry.unlink()
    os.mkfifo(entry, 0o600)
    (code, report), seconds = timed(lambda: _probe(cli, plain_disk, cache))
    assert code == 0 and report["containers"] == []
    assert seconds < allowed(first, first), f"{seconds:.1f} s, the first run {first:.1f} s"
    assert _warned(report, "could not read the cached answer")


def test_sparse_huge_entry_is_not_read(cli, krunkit, plain_disk):
    cache, entry, _ = _first_run(cli, plain_disk)
    with open(entry, "r+b") as f:
        f.truncate(4 << 30)  # 4 GiB, sparse: reading it would take 4 GiB of memory
    code, report = _probe(cli, plain_disk, cache)
    assert code == 0 and report["containers"] == []
    assert _warned(report, "above the cap")


def test_old_vm_folders_are_pruned_and_links_left_alone(cli, krunkit, plain_disk, tmp_path):
    cache, _, folder = _first_run(cli, plain_disk)
    old = folder.parent / "0123456789abcdef"
    (old / "shared").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    link = folder.parent / "fedcba9876543210"
    link.symlink_to(victim)
    week_ago = time.time() - 8 * 86400
    for path in (old, folder):
        os.utime(path, (week_ago, week_ago))
    os.utime(link, (week_ago, week_ago), follow_symlinks=False)
    code, _ = _probe_refresh(cli, plain_disk, cache)
    assert code == 0
    assert not old.exists() and folder.is_dir()  # the folder this run used is kept
    assert link.is_symlink() and (victim / "keep").read_text() == "precious"


def _probe_refresh(cli, disk, cache: Path) -> tuple[int, dict]:
    code, out, _ = cli(
        "probe",
        "--backend",
        "krunkit",
        "--json",
        "--refresh",
        "--vm-image",
        disk,
        env={"CGPU_CACHE_DIR": str(cache)},
        timeout=60,
    )
    return code, json.loads(out)
