"""CUDA through a fake libcuda.so.1 that returns chosen codes: each failure named, with its fix."""

from __future__ import annotations

import pytest

from tests.probe.conftest import clean_env, run_probe


def cuda(library_dir, **fake: str) -> dict:
    env = clean_env(LD_LIBRARY_PATH=str(library_dir), **{f"FAKE_CUDA_{k.upper()}": v for k, v in fake.items()})
    return run_probe("cuda", env=env)["apis"]["cuda"]


def test_two_devices_are_counted_with_the_library_actually_loaded(fake_cuda):
    result = cuda(fake_cuda, init="0", count="2")
    assert result["available"] is True and result["error"] is None
    assert result["library"] == str(fake_cuda / "libcuda.so.1")
    assert result["driver_version"] == "12.4"
    assert [d["name"] for d in result["devices"]] == ["Fake GPU 0", "Fake GPU 1"]
    assert all(d["counted"] and d["compute_capability"] == "9.0" for d in result["devices"])
    assert result["devices"][0]["total_memory"] == 80 << 30
    # the driver's printf went to stderr, not into the JSON answer
    assert "chatter on stdout" in result["stderr"]


@pytest.mark.parametrize(
    ("code", "name", "hint"),
    [
        ("100", "CUDA_ERROR_NO_DEVICE", "/dev/nvidiaN"),
        ("34", "CUDA_ERROR_STUB_LIBRARY", "stub"),
        ("803", "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "kernel module"),
        ("804", "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward-compat"),
        ("999", "CUDA_ERROR_UNKNOWN", "nvidia-uvm"),
        ("222", "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "refused"),  # named by the driver's cuGetErrorName
    ],
)
def test_init_failures_are_named_with_their_fix(fake_cuda, code, name, hint):
    result = cuda(fake_cuda, init=code, count="2")
    assert result["available"] is False and result["devices"] == []
    assert result["error"] == name
    assert f"{name} ({code})" in result["summary"]
    assert hint in result["summary"]
    assert result["library"] == str(fake_cuda / "libcuda.so.1")


def test_no_device_mentions_cuda_visible_devices_when_set(fake_cuda):
    env = clean_env(LD_LIBRARY_PATH=str(fake_cuda), FAKE_CUDA_INIT="100", CUDA_VISIBLE_DEVICES="")
    data = run_probe("cuda", env=env)
    assert "CUDA_VISIBLE_DEVICES=''" in data["apis"]["cuda"]["summary"]
    assert data["env"]["CUDA_VISIBLE_DEVICES"] == ""


def test_zero_devices_after_init_is_not_available(fake_cuda):
    result = cuda(fake_cuda, init="0", count="0")
    assert result["available"] is False and result["error"] is None
    assert "no CUDA device" in result["summary"]


def test_the_bare_stub_name_is_never_loaded(build, tmp_path):
    """The toolkit ships its stub as libcuda.so; only libcuda.so.1 (the driver's soname) is tried."""
    stub = build("fake_libcuda.c", "libcuda.so")
    result = cuda(stub.parent, init="34")
    assert result["error"] == "library_not_found"
    assert result["library"] is None


def test_a_library_that_exists_but_cannot_load_is_named(tmp_path):
    """E.g. a glibc driver in a musl image, or a missing dependency: not the same as absent."""
    (tmp_path / "libcuda.so.1").write_bytes(b"not an ELF file\n" * 64)
    result = cuda(tmp_path)
    assert result["error"] == "library_load_failed"
    assert "invalid ELF header" in result["summary"]
