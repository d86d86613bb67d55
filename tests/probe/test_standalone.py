"""The probe file stands alone: any Python 3.8+ with only its standard library runs it, from any
directory, and it prints the versioned JSON shape other parts of cgpu read."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys

import pytest

from tests.probe.conftest import PROBE, clean_env, run_probe

API_KEYS = {"available", "summary", "library", "error", "devices"}


def test_copied_file_runs_isolated_with_the_system_python(tmp_path):
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3")
    copy = tmp_path / "probe.py"
    shutil.copy(PROBE, copy)
    out = subprocess.run(
        [python, "-I", "-S", str(copy), "--timeout", "20"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=True,
    ).stdout
    data = json.loads(out)
    assert list(data) == ["probe_version", "platform", "python", "libc", "env", "device_nodes", "apis"]
    assert data["probe_version"] == 1
    assert data["platform"].startswith("linux-")
    assert data["libc"].startswith("glibc ") or data["libc"] in ("musl", "unknown")
    assert list(data["apis"]) == ["cuda", "rocm", "vulkan", "opencl", "directml", "metal"]
    for api, result in data["apis"].items():
        assert set(result) >= API_KEYS, api
        assert isinstance(result["available"], bool) and isinstance(result["summary"], str) and result["summary"]
        for device in result["devices"]:
            assert isinstance(device["name"], str) and isinstance(device["counted"], bool) and device["reason"]


def test_reported_env_lists_only_discovery_variables(tmp_path):
    data = run_probe("metal", env=clean_env(VK_DRIVER_FILES=str(tmp_path), SECRET_TOKEN="hunter2"))
    assert data["env"] == {"VK_DRIVER_FILES": str(tmp_path)}


def test_source_is_python_3_8_and_stdlib_only():
    source = PROBE.read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            imported.add(node.module.split(".")[0])
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported
    # newer-than-3.8 library calls that would only fail at run time
    for name in ("removeprefix", "removesuffix", "functools.cache(", "zip(strict", "math.lcm", "| None"):
        assert name not in source, name
