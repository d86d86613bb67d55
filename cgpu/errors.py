"""The one base class of every error cgpu raises on purpose, and its two stdlib faces."""

from __future__ import annotations


class CgpuError(Exception):
    """An error cgpu raised on purpose: `except cgpu.CgpuError` catches cgpu's own failures
    (a command that could not run, an engine that refused, an unreadable spec or image, an
    argument of the wrong type or value) and never a bug. Some subclasses are also TypeError,
    ValueError or OSError, where callers expect those."""


class CgpuTypeError(CgpuError, TypeError):
    """An argument of the wrong type (a lone string where a list is expected, an option the
    backend does not take): `except TypeError` and `except cgpu.CgpuError` both catch it."""


class CgpuValueError(CgpuError, ValueError):
    """An argument that cannot work (a malformed device name, an unknown engine, a timeout that
    is not positive): `except ValueError` and `except cgpu.CgpuError` both catch it."""
