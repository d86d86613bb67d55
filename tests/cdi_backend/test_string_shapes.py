"""Shapes matched as string work on the CLI's path (compiling their regexes cost more than the rest of their
use), each held to the regex it stands for."""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from cgpu.backends.cdi import vulkan_icd
from cgpu.backends.cdi.rules import driver_version_suffix
from cgpu.backends.cdi.view import library_stem
from cgpu.node.host import nvrm_version


def pieces(*parts: str) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(parts), max_size=10).map("".join)


LIBRARY_NAMES = pieces("lib", "cuda", ".so", ".", "1", "580", "65", "06", "٣", "x", "\n", "-")


@given(LIBRARY_NAMES)
@example("libcuda.so.1.1")
@example("a.so.x.so.1")
def test_library_stem_is_the_regex(name: str):
    match = re.fullmatch(r"(.+?)\.so\.\d+(?:\.\d+)*", name)
    assert library_stem(name) == (match.group(1) if match else None)


@given(LIBRARY_NAMES)
@example("libcuda.so.580.65.06")
@example("libcuda.so.580.65.06\n")
@example("libGLX_nvidia.so.0")
def test_driver_version_suffix_is_the_regex(name: str):
    match = re.search(r"\.so\.(\d{2,3}\.\d+(?:\.\d+)?)$", name)
    assert driver_version_suffix(name) == (match.group(1) if match else None)


@given(pieces("Kernel Module", " for ", "x86_64", " ", "  ", "\t", "\u2003", "580", ".", "65", "06", "٣", "a"))
@example("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build")
@example("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024")
@example("Kernel Module for  580.1")
def test_nvrm_version_is_the_regex(text: str):
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    assert nvrm_version(text) == (match.group(1) if match else None)


def _regex_variant(text: str) -> int:
    """api_version_variant as it was written with its two regexes."""

    def strtoul16(token: str) -> int:
        match = re.match(r"[ \t\n\v\f\r]*([+-]?)([0-9]*)", token)
        sign, digits = match.groups() if match else ("", "")
        value = int(digits) if digits else 0
        return (-value if sign == "-" else value) % (1 << 64) & 0xFFFF

    numbers = [strtoul16(token) for token in re.split(r'[."\n\r]', text) if token][:4]
    variant, major = (numbers[0], numbers[1]) if len(numbers) == 4 else (0, numbers[0] if numbers else 0)
    return (((variant << 29) | (major << 22)) & 0xFFFFFFFF) >> 29


@given(pieces("1", "0", "7", "128", "65535", "65536", ".", '"', "\n", "\r", " ", "\t", "\v", "-", "+", "x", "٣"))
@example("1.3.275")
@example("7.1.0.0")
def test_api_version_variant_is_the_regex_reading(text: str):
    assert vulkan_icd.api_version_variant(text) == _regex_variant(text)
