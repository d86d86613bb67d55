"""The GPU probe: `standalone.py` is copied whole into containers, VMs and WSL sessions (standard
library only, Python 3.8+); `answer.py` reads what it prints."""

from __future__ import annotations

from pathlib import Path
from typing import Final

# The standalone probe file, to copy or mount into containers (as probe.py).
PROBE_SCRIPT: Final = Path(__file__).resolve().parent / "standalone.py"
