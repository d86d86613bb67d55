from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from cgpu.apis import API_ORDER, ordered
from cgpu.report import ReportBuilder
from tests.conftest import validate_report


def test_builder_fills_all_six_and_orders_containers():
    report = ReportBuilder("cdi")
    report.provide("opencl", "mounted")
    report.provide("cuda", "mounted")
    report.provide("cuda", "mounted twice")
    built = report.build()
    assert built["containers"] == ["cuda", "opencl"]
    assert list(built["evidence"]) == list(API_ORDER)
    assert "never reaches a Linux container" in built["evidence"]["metal"]
    validate_report(built)


def test_withhold_after_provide_removes_api():
    report = ReportBuilder("cdi")
    report.provide("vulkan", "icd")
    report.withhold("vulkan", "icd names lavapipe, a software driver")
    assert report.build()["containers"] == []


def test_unknown_api_is_rejected():
    with pytest.raises(ValueError):
        ReportBuilder("cdi").provide("glide", "x")
    with pytest.raises(ValueError):
        ordered(["cuda", "glide"])


def test_model_rejects_out_of_order_and_missing_evidence():
    built = ReportBuilder("cdi").build()
    with pytest.raises(ValidationError):
        validate_report({**built, "containers": ["vulkan", "cuda"]})
    with pytest.raises(ValidationError):
        validate_report({**built, "evidence": {"cuda": "x"}})
    with pytest.raises(ValidationError):
        validate_report({**built, "surprise": 1})


def test_schema_command_prints_json_schema(run_cli):
    code, out, err = run_cli("schema")
    assert code == 0, err
    schema = json.loads(out)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert set(schema["required"]) >= {"containers", "evidence", "backend", "devices", "problems"}


def test_version(run_cli):
    code, out, _ = run_cli("--version")
    assert code == 0 and out.startswith("cgpu ")


def test_option_of_another_backend_is_a_usage_error(run_cli):
    code, out, err = run_cli("probe", "--backend", "wsl", "--spec-dir", "/etc/cdi")
    assert code == 2
    assert "--spec-dir" in err and "Traceback" not in err
