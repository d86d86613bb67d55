"""scan_spec_dirs under hypothesis: directories of mutated real specs, random YAML and bytes
never make it raise, and every file that does not parse is named. scripts/fuzz_cdi.py runs the
same properties for minutes; this is its CI-sized budget."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from cgpu.cdi.parse import SpecError, parse_spec
from scripts.fuzz_cdi import check_scan, outcome_of, spec_bytes, spec_dirs


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec_dirs)
def test_scanning_any_directory_contents(dirs):
    assert check_scan(dirs).startswith("scan: ")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec_bytes)
def test_parsing_mutated_real_specs(data):
    assert outcome_of(data)


def test_a_control_character_is_not_called_bad_utf8():
    with pytest.raises(SpecError) as raised:
        parse_spec(b'cdiVersion: "0.5.0"\nkind: example.com/gpu\x00\n', path="/etc/cdi/x.yaml")
    assert "not UTF-8" not in str(raised.value) and "control character" in str(raised.value)
