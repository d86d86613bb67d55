"""ROCm through a fake HSA runtime: GPU agents count, the CPU agent never does, init failures are named."""

from __future__ import annotations

from tests.probe.conftest import clean_env, run_probe


def rocm(library_dir, **fake: str) -> dict:
    env = clean_env(LD_LIBRARY_PATH=str(library_dir), **{f"FAKE_HSA_{k.upper()}": v for k, v in fake.items()})
    return run_probe("rocm", env=env)["apis"]["rocm"]


def test_gpu_agents_count_and_the_cpu_agent_does_not(fake_hsa):
    result = rocm(fake_hsa, gpus="2")
    assert result["available"] is True
    assert result["library"] == str(fake_hsa / "libhsa-runtime64.so.1")
    assert [(d["name"], d["gfx_target"], d["counted"]) for d in result["devices"]] == [
        ("Radeon RX 7900 XTX", "gfx1100", True)
    ] * 2


def test_only_a_cpu_agent_is_not_available(fake_hsa):
    result = rocm(fake_hsa, gpus="0")
    assert result["available"] is False and result["devices"] == []
    assert "only CPU agents" in result["summary"]


def test_missing_kfd_is_named(fake_hsa):
    result = rocm(fake_hsa, init="0x1008")
    assert result["error"] == "HSA_STATUS_ERROR_OUT_OF_RESOURCES"
    assert "/dev/kfd" in result["summary"]
