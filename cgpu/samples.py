"""`cgpu samples DIR`: the CDI samples and fake hosts the README's commands run on, written out
for a pip user (the wheel carries them as `cgpu/samples`; a checkout reads `cdi-samples/`)."""

from __future__ import annotations

import os
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path


def samples_source() -> Traversable:
    """The samples: in the installed package, else the checkout's `cdi-samples/`."""
    packaged = resources.files("cgpu").joinpath("samples")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "cdi-samples"


def _files(folder: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        name = f"{prefix}{entry.name}"
        if entry.is_dir():
            found += _files(entry, name + "/")
        elif entry.is_file():
            found.append((name, entry))
    return found


def write_samples(folder: str) -> int:
    """Write every sample into `folder` (new or empty: FileExistsError otherwise); returns how
    many files were written. Nothing is overwritten and no link is followed."""
    target = Path(folder)
    if target.is_symlink() or (target.exists() and (not target.is_dir() or any(target.iterdir()))):
        raise FileExistsError(f"{folder} is not a new or empty folder: nothing was written")
    files = _files(samples_source())
    if not files:
        raise FileNotFoundError("this cgpu has no samples (neither cgpu/samples nor cdi-samples/)")
    for name, source in files:
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(source.read_bytes())
    return len(files)
