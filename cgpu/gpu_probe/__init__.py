"""The GPU probe: `standalone.py` is copied whole into containers, VMs and WSL sessions (standard
library only, Python 3.8+); `answer.py` reads what it prints."""

from __future__ import annotations

from pathlib import Path
from typing import Final

# The standalone probe file, to copy or mount into containers (as probe.py).
PROBE_SCRIPT: Final = Path(__file__).resolve().parent / "standalone.py"

# `python3 -c RUN_FROM_STDIN`, the probe on stdin: cgpu's own probe in any image with python3, where
# no file can be copied in (a podman machine reached through the podman CLI). The probe re-runs its
# own file once per API, so it is written to a temporary folder first.
RUN_FROM_STDIN: Final = (
    "import os, sys, tempfile\n"
    "path = os.path.join(tempfile.mkdtemp(prefix='cgpu-probe-'), 'probe.py')\n"
    "with open(path, 'wb') as f:\n"
    "    f.write(sys.stdin.buffer.read())\n"
    "os.execv(sys.executable, [sys.executable, path] + sys.argv[1:])\n"
)
