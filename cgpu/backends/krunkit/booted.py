"""The krunkit probe in a VM booted from `--vm-image`: its cache key, its folder of logs, the
boot and the judging of what the guest's probe wrote."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from cgpu.backends.krunkit.cached import answer, host
from cgpu.backends.krunkit.judging import ProbeFailed, judge
from cgpu.backends.krunkit.machine import DEFAULT_PROBE_IMAGE
from cgpu.backends.krunkit.vm import boot_and_probe
from cgpu.gpu_probe.answer import ProbeAnswer
from cgpu.node.files import default_cache_dir, is_private, key_digest, open_private, private_directory
from cgpu.problem import Problem
from cgpu.report import ReportBuilder
from cgpu.version import __version__

VM_FOLDER_DAYS: Final = 7  # the probe VM's logs, kept for the report that names them
BOOT_TIMEOUT_S: Final = 300.0  # boot + probe in a krunkit VM


def probe_booted_vm(
    report: ReportBuilder,
    exe: str,
    version: str,
    disk: str,
    probe_image: str | None,
    *,
    refresh: bool,
    timeout: float | None,
) -> None:
    try:
        stat = os.stat(disk)
    except OSError as exc:
        raise ProbeFailed(disk, f"--vm-image cannot be read: {exc.strerror or exc}") from None
    key = {
        "backend": "krunkit",
        "cgpu": __version__,  # its probe is what runs in the image
        "host": host(),
        "krunkit": version,
        "vm": {"image": os.path.abspath(disk), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns},
        "probe_image": {"ref": probe_image},
    }
    run_dir = _vm_run_dir(report, key)

    def compute() -> ProbeAnswer:
        report.progress(f"booting {disk} with krunkit {version}")
        result = boot_and_probe(
            exe,
            disk,
            run_dir=run_dir,
            probe_image=probe_image,
            timeout=timeout or BOOT_TIMEOUT_S,
            progress=report.progress,
        )
        found = judge(result, where=f"the krunkit VM booted from {disk}", image=probe_image or DEFAULT_PROBE_IMAGE)
        logs = Problem("info", str(run_dir), "the probe VM's logs (krunkit.log, console.log) are kept here", "probe")
        return replace(found, problems=(*found.problems, logs))

    answer(report, key, compute, refresh=refresh, lock_timeout=(timeout or BOOT_TIMEOUT_S) + 30)


def _vm_run_dir(report: ReportBuilder, key: dict[str, Any]) -> Path:
    """Where the probe VM's logs and shared folder live (the latest run per VM image): in the
    cache, or a temp folder when the cache cannot take them (read-only, full disk: a folder can
    still be made on a full disk, so a block is written to know; not private: another user
    could swap a folder for a link to one cgpu then empties). Folders unused for a week go."""
    root = default_cache_dir()
    folders = root / "krunkit-vm"
    preferred = folders / key_digest(key)[:16]
    check = preferred / ".write-check"
    try:
        for folder in (root, folders, preferred):
            private_directory(folder, create=True)
        with contextlib.suppress(FileNotFoundError):
            check.unlink()  # a link is removed, never followed
        fd = open_private(check, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
        check.unlink()
        os.utime(preferred)  # in use: kept by the pruning below
    except OSError as exc:
        import tempfile

        with contextlib.suppress(OSError):
            check.unlink()
        fallback = Path(tempfile.mkdtemp(prefix="cgpu-krunkit-vm-"))
        report.problem(
            "warning",
            str(preferred),
            f"cannot write the VM's folder in the cache ({exc.strerror or exc}); using {fallback} instead",
            "probe",
        )
        return fallback
    _prune_vm_folders(folders)
    return preferred


def _prune_vm_folders(folders: Path) -> None:
    """Remove this user's VM folders unused for VM_FOLDER_DAYS (never through a link)."""
    import stat as stat_module

    cutoff = time.time() - VM_FOLDER_DAYS * 86400
    with contextlib.suppress(OSError):
        for entry in os.scandir(folders):
            info = entry.stat(follow_symlinks=False)
            if stat_module.S_ISDIR(info.st_mode) and is_private(info) and info.st_mtime < cutoff:
                shutil.rmtree(entry.path, ignore_errors=True)  # does not follow links inside
