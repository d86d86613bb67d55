"""`cgpu probe --backend cdi --verify` as a user runs it: the static answer, the live one beside
it, and a plain account of what ran."""

from __future__ import annotations

import json

import pytest

from tests.conftest import validate_report

from .test_verify import _lvp_spec

pytestmark = pytest.mark.podman


def test_verify_json_puts_the_live_answer_beside_the_static_one(
    run_cli, probe_image, cdi_spec, tmp_path, no_leftover_containers
):
    name = f"{cdi_spec(_lvp_spec(tmp_path))}=dev0"
    code, out, err = run_cli("probe", "--backend", "cdi", "--verify", "--device", name, "--json")
    assert code == 0, err
    report = json.loads(out)
    validate_report(report)
    (entry,) = report["devices"]
    assert entry["name"] == name and entry["apis"] == entry["live_apis"] == []
    assert entry["live_status"] == "agrees"
    assert "llvmpipe" in entry["live_evidence"]["vulkan"] and "PoCL" in entry["live_evidence"]["opencl"]
    assert err == ""  # --json: no progress on stderr


def test_verify_human_output_says_what_ran_and_what_it_found(
    run_cli, probe_image, cdi_spec, tmp_path, no_leftover_containers
):
    name = f"{cdi_spec(_lvp_spec(tmp_path))}=dev0"
    code, out, err = run_cli("probe", "--backend", "cdi", "--verify", "--device", name, "--probe-image", probe_image)
    assert code == 0, err
    assert "LIVE (--verify)" in out
    row = next(line for line in out.splitlines() if line.startswith(name))
    assert row.endswith("- (agrees)")
    words = " ".join(out.split())  # the human output is wrapped to 80 columns when piped
    assert "ran cgpu's probe in 1 podman" in words and "1 agree(s) with the static answer" in words
    assert f"running the probe in a podman container with {name}" in err
