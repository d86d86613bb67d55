"""The one base class of every error cgpu raises on purpose."""

from __future__ import annotations


class CgpuError(Exception):
    """An error cgpu raised on purpose: `except cgpu.CgpuError` catches cgpu's own failures
    (a command that could not run, an engine that refused, an unreadable spec or image) and
    never a bug. Some subclasses are also ValueError or OSError, where callers expect those."""
