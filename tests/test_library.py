"""The library face: `cgpu.probe()` and `cgpu.check_image()` take typed keyword options, and a
value of the wrong type is a TypeError that names it, before anything runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import cgpu
from tests.conftest import REPO, validate_image_check, validate_report

# A fake host: its specs are judged by the newest CDI rules, not by this machine's engine.
AMD = {
    "spec_dirs": [str(REPO / "cdi-samples/amd/spec")],
    "root": str(REPO / "cdi-samples/hosts/amd"),
    "engine": "none",
}


def test_probe_returns_the_report_model_with_paths_as_str_or_pathlib():
    report = cgpu.probe(
        "cdi", spec_dirs=[REPO / "cdi-samples/amd/spec"], root=REPO / "cdi-samples/hosts/amd", engine="none"
    )
    assert isinstance(report, cgpu.Report)
    assert report.containers == ["rocm", "vulkan", "opencl"]
    assert report.apis["cuda"].state == "absent"
    assert {type(d).__name__ for d in report.devices} == {"CdiDevice"}
    assert report == cgpu.probe("cdi", **AMD).model_copy(update={"checked_at": report.checked_at})
    validate_report(report.model_dump(mode="json", exclude_none=True))


@pytest.mark.parametrize(
    "options, words",
    [
        ({"spec_dirs": "/etc/cdi"}, "spec_dirs must be a list of paths, not a single str"),
        ({"spec_dirs": Path("/etc/cdi")}, "spec_dirs must be a list of paths, not a single"),
        ({"spec_dirs": b"/etc/cdi"}, "spec_dirs must be a list of paths, not a single bytes"),
        ({"spec_dirs": ["/etc/cdi", 3]}, r"spec_dirs\[1\] must be a str or os.PathLike path, not int"),
        ({"spec_dirs": [None]}, r"spec_dirs\[0\] must be a str or os.PathLike path, not NoneType"),
        ({"spec_dirs": {"/etc/cdi"}}, "spec_dirs must be a list of paths, not set"),
        ({"devices": "nvidia.com/gpu=0"}, "devices must be a list of str, not a single str"),
        ({"devices": [Path("nvidia.com/gpu=0")]}, r"devices\[0\] must be a str, not"),
        ({"root": 1}, "root must be a str or os.PathLike path, not int"),
        ({"engine": ["podman"]}, "engine must be a str, not list"),
        ({"probe_image": 7}, "probe_image must be a str, not int"),
        ({"verify": "no"}, "verify must be True or False, not str 'no'"),
        ({"verify": 1}, "verify must be True or False, not int 1"),
        ({"verify": None}, "verify must be True or False, not NoneType"),
        ({"timeout": "5"}, "timeout must be a number of seconds .* not str '5'"),
        ({"timeout": True}, "timeout must be a number of seconds .* not bool True"),
        ({"timeout": [5]}, "timeout must be a number of seconds"),
    ],
)
def test_cdi_options_of_the_wrong_type_are_type_errors(options, words):
    with pytest.raises(TypeError, match=words):
        cgpu.probe("cdi", **options)


@pytest.mark.parametrize(
    "backend, options, words",
    [
        ("wsl", {"distro": ["Ubuntu"]}, "distro must be a str, not list"),
        ("krunkit", {"machine": 3}, "machine must be a str, not int"),
        ("krunkit", {"vm_image": 3.5}, "vm_image must be a str or os.PathLike path, not float"),
        ("krunkit", {"refresh": "yes"}, "refresh must be True or False, not str"),
        ("local", {"timeout": "1"}, "timeout must be a number of seconds"),
        (1, {}, "backend must be a str, not int"),
    ],
)
def test_other_backends_options_of_the_wrong_type_are_type_errors(backend, options, words):
    with pytest.raises(TypeError, match=words):
        cgpu.probe(backend, **options)


@pytest.mark.parametrize(
    "backend, options, words",
    [
        ("wsl", {"spec_dirs": ["/etc/cdi"]}, "the wsl backend does not take spec_dirs"),
        ("cdi", {"machine": "podman-machine-default"}, "the cdi backend does not take machine"),
        ("local", {"verify": True}, "the local backend does not take verify"),
        ("cdi", {"refresh": True}, "the cdi backend does not take refresh"),
        ("krunkit", {"devices": ["a.com/b=c"]}, "the krunkit backend does not take devices"),
    ],
)
def test_an_option_of_another_backend_is_a_type_error(backend, options, words):
    with pytest.raises(TypeError, match=words):
        cgpu.probe(backend, **options)


def test_options_are_keyword_only_and_unknown_ones_are_type_errors():
    with pytest.raises(TypeError):
        cgpu.probe("cdi", ["/etc/cdi"])  # type: ignore[misc]
    with pytest.raises(TypeError, match="spec_dir"):
        cgpu.probe("cdi", spec_dir=["/etc/cdi"])  # type: ignore[call-arg]


def test_values_that_cannot_work_are_value_errors():
    for timeout in (0, -1, float("nan"), float("inf"), 1e12):
        with pytest.raises(ValueError, match="timeout must be a positive number"):
            cgpu.probe("cdi", **AMD, timeout=timeout)
    with pytest.raises(ValueError, match="unknown backend 'vulkan'"):
        cgpu.probe("vulkan")
    with pytest.raises(ValueError, match="not a CDI device name"):
        cgpu.probe("cdi", **AMD, devices=["gpu=0"])


def test_false_and_none_count_as_not_given():
    report = cgpu.probe("local", verify=False, refresh=False, spec_dirs=None, timeout=30)
    assert report.backend == "local"


def test_check_image_returns_the_model_and_says_unreadable(tmp_path):
    answer = cgpu.check_image(f"dir:{tmp_path / 'nothing-here'}", timeout=30)
    assert isinstance(answer, cgpu.ImageCheck)
    assert (answer.status, answer.verdict) == ("unreadable", "unknown")
    validate_image_check(answer.model_dump(mode="json"))


@pytest.mark.parametrize(
    "args, options, words",
    [
        ((Path("/x"),), {}, "ref must be a str"),
        (("dir:/x",), {"machine": ["vm"]}, "machine must be a str"),
        (("dir:/x",), {"timeout": "9"}, "timeout must be a number of seconds"),
    ],
)
def test_check_image_arguments_of_the_wrong_type_are_type_errors(args, options, words):
    with pytest.raises(TypeError, match=words):
        cgpu.check_image(*args, **options)


def test_importing_cgpu_loads_no_pydantic_and_the_models_come_on_first_use():
    code = (
        "import sys, cgpu; assert 'pydantic' not in sys.modules, 'pydantic at import'; "
        "assert cgpu.Report.__doc__ and cgpu.ImageCheck.__doc__; assert 'pydantic' in sys.modules; "
        "import cgpu.cli; cgpu.nothing"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert "AttributeError: module 'cgpu' has no attribute 'nothing'" in done.stderr, done.stderr


def test_the_package_is_marked_typed():
    assert (REPO / "cgpu" / "py.typed").is_file()
