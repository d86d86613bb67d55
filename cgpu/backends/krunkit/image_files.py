"""The Venus probe image's build context, shipped inside the package (`assets/`: the Containerfile
and the guest files of a probe VM) so that a pip install can build it as a git checkout can."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from cgpu.clock import limit_start
from cgpu.run import CommandTimeoutError, Completed

ASSETS = ("Containerfile", "guest/cgpu-probe.service", "guest/cgpu-probe.sh")


def write_assets(folder: str) -> list[str]:
    """Write the build context into `folder` (created if missing). Refuses to replace a file that
    is there (FileExistsError): nothing is overwritten. cgpu's probe is not part of the image: cgpu
    sends its own to python3 in the container each time."""
    here = resources.files(__package__ or "cgpu.backends.krunkit")
    sources = {name: here.joinpath("assets", *name.split("/")) for name in ASSETS}
    target = Path(folder)
    clashes = [name for name in sources if (target / name).exists() or (target / name).is_symlink()]
    if clashes:
        raise FileExistsError(f"{folder} already has {', '.join(clashes)}: give an empty or new folder")
    written = []
    for name, source in sources.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = 0o755 if name.endswith(".sh") else 0o644
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
        with os.fdopen(fd, "wb") as out:
            out.write(source.read_bytes())
        os.chmod(path, mode)  # whatever the umask says: the guest runs the script
        written.append(str(path))
    return written


BUILD_TIMEOUT_S = 1800.0  # dnf installs Mesa, the loader and Python in the VM: minutes on a slow network


def build_image(*, machine: str | None, tag: str, timeout: float, tee: Callable[[bytes], None]) -> Completed:
    """`podman [--connection MACHINE] build -t TAG` on a fresh copy of the build context, its output
    handed to `tee` as it comes and kept for the caller; raises CommandError (not found, timed out).
    The timeout is the whole build's: in the CLI it counts from cgpu's start."""
    end = limit_start() + timeout
    from cgpu.engines.client import PodmanEngine

    with tempfile.TemporaryDirectory(prefix="cgpu-venus-probe-") as folder:
        write_assets(folder)
        try:
            return PodmanEngine(connection=machine).build_image(
                folder, tag, timeout=max(0.1, end - time.monotonic()), tee=tee
            )
        except CommandTimeoutError as exc:  # said as the limit given, not what was left of it
            raise CommandTimeoutError(exc.argv, timeout, exc.stdout, exc.stderr) from None
