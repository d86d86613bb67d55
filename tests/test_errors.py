"""Every exception class cgpu defines derives from `cgpu.CgpuError` (the stdlib-only probe,
which runs alone inside containers and VMs, and the CLI's SIGTERM-as-Ctrl-C aside)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

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
    from cgpu.node.files import NotRegularFileError

    assert issubclass(SpecError, ValueError) and issubclass(ProbeOutputError, ValueError)
    assert issubclass(NotRegularFileError, OSError)


def test_no_bare_type_or_value_error_is_raised():
    """Each `raise` of a TypeError or ValueError is cgpu's own subclass, so `except cgpu.CgpuError`
    catches it (the stdlib-only probe, which runs alone, and the report builder's guards against
    a backend's own bug aside)."""
    import ast
    from pathlib import Path

    allowed = {"gpu_probe/standalone.py", "report.py"}
    root = Path(cgpu.__file__).parent
    strays = []
    for path in sorted(root.rglob("*.py")):
        if str(path.relative_to(root)) in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                if isinstance(func, ast.Name) and func.id in ("TypeError", "ValueError"):
                    strays.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not strays, strays


@pytest.mark.parametrize(
    "options, base, keyword",
    [
        ({"devices": ["bad"], "engine": "none"}, ValueError, "devices: 'bad' is not a CDI device name"),
        ({"engine": "bogus"}, ValueError, "engine: 'bogus' is not an engine: expected NAME@VERSION"),
        ({"root": "/nonexistent/cgpu-root", "engine": "none"}, ValueError, "root: '/nonexistent/cgpu-root' is not"),
        ({"spec_dirs": "/etc/cdi"}, TypeError, "spec_dirs must be a list"),
        ({"timeout": -1}, ValueError, "timeout must be a positive number"),
        ({"distro": "x"}, TypeError, "the cdi backend does not take distro"),
    ],
)
def test_library_errors_are_cgpu_errors_named_by_keyword(options, base, keyword):
    with pytest.raises(cgpu.CgpuError) as caught:
        cgpu.probe("cdi", **options)
    assert isinstance(caught.value, base) and str(caught.value).startswith(keyword)
    assert "--" not in str(caught.value)  # the library's words, not the CLI's flags


def test_library_refuses_what_is_no_image_reference():
    with pytest.raises(cgpu.CgpuError) as caught:
        cgpu.check_image("Bad::Ref")
    assert isinstance(caught.value, ValueError) and "is not an image reference" in str(caught.value)
    with pytest.raises(ValueError, match="give a path after 'oci-archive:'"):
        cgpu.check_image("oci-archive:")
    with pytest.raises(cgpu.CgpuError, match="they exclude each other"):
        cgpu.probe("krunkit", machine="m", vm_image="disk.img")
