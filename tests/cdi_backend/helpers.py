"""Running the cdi backend on spec dirs and fabricated host trees, and checking its reports."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cgpu.apis import API_ORDER
from cgpu.backends import run_backend
from tests.conftest import CORPUS, REPO, validate_report

SAMPLES = REPO / "cdi-samples"
HOSTS = SAMPLES / "hosts"

NVRM_580 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.82.07  Release Build  "
    "(dvs-builder@U22-I3-AE18-23-3)  Wed Sep  3 20:05:39 UTC 2025\n"
)


def probe(spec_dirs: Iterable[Path | str], root: Path | str, **options: Any) -> dict[str, Any]:
    """The backend's report (validated against the contract) for these dirs and host root; judged by
    the newest CDI rules unless `engine` says otherwise (the default, the host's engine, varies by host)."""
    options.setdefault("engine", "none")
    report = run_backend("cdi", {"spec_dirs": [str(d) for d in spec_dirs], "root": str(root), **options}).build()
    validate_report(report)
    assert list(report["evidence"]) == list(API_ORDER)
    for api, sentence in report["evidence"].items():
        assert ". " not in sentence.replace("e.g. ", ""), f"{api}: more than one sentence: {sentence}"
    return report


def make_host(
    root: Path,
    paths: Iterable[str] = (),
    *,
    files: dict[str, str] | None = None,
    render: dict[str, str] | None = None,
    nvidia_version: str | None = None,
) -> Path:
    """A fake host tree: empty placeholder files at `paths`, given file contents, DRM vendors, a driver."""
    for path in paths:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    for path, text in (files or {}).items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    for node, vendor in (render or {}).items():
        vendor_file = root / "sys/class/drm" / node / "device/vendor"
        vendor_file.parent.mkdir(parents=True, exist_ok=True)
        vendor_file.write_text(vendor + "\n")
    if nvidia_version:
        version_file = root / "proc/driver/nvidia/version"
        version_file.parent.mkdir(parents=True, exist_ok=True)
        version_file.write_text(f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {nvidia_version}  Release Build\n")
    root.mkdir(parents=True, exist_ok=True)
    return root


def spec_dir(tmp: Path, *sources: Path | str, name: str = "cdi", texts: dict[str, str] | None = None) -> Path:
    """A spec dir holding copies of `sources` (files) and `texts` (file name -> content)."""
    folder = tmp / name
    folder.mkdir(parents=True, exist_ok=True)
    for source in sources:
        shutil.copy(source, folder / Path(source).name)
    for file_name, text in (texts or {}).items():
        (folder / file_name).write_text(text)
    return folder


def host_paths(spec: dict[str, Any]) -> list[str]:
    """Every host path a spec (as a JSON-shaped dict) names: mount sources, device nodes, hook binaries."""
    paths = []
    for edits in [spec.get("containerEdits") or {}, *(d["containerEdits"] for d in spec["devices"])]:
        paths += [n.get("hostPath") or n["path"] for n in edits.get("deviceNodes") or ()]
        paths += [m["hostPath"] for m in edits.get("mounts") or ()]
        paths += [h["path"] for h in edits.get("hooks") or ()]
    return paths


def device(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(d for d in report["devices"] if d["name"] == name)


def corpus(name: str) -> Path:
    """A spec file of the project's corpus (tests/cdi/corpus), in a shape real generators publish."""
    return CORPUS / name
