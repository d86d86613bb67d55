"""Helpers for the CDI reading tests: write spec files into spec dirs, parse spec text."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from cgpu.cdi import spec_cache
from cgpu.cdi.model import Spec
from cgpu.cdi.parse import SpecError, parse_spec


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


# Every field of every version, with device names and keys that exercise the odd corners.
ALL_FIELDS = textwrap.dedent("""\
    cdiVersion: v1.1.0
    kind: vendor.com/device
    annotations: {a: b}
    containerEdits:
      env: [S=1]
      hooks:
      - {hookName: createContainer, path: /bin/hook, args: [hook, x], env: [H=1], timeout: 5}
      mounts:
      - {hostPath: tmpfs, containerPath: /tmp/data, type: tmpfs, options: [nosuid, size=1k]}
      intelRdt: {closID: clos, l3CacheSchema: "L3:0=f", memBwSchema: "MB:0=50", schemata: [x], enableMonitoring: true}
      netDevices: [{hostInterfaceName: eth1, name: net0}]
      additionalGids: [44, 0]
    devices:
    - name: dev
      annotations: {k: v}
      containerEdits:
        deviceNodes:
        - {path: /dev/card1, hostPath: /vendor/card1, type: c, major: 226, minor: 1, fileMode: 432,
           permissions: rw, uid: 0, gid: 44}
    - name: "0"
      containerEdits: {deviceNodes: [{path: /dev/card1}], env: ["\\u00e9=\\U0001F600"]}
    - name: same-as-0
      containerEdits: {deviceNodes: [{path: /dev/card1}], env: ["\\u00e9=\\U0001F600"]}
    - name: Case
      containerEdits: {DeviceNodes: [{Path: /dev/x, hostpath: /dev/y}]}
    """)


def minimal(
    kind: str = "example.com/gpu", names: tuple[str, ...] = ("gpu0",), version: str = "0.3.0", env: str = "A=1"
) -> str:
    devices = "".join(f'- name: "{name}"\n  containerEdits:\n    env: ["{env}"]\n' for name in names)
    return f'cdiVersion: "{version}"\nkind: {kind}\ndevices:\n{devices}'


@pytest.fixture(autouse=True)
def _fresh_parse_cache(monkeypatch):
    # Nothing goes to the disk cache here (however slowly a test runs, its files count as just
    # changed), so "cleared" means parsed again; test_spec_cache.py turns the disk cache on.
    monkeypatch.setattr(spec_cache, "RACY_SECONDS", math.inf)
