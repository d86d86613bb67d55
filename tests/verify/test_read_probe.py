"""What comes out of a probe container is untrusted: any bytes give an answer or a reason, never
an exception, and never an answer when the output is not the probe's."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgpu.backends.cdi.verify import _read_probe
from cgpu.report import ReportBuilder

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
api_entries = st.fixed_dictionaries(
    {"available": st.booleans(), "summary": st.text(max_size=40)},
    optional={"devices": st.lists(st.dictionaries(st.sampled_from(["name", "counted", "reason"]), json_values))},
)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_give_an_answer_or_a_reason(output):
    result = _read_probe(ReportBuilder("cdi"), "example.com/gpu=0", output)
    assert isinstance(result, (str, tuple))


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_json_that_is_not_a_probe_answer_is_a_reason(value):
    result = _read_probe(ReportBuilder("cdi"), "example.com/gpu=0", json.dumps(value).encode())
    assert isinstance(result, str)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["cuda", "rocm", "vulkan", "opencl", "directml", "metal"]), api_entries))
def test_probe_shaped_answers_give_canonical_apis_and_evidence_for_all(apis):
    report = ReportBuilder("cdi")
    result = _read_probe(report, "example.com/gpu=0", json.dumps({"probe_version": 1, "apis": apis}).encode())
    assert isinstance(result, tuple)
    live_apis, evidence, _devices, _stalled = result
    assert "metal" not in live_apis
    assert set(evidence) == {"cuda", "rocm", "vulkan", "opencl", "directml", "metal"}
    for api in live_apis:  # available alone is not enough: a counted device must be listed
        assert apis[api]["available"] is True
        assert any(isinstance(d, dict) and d.get("counted") is True for d in apis[api].get("devices", []))
