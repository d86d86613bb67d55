"""Known versions and the engines' highest accepted cdiVersion."""

from __future__ import annotations

import pytest

from cgpu.cdi import versions
from cgpu.engine_option import parse_engine


@pytest.mark.parametrize(
    ("declared", "known"),
    [
        ("0.5.0", "0.5.0"),
        ("v0.5.0", "0.5.0"),
        ("1.1.0", "1.1.0"),
        ("0.1.0", "0.1.0"),
        ("1.2.0", None),
        ("0.0.0", None),
        ("", None),
        ("0.5", None),
        ("vv0.5.0", None),
        ("V0.5.0", None),
    ],
)
def test_normalize_version(declared, known):
    assert versions.normalize_version(declared) == known


@pytest.mark.parametrize(
    ("engine", "version", "limit"),
    [
        ("podman", "4.3.1", "0.5.0"),
        ("podman", "4.8.0", "0.5.0"),
        ("podman", "4.9.3", "0.6.0"),
        ("podman", "5.0.0", "0.6.0"),
        ("podman", "5.4.2", "0.8.0"),
        ("podman", "5.5.0", "1.0.0"),
        ("podman", "5.8.1", "1.0.0"),
        ("podman", "6.0.0-dev", "1.1.0"),
        ("podman", "3.0.1", None),
        ("docker", "24.0.7", None),
        ("docker", "25.0.0", "0.6.0"),
        ("docker", "26.1", "0.6.0"),
        ("docker", "27.0.3", "0.7.0"),
        ("docker", "27.5.1", "0.8.0"),
        ("docker", "28.1.1", "0.8.0"),
        ("docker", "28.2.0", "1.0.0"),
        ("docker", "29.1.0", "1.1.0"),
    ],
)
def test_max_cdi_version(engine, version, limit):
    assert versions.max_cdi_version(engine, version) == limit


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("crio", "expected NAME@VERSION"),
        ("podman@", "expected NAME@VERSION"),
        ("crio@1.30", "unknown engine 'crio'"),
        ("podman@latest", "is not a version number"),
        ("podman@4.0.0", "does not know which cdiVersion podman 4.0.0 accepts"),
    ],
)
def test_engine_option_errors(value, message):
    with pytest.raises(ValueError, match=message):
        parse_engine(value)


def test_engine_option():
    podman = parse_engine("podman@4.3.1")
    assert (podman.mode, podman.name, podman.version) == ("named", "podman", "4.3.1")
    assert str(parse_engine("Docker@28.2.0")) == "docker@28.2.0"
    assert parse_engine(None).mode == parse_engine("auto").mode == "auto"
    assert parse_engine("none").mode == "none"
