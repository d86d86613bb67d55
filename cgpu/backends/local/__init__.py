"""The local backend: run the probe (`cgpu/gpu_probe/standalone.py`) right here and report what it found.

The code lives in `backend` (the entry, `probe`)."""

from cgpu.backends.local.backend import probe

__all__ = ["probe"]
