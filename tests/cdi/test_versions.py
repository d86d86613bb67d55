"""Known versions and the engines' highest accepted cdiVersion (their release rows, `cgpu.engines`)."""

from __future__ import annotations

import pytest

from cgpu.cdi import versions
from cgpu.engines import registry
from cgpu.engines.option import parse_engine


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
        ("podman", "4.8.0", "0.6.0"),
        ("podman", "4.6.2", "0.5.0"),
        ("podman", "4.9.3", "0.6.0"),
        ("podman", "5.0.0", "0.6.0"),
        ("podman", "5.4.2", "0.8.0"),
        ("podman", "5.5.0", "1.0.0"),
        ("podman", "5.8.1", "1.0.0"),
        ("podman", "6.0.0-dev", "1.1.0"),
        ("podman", "3.0.1", None),
        ("podman", "4.0.0", "0.2.0"),  # a pre-release library taking 0.1.0 and 0.2.0 only
        ("podman", "4.7.2", "0.6.0"),  # issue 21: amd-ctk's 0.6.0 spec works here
        ("podman", "5.1.2", "0.7.0"),
        ("podman", "5.2.0", "0.8.0"),
        ("podman", "5.3.1", "0.8.0"),
        ("docker", "24.0.7", None),
        ("docker", "25.0.0", "0.6.0"),
        ("docker", "25.0.16", "0.6.0"),
        ("docker", "25.0.17", "0.8.0"),
        ("docker", "26.0.2", "0.6.0"),
        ("docker", "26.1", "0.7.0"),
        ("docker", "26.1.5", "0.7.0"),  # Debian 13's docker.io, observed
        ("docker", "27.0.3", "0.7.0"),
        ("docker", "27.4.0", "0.8.0"),
        ("docker", "27.5.1", "0.8.0"),
        ("docker", "28.0.4", "0.8.0"),
        ("docker", "28.1.1", "1.0.0"),
        ("docker", "28.2.0", "1.0.0"),
        ("docker", "28.5.2", "1.0.0"),  # Debian unstable's docker.io, observed
        ("docker", "29.1.0", "1.0.0"),
        ("docker", "29.2.0", "1.1.0"),
        ("containerd", "1.6.33", None),
        ("containerd", "1.7.0", "0.5.0"),
        ("containerd", "1.7.15", "0.6.0"),
        ("containerd", "1.7.16", "0.7.0"),
        ("containerd", "1.7.24", "0.7.0"),  # upstream; Debian 13's build reads 0.8.0 (its CDI package)
        ("containerd", "1.7.27", "0.8.0"),
        ("containerd", "2.0.4", "0.8.0"),
        ("containerd", "2.0.5", "1.0.0"),
        ("containerd", "2.1.9", "1.0.0"),
        ("containerd", "2.2.0", "1.0.0"),
        ("containerd", "2.2.1", "1.1.0"),
        ("containerd", "v1.7.20-k3s1", "0.7.0"),
        ("crio", "1.22.0", None),
        ("crio", "1.23.5", None),  # CDI came with 1.24 (cri-o PR #5571)
        ("crio", "1.24.6", "0.3.0"),
        ("crio", "1.29.4", "0.6.0"),
        ("crio", "1.30.0", "0.7.0"),
        ("crio", "1.32.2", "0.8.0"),
        ("crio", "1.34.1", "1.0.0"),
        ("crio", "1.35.0", "1.1.0"),
    ],
)
def test_max_cdi_version(engine, version, limit):
    assert registry.max_cdi_version(engine, version) == limit


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("runc", "expected NAME@VERSION"),
        ("podman@", "expected NAME@VERSION"),
        ("lxd@5.0", "unknown engine 'lxd'"),
        ("podman@latest", "is not a version number"),
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
    assert str(parse_engine("CRI-O@1.31.0")) == "crio@1.31.0"
    assert str(parse_engine("containerd")) == "containerd"


@pytest.mark.parametrize(
    ("library", "reads"),
    [
        ("v0.3.2", "0.3.0"),
        ("v0.5.4", "0.5.0"),
        ("v0.6.2", "0.6.0"),
        ("v0.7.2", "0.7.0"),
        ("v0.8.1", "0.8.0"),
        ("0.8.0", "0.8.0"),  # Debian's package version form
        ("v1.0.1", "1.0.0"),
        ("v1.1.0", "1.1.0"),
        ("v0.8.2-0.20250101000000-abcdef123456", "0.8.0"),  # a pseudo-version
        ("v1.3.0", "1.1.0"),  # newer than cgpu knows: at least what cgpu knows
        ("v0.2.0", None),
        ("latest", None),
    ],
)
def test_library_max_version(library, reads):
    assert versions.library_max_version(library) == reads


@pytest.mark.parametrize(
    ("engine", "spec_version", "first"),
    [
        ("podman", "0.7.0", "5.1"),
        ("containerd", "0.8.0", "1.7.27"),
        # 25.0.17 reads 0.8.0 but 26.0 only 0.6.0 again: the fix names the release from which all do
        ("docker", "0.8.0", "27.4"),
        ("crio", "1.1.0", "1.35"),
        ("podman", "9.9.9", None),
        ("lxc", "0.3.0", None),
    ],
)
def test_first_release_reading_is_the_one_from_which_every_later_release_reads_it(engine, spec_version, first):
    assert registry.first_release_reading(engine, spec_version) == first


def test_the_minimum_version_is_a_table_of_the_library_versions_above_the_earliest():
    # specs-go/version.go (v1.1.0) validSpecVersions: a requiresVxyz for every version from 0.4.0
    assert [version for version, _ in versions.REQUIRES] == list(reversed(versions.KNOWN_VERSIONS[3:]))
    requires = dict(versions.REQUIRES)
    assert requires["1.0.0"] is None and requires["0.8.0"] is None  # no field of their own
    for version, requires in versions.REQUIRES:
        assert requires is None or requires.__name__ == f"_requires_v{version.replace('.', '')}"
