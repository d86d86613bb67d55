"""Every exception class cgpu defines derives from `cgpu.CgpuError` (the stdlib-only probe,
which runs alone inside containers and VMs, and the CLI's SIGTERM-as-Ctrl-C aside)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import cgpu

OUTSIDE = {"cgpu.gpu_probe.standalone", "cgpu.cli"}


def test_every_cgpu_exception_is_a_cgpu_error():
    modules = [
        info.name
        for info in pkgutil.walk_packages(cgpu.__path__, "cgpu.")
        if info.name not in OUTSIDE and not info.name.endswith("__main__")
    ]
    found = {}
    for name in modules:
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == name:
                found[f"{name}.{cls.__qualname__}"] = cls
    assert len(found) >= 15, sorted(found)  # the walk found cgpu's own classes
    strays = [name for name, cls in found.items() if not issubclass(cls, cgpu.CgpuError)]
    assert not strays, f"not derived from cgpu.CgpuError: {strays}"


def test_mixins_callers_rely_on_are_kept():
    from cgpu.backends.wsl import ProbeOutputError
    from cgpu.cdi.parse import SpecError
    from cgpu.files import NotRegularFileError

    assert issubclass(SpecError, ValueError) and issubclass(ProbeOutputError, ValueError)
    assert issubclass(NotRegularFileError, OSError)
