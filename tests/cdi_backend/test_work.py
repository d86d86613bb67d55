"""Work the backend does once per distinct thing, not once per device: a spec whose devices share
their edits (an index and its UUID alias, copies of one GPU) costs the same checks as one device."""

from __future__ import annotations

from pathlib import Path

from cgpu.backends import memory
from cgpu.backends.cdi import answer as cdi_answer
from cgpu.backends.cdi import problems as cdi_problems
from cgpu.cdi import spec_cache

from .helpers import HOSTS, probe

SPEC = """cdiVersion: 0.6.0
kind: nvidia.com/gpu
devices:
{devices}
containerEdits:
  deviceNodes: [{{path: /dev/nvidiactl}}]
  env: [LD_PRELOAD=/x.so]
"""
DEVICE = """  - name: gpu{index}
    containerEdits:
      deviceNodes: [{{path: /dev/nvidia0}}]
      hooks: [{{hookName: createContainer, path: /usr/bin/sh, args: [sh, -c, 'true']}}]
"""


def test_risky_edits_are_checked_once_per_shared_edits_object(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(spec_cache, "RACY_SECONDS", 0.0)  # store the file just written
    specs = tmp_path / "cdi"
    specs.mkdir()
    (specs / "gpu.yaml").write_text(SPEC.format(devices="".join(DEVICE.format(index=i) for i in range(50))))
    first = probe([specs], HOSTS / "nvidia-580")
    calls: list[object] = []
    real = cdi_problems.risky_edits

    def counting(edits):
        calls.append(edits)
        return real(edits)

    monkeypatch.setattr(cdi_problems, "risky_edits", counting)  # a spec's edits
    monkeypatch.setattr(cdi_answer, "risky_edits", counting)  # a device's, with its answer
    memory("cdi").clear()  # a new process: the parse result read back from the disk cache
    again = probe([specs], HOSTS / "nvidia-580")
    # the disk cache reads the 50 equal device edits back as one object: the spec's and that one
    assert len(calls) == 2
    assert again["problems"] == first["problems"]
    assert any("LD_PRELOAD" in p["message"] for p in again["problems"])
    assert any("runs a shell" in p["message"] for p in again["problems"])
