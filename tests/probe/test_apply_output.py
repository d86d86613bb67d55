"""check_answer reads untrusted probe JSON (from any container): only a consistent,
well-formed 'available with a counted device' provides an API; everything else is withheld
with a problem, and nothing raises."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgpu.gpu_probe.answer import apply_answer, check_answer
from cgpu.report import ReportBuilder
from tests.conftest import validate_report


def api(available=False, summary="nothing here", error=None, devices=()):
    return {
        "available": available,
        "summary": summary,
        "library": None,
        "error": error,
        "devices": list(devices),
        "stderr": "",
    }


GOOD = {
    "probe_version": 1,
    "platform": "linux-x86_64",
    "python": "3.12.3",
    "libc": "glibc 2.39",
    "env": {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"},
    "device_nodes": ["/dev/nvidia0"],
    "apis": {
        "cuda": api(
            True,
            "CUDA 13.0 works with 1 device(s): NVIDIA H200",
            devices=[
                {
                    "name": "NVIDIA H200",
                    "counted": True,
                    "reason": "a CUDA device",
                    "compute_capability": "9.0",
                    "total_memory": 150 << 30,
                }
            ],
        ),
        "rocm": api(error="library_not_found"),
        "vulkan": api(
            False,
            "Vulkan has no usable GPU, only: llvmpipe",
            devices=[
                {
                    "name": "llvmpipe (LLVM 15.0.6, 256 bits)",
                    "counted": False,
                    "reason": "lavapipe/llvmpipe",
                    "type": 4,
                    "driver_id": 13,
                }
            ],
        ),
        "opencl": api(error="CL_PLATFORM_NOT_FOUND_KHR", summary="no ICD registered"),
        "directml": api(error="no_device_node"),
        "metal": api(summary="never"),
    },
}


def applied(data, source="container test-image"):
    report = ReportBuilder("local")
    apply_answer(report, check_answer(data, source=source))
    built = report.build()
    validate_report(built)
    return built


def test_good_output_provides_only_counted_apis_with_evidence_and_devices():
    built = applied(GOOD)
    assert built["containers"] == ["cuda"]
    assert built["evidence"]["cuda"] == "container test-image: CUDA 13.0 works with 1 device(s): NVIDIA H200"
    assert "llvmpipe" in built["evidence"]["vulkan"]
    assert "never reaches a Linux container" in built["evidence"]["metal"]
    h200, llvmpipe = built["devices"]
    assert h200["apis"] == ["cuda"] and h200["counted"] is True and h200["compute_capability"] == "9.0"
    assert llvmpipe["apis"] == [] and llvmpipe["counted"] is False and llvmpipe["api"] == "vulkan"
    messages = [(p["severity"], p["message"]) for p in built["problems"]]
    assert ("info", "discovery is steered by NVIDIA_DRIVER_CAPABILITIES=compute,utility") in messages
    assert ("warning", "opencl driver error CL_PLATFORM_NOT_FOUND_KHR: no ICD registered") in messages
    assert all(p["source"] == "container test-image" for p in built["problems"])


def test_unknown_version_withholds_everything_with_one_error():
    built = applied({**GOOD, "probe_version": 2})
    assert built["containers"] == []
    [problem] = built["problems"]
    assert problem["severity"] == "error" and "version 2" in problem["message"]
    assert "version 2" in built["evidence"]["cuda"]


def test_not_an_object_or_no_version_is_an_error():
    for data in (None, [], "probe", {"apis": GOOD["apis"]}, {**GOOD, "probe_version": True}, {**GOOD, "apis": []}):
        built = applied(data)
        assert built["containers"] == []
        assert [p["severity"] for p in built["problems"]] == ["error"]


def test_available_without_a_counted_device_is_withheld():
    data = copy.deepcopy(GOOD)
    data["apis"]["vulkan"]["available"] = True
    built = applied(data)
    assert "vulkan" not in built["containers"]
    assert any("lists no device it counted" in p["message"] for p in built["problems"])


def test_counted_device_without_available_is_withheld():
    data = copy.deepcopy(GOOD)
    data["apis"]["cuda"]["available"] = False
    assert applied(data)["containers"] == []


def test_truthy_non_bools_do_not_count():
    data = copy.deepcopy(GOOD)
    data["apis"]["cuda"]["available"] = "yes"
    data["apis"]["cuda"]["devices"][0]["counted"] = 1
    assert applied(data)["containers"] == []


def test_metal_is_never_provided_even_if_claimed():
    data = copy.deepcopy(GOOD)
    data["apis"]["metal"] = api(True, "Metal!", devices=[{"name": "M2", "counted": True, "reason": "x"}])
    built = applied(data)
    assert "metal" not in built["containers"]
    assert any("Metal" in p["message"] for p in built["problems"])


def test_probe_failures_become_warnings():
    data = copy.deepcopy(GOOD)
    data["apis"]["vulkan"] = api(summary="the vulkan probe crashed with signal 11 (SIGSEGV)", error="crashed")
    built = applied(data)
    assert ("warning", "vulkan: the vulkan probe crashed with signal 11 (SIGSEGV)") in [
        (p["severity"], p["message"]) for p in built["problems"]
    ]


def test_hostile_strings_and_details_are_cleaned_and_capped():
    data = copy.deepcopy(GOOD)
    device = data["apis"]["cuda"]["devices"][0]
    device.update(
        {
            "name": "GPU\x1b[31m\nred" + "x" * 10_000,
            "nested": {"a": [1]},
            "Bad-Key": "v",
            "apis": ["metal"],
            "huge": 10**40,
            "nan": float("nan"),
        }
    )
    data["apis"]["cuda"]["summary"] = "s" * 100_000
    built = applied(data)
    entry = built["devices"][0]
    assert "\x1b" not in entry["name"] and "\n" not in entry["name"] and len(entry["name"]) <= 200
    assert entry["apis"] == ["cuda"]
    for key in ("nested", "Bad-Key", "huge", "nan"):
        assert key not in entry
    assert len(built["evidence"]["cuda"]) < 600


def test_too_many_devices_are_cut():
    data = copy.deepcopy(GOOD)
    data["apis"]["vulkan"]["devices"] = [{"name": f"d{i}", "counted": False, "reason": "r"} for i in range(1000)]
    built = applied(data)
    assert len(built["devices"]) == 1 + 64
    assert any("kept the first 64" in p["message"] for p in built["problems"])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=30,
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["cuda", "rocm", "vulkan", "opencl", "directml", "metal", "x"]),
        json_values
        | st.fixed_dictionaries(
            {
                "available": json_values,
                "summary": json_values,
                "devices": st.lists(
                    st.dictionaries(st.sampled_from(["name", "counted", "reason", "type"]), json_values), max_size=3
                ),
            }
        ),
        max_size=6,
    )
)
def test_any_apis_object_gives_a_valid_report(apis):
    built = applied({"probe_version": 1, "apis": apis})
    for name in built["containers"]:
        entry = apis[name]
        assert entry["available"] is True
        assert any(isinstance(d, dict) and d.get("counted") is True for d in entry["devices"])


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_any_json_value_gives_a_valid_report(data):
    applied(data)


def test_device_details_are_the_documented_ones_with_their_types():
    data = copy.deepcopy(GOOD)
    device = data["apis"]["cuda"]["devices"][0]
    device.update({"index": "0", "total_memory": -1, "integrated": 1, "compute_capability": "9.0", "driver_id": None})
    built = applied(data)
    entry = built["devices"][0]
    assert entry["compute_capability"] == "9.0" and entry["driver_id"] is None  # Vulkan's "no driver id" is kept
    for key in ("index", "total_memory", "integrated"):  # of the wrong type: dropped
        assert key not in entry
    others = [d for d in built["devices"] if d is not entry]
    assert others and all("driver_id" not in d for d in others if d["api"] != "vulkan")  # absent stays absent
