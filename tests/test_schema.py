"""The two JSON Schemas (`cgpu schema`, `cgpu schema image-check`): every field described, the
device shapes tied to their backend, and what the probe may report of a device all in them.
(Every JSON answer the tests' CLI runs print is validated against them: tests/conftest.py.)"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from cgpu.gpu_probe.answer import PROBE_DETAILS
from cgpu.model import ProbeDetails, report_schema
from cgpu.report import ReportBuilder
from tests.conftest import validate_report


def _properties(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = [("", schema)] + [(name, sub) for name, sub in schema.get("$defs", {}).items()]
    return [(f"{owner}.{field}", spec) for owner, sub in found for field, spec in (sub.get("properties") or {}).items()]


@pytest.mark.parametrize("what", ["report", "image-check"])
def test_every_field_is_described(run_cli, what):
    code, out, err = run_cli("schema", what)
    assert code == 0, err
    schema = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    fields = _properties(schema)
    assert len(fields) > 10
    undescribed = [name for name, spec in fields if not spec.get("description")]
    assert undescribed == []
    assert all(
        sub.get("additionalProperties") is False for sub in [schema, *schema["$defs"].values()] if "properties" in sub
    )


def test_schema_without_argument_is_the_report(run_cli):
    assert json.loads(run_cli("schema")[1]) == json.loads(run_cli("schema", "report")[1])


def test_image_check_status_tells_unreadable_from_cannot_tell(run_cli):
    schema = json.loads(run_cli("schema", "image-check")[1])
    status, verdict = schema["properties"]["status"], schema["properties"]["verdict"]
    assert set(status["enum"]) == {"checked", "unreadable", "probe_failed", "internal_error"}
    assert set(verdict["enum"]) == {"yes", "no", "unknown"}
    assert "unreadable" in status["description"] and "cannot tell" in verdict["description"]


def test_the_probes_device_details_are_the_models_fields():
    assert set(PROBE_DETAILS) == set(ProbeDetails.model_fields)


def _cdi_report_with(device: dict[str, Any]) -> dict[str, Any]:
    report = ReportBuilder("cdi").build()
    return {**report, "devices": [device]}


CDI_DEVICE = {"name": "a.com/gpu=0", "apis": [], "status": "ok", "spec": "/etc/cdi/a.yaml", "checks": {}}


@pytest.mark.parametrize(
    "device",
    [
        {**CDI_DEVICE, "surprise": 1},  # an undocumented field
        {**CDI_DEVICE, "status": "fine"},
        {**CDI_DEVICE, "live_status": "maybe"},
        {"name": "x", "apis": [], "status": "counted", "reason": ""},  # a krunkit device in a cdi report
    ],
)
def test_a_device_that_is_not_its_backends_shape_is_rejected(device):
    validate_report(_cdi_report_with(CDI_DEVICE))
    data = _cdi_report_with(device)
    with pytest.raises(Exception):  # noqa: B017 - the model's or the JSON Schema's error
        validate_report(data)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, report_schema())


@pytest.mark.parametrize("what", ["report", "image-check"])
def test_the_schema_lists_every_problem_kind_with_its_meaning(run_cli, what):
    from cgpu.problem import KINDS

    problem = json.loads(run_cli("schema", what)[1])["$defs"]["Problem"]
    kind = problem["properties"]["kind"]
    assert kind["enum"] == list(KINDS) and kind["default"] == "other"
    assert all(f"`{name}`: {meaning}" in kind["description"] for name, meaning in KINDS.items())
    assert problem["required"] == ["severity", "source", "message"]  # additive: older reports stay valid
