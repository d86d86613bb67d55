"""Helpers for the CDI reading tests: write spec files into spec dirs, parse spec text."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from cgpu.cdi import spec_cache
from cgpu.cdi.model import Spec
from cgpu.cdi.parse import SpecError, parse_spec
from cgpu.cdi.scan import clear_parse_cache


def parse(text: str, path: str = "/etc/cdi/test.yaml") -> Spec:
    return parse_spec(textwrap.dedent(text).encode(), path=path, priority=0)


def rejection(text: str | bytes) -> str:
    """The message parse_spec rejects `text` with (fails the test if it accepts it)."""
    data = text if isinstance(text, bytes) else textwrap.dedent(text).encode()
    with pytest.raises(SpecError) as caught:
        parse_spec(data, path="/etc/cdi/test.yaml", priority=0)
    assert caught.value.path == "/etc/cdi/test.yaml"
    return caught.value.message


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def minimal(kind: str = "example.com/gpu", names: tuple[str, ...] = ("gpu0",), version: str = "0.3.0",
            env: str = "A=1") -> str:
    devices = "".join(f"- name: \"{name}\"\n  containerEdits:\n    env: [\"{env}\"]\n" for name in names)
    return f"cdiVersion: \"{version}\"\nkind: {kind}\ndevices:\n{devices}"


@pytest.fixture(autouse=True)
def _fresh_parse_cache(monkeypatch):
    # Nothing goes to the disk cache here (however slowly a test runs, its files count as just
    # changed), so "cleared" means parsed again; test_spec_cache.py turns the disk cache on.
    monkeypatch.setattr(spec_cache, "RACY_SECONDS", math.inf)
    clear_parse_cache()
    yield
    clear_parse_cache()
