"""Vendor, class, device and qualified names: the reference parser's grammar and texts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cgpu.cdi import names


@pytest.mark.parametrize(
    "kind",
    [
        "nvidia.com/gpu",
        "amd.com/gpu",
        "intel.com/gpu",
        "nvidia.com/gpu.coherent",
        "k8s.device-plugin.nvidia.com/gpu",
        "vendor_x.com/gpu-1",
        "a/gpu",
        "nvidia.com/g",
    ],
)
def test_valid_kinds(kind):
    vendor, device_class = names.parse_qualifier(kind)
    assert names.vendor_error(vendor) is None and names.class_error(device_class) is None


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("nvidia", "invalid vendor. empty name"),
        ("/gpu", "invalid vendor. empty name"),
        ("nvidia.com/", "invalid vendor. empty name"),
        ("vendor.com-/device", 'invalid vendor. "vendor.com-", should end with a letter or digit'),
        ("0vendor.com/gpu", 'invalid vendor. "0vendor.com", should start with letter'),
        ("-nvidia.com/gpu", 'invalid vendor. "-nvidia.com", should start with letter'),
        ("vendor.com/foo/bar", "invalid class. invalid character '/' in name \"foo/bar\""),
        ("nvidia.com/gpu/extra", "invalid class. invalid character '/' in name \"gpu/extra\""),
        ("vendor.com/device=", 'invalid class. "device=", should end with a letter or digit'),
        ("nvidia.com/1gpu", 'invalid class. "1gpu", should start with letter'),
    ],
)
def test_invalid_kinds(kind, error):
    vendor, device_class = names.parse_qualifier(kind)
    assert (names.vendor_error(vendor) or names.class_error(device_class)) == error


@pytest.mark.parametrize(
    "name",
    [
        "0",
        "all",
        "GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e",
        "1:0",
        "mig1:0",
        "gpu0",
        "card1",
        "0000-03-00-0-0x56a0",
        "a_b.c",
    ],
)
def test_valid_device_names(name):
    assert names.device_name_error(name) is None


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("", "invalid (empty) device name"),
        ("-x", 'invalid class "-x", should start with a letter or digit'),
        ("a/b", "invalid character '/' in device name \"a/b\""),
        ("a=b", "invalid character '=' in device name \"a=b\""),
        ("a b", "invalid character ' ' in device name \"a b\""),
        ("x:", 'invalid name "x:", should end with a letter or digit'),
        ("../../etc", 'invalid class "../../etc", should start with a letter or digit'),
    ],
)
def test_invalid_device_names(name, error):
    assert names.device_name_error(name) == error


@pytest.mark.parametrize(
    "device",
    [
        "nvidia.com/gpu=all",
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=1:0",
        "nvidia.com/gpu=GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e",
    ],
)
def test_qualified_names(device):
    assert names.is_qualified_name(device)
    vendor, device_class, name = names.parse_qualified_name(device)
    assert f"{vendor}/{device_class}={name}" == device


@pytest.mark.parametrize(
    ("device", "error"),
    [
        ("nvidia.com/gpu=", 'unqualified device "nvidia.com/gpu=", missing vendor'),
        ("/dev/nvidia0", 'unqualified device "/dev/nvidia0", missing vendor'),
        ("gpu=0", 'unqualified device "gpu=0", missing vendor'),
        (
            "nvidia.com/gpu=all=1",
            'invalid device "nvidia.com/gpu=all=1": invalid character \'=\' in device name "all=1"',
        ),
        ("0x.com/gpu=0", 'invalid device "0x.com/gpu=0": invalid vendor. "0x.com", should start with letter'),
    ],
)
def test_unqualified_or_invalid_requests(device, error):
    assert not names.is_qualified_name(device)
    with pytest.raises(ValueError) as caught:
        names.parse_qualified_name(device)
    assert str(caught.value) == error


def test_one_character_vendor_or_class_is_valid_but_flagged():
    assert names.is_qualified_name("a/gpu=0") and names.is_qualified_name("nvidia.com/g=0")
    assert names.crashes_old_libraries("a/gpu") and names.crashes_old_libraries("nvidia.com/g")
    assert not names.crashes_old_libraries("nvidia.com/gpu")
    assert names.OLD_LIBRARY_CRASH == "crashes engines whose CDI library is <= 1.1.0"


def test_go_quote_escapes_like_go():
    assert names.go_quote('a"b\\c\n\x00é') == '"a\\"b\\\\c\\n\\x00é"'


@given(st.text(max_size=12))
def test_names_accepted_exactly_by_the_grammar(text):
    assert (names.device_name_error(text) is None) == bool(names.DEVICE_NAME.fullmatch(text))
    assert (names.vendor_error(text) is None) == bool(names.VENDOR_OR_CLASS.fullmatch(text))


@given(st.text(alphabet="ab0.-_:/=", max_size=10))
def test_names_on_the_grammar_alphabet(text):
    assert (names.device_name_error(text) is None) == bool(names.DEVICE_NAME.fullmatch(text))
    assert (names.class_error(text) is None) == bool(names.VENDOR_OR_CLASS.fullmatch(text))
