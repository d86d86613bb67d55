"""Which engine judges the specs: the host's by default (with or without --root), its version
remembered briefly, and the verdict naming it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cgpu.backends import run_backend
from cgpu.engines.option import HOST_ENGINE_FILE, host_engines, parse_engine
from tests.cdi_backend.helpers import HOSTS, SAMPLES


def _stand_in_podman(bin_dir: Path, version: str) -> Path:
    """A `podman` that answers `podman version` like the real one and counts its calls."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "podman"
    script.write_text(f'#!/bin/sh\necho called >> "{bin_dir}/calls"\necho {version}\n')
    script.chmod(0o755)
    return script


def _calls(bin_dir: Path) -> int:
    calls = bin_dir / "calls"
    return len(calls.read_text().splitlines()) if calls.exists() else 0


@pytest.fixture
def only_stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH with nothing but the stand-ins (and sh), and a cache dir of this test's own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))
    return bin_dir


def _report(root: Path | str = HOSTS / "nvidia-580", **options: object) -> dict:
    given = {"spec_dirs": [str(SAMPLES / "nvidia-current/spec")], "root": str(root), **options}
    return run_backend("cdi", given).build()


def test_without_engine_the_hosts_engine_judges_on_the_host(only_stand_ins: Path):
    _stand_in_podman(only_stand_ins, "4.3.1")
    report = _report(root="/")  # no --root: the host's engine
    assert report["containers"] == []
    assert [d["status"] for d in report["devices"]] == ["blocked"] * 3
    assert "podman 4.3.1 ignores its spec" in report["devices"][0]["reason"]
    messages = [p["message"] for p in report["problems"]]
    assert any(
        m.startswith(
            "podman 4.3.1 judged the specs (the host's engine, --engine auto): it reads cdiVersion up to 0.5.0"
        )
        for m in messages
    )
    [podman] = report["engines"]
    assert podman["judged"] and podman["max_cdi_version"] == "0.5.0" and "podman version" in podman["sources"]
    assert _report(root="/", engine="none")["engines"] == []
    bare = _report(root="/", engine="podman")  # the host's podman, by name
    assert "podman 4.3.1 judged the specs (the host's engine, --engine podman)" in str(bare["problems"])
    docker = _report(root="/", engine="docker")  # none here: the newest rules, said so
    assert any(p["source"] == "--engine docker" and "no docker answered" in p["message"] for p in docker["problems"])


def test_under_root_the_roots_engines_judge_never_the_hosts(only_stand_ins: Path):
    _stand_in_podman(only_stand_ins, "4.3.1")  # the host's: never asked under --root
    report = _report()
    assert report["containers"] == ["cuda", "vulkan", "opencl"] and report["engines"] == []
    warning = next(p for p in report["problems"] if p["source"] == "--engine auto")
    assert "is installed under" in warning["message"] and "newest CDI rules" in warning["message"]
    assert _calls(only_stand_ins) == 0
    assert _report(engine="none")["containers"] == ["cuda", "vulkan", "opencl"]


def test_no_engine_answering_means_the_newest_rules_with_a_warning(only_stand_ins: Path):
    report = _report(root="/")  # no podman, no docker on PATH
    warning = next(p for p in report["problems"] if p["source"] == "--engine auto")
    assert warning["severity"] == "warning" and "newest CDI rules" in warning["message"]


def test_the_engine_version_is_remembered_until_the_binary_changes(only_stand_ins: Path, tmp_path: Path):
    script = _stand_in_podman(only_stand_ins, "4.3.1")
    assert host_engines(timeout=10) == ([("podman", "4.3.1")], [])
    assert host_engines(timeout=10) == ([("podman", "4.3.1")], [])
    assert _calls(only_stand_ins) == 1
    assert (tmp_path / "cache" / HOST_ENGINE_FILE).is_file()
    script.write_text(script.read_text().replace("4.3.1", "5.5.2"))  # an upgrade: another size, another mtime
    os.utime(script, ns=(1, 1))
    assert host_engines(timeout=10) == ([("podman", "5.5.2")], [])
    assert _calls(only_stand_ins) == 2
    (tmp_path / "cache" / HOST_ENGINE_FILE).write_text("{not json")  # a damaged cache is asked past
    assert host_engines(timeout=10) == ([("podman", "5.5.2")], [])
    data = json.loads((tmp_path / "cache" / HOST_ENGINE_FILE).read_text())
    data["at"] -= 3600  # too old
    (tmp_path / "cache" / HOST_ENGINE_FILE).write_text(json.dumps(data))
    host_engines(timeout=10)
    assert _calls(only_stand_ins) == 4
    # An engine that does not answer (busy, broken): remembered for 30 s only, then asked again.
    script.write_text(f'#!/bin/sh\necho called >> "{only_stand_ins}/calls"\nexit 125\n')
    assert host_engines(timeout=10)[0] == [] and host_engines(timeout=10)[0] == []
    assert _calls(only_stand_ins) == 5
    data = json.loads((tmp_path / "cache" / HOST_ENGINE_FILE).read_text())
    data["at"] -= 31
    (tmp_path / "cache" / HOST_ENGINE_FILE).write_text(json.dumps(data))
    host_engines(timeout=10)
    assert _calls(only_stand_ins) == 6


def test_this_hosts_podman_judges_a_0_7_0_spec_without_engine(run_cli, tmp_path: Path):
    """On a host with podman 4.3.1 (Debian 12, what the CI installs) the toolkit's 0.7.0 spec is unresolvable."""
    podman = shutil.which("podman")
    if podman is None:
        pytest.skip("podman is not installed")
    found, _ = host_engines(timeout=30, cache_dir=str(tmp_path / "probe-cache"))
    if found[:1] != [("podman", "4.3.1")]:
        pytest.skip(f"this host's engines are {found}, not podman 4.3.1")
    code, out, err = run_cli(
        "probe",
        "--backend",
        "cdi",
        "--spec-dir",
        "cdi-samples/nvidia-current/spec",
        "--json",
        env={"CGPU_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["containers"] == []
    assert any("podman 4.3.1 judged the specs" in p["message"] for p in report["problems"])
    assert "podman 4.3.1 ignores the spec" in report["evidence"]["cuda"]


@given(st.text(max_size=40))
def test_any_engine_text_parses_or_is_refused_with_a_message(text: str):
    try:
        option = parse_engine(text)
    except ValueError as exc:
        assert "--engine" in str(exc) or "engine" in str(exc)
        return
    assert parse_engine(str(option)) == option  # what it prints parses back to the same choice
    assert option.mode in ("auto", "none", "named")


def test_a_remembered_engine_another_user_could_write_is_not_believed(only_stand_ins: Path, tmp_path: Path):
    """Issue 18's cache rules: a planted answer would choose the engine that judges the specs."""
    _stand_in_podman(only_stand_ins, "4.3.1")
    assert host_engines(timeout=10) == ([("podman", "4.3.1")], [])
    cache = tmp_path / "cache"
    remembered = cache / HOST_ENGINE_FILE
    planted = json.loads(remembered.read_text())
    planted["found"] = [["podman", "9.9.9"]]
    remembered.write_text(json.dumps(planted))
    assert host_engines(timeout=10) == ([("podman", "9.9.9")], [])  # a file of ours: believed
    remembered.chmod(0o666)  # writable by others
    assert host_engines(timeout=10) == ([("podman", "4.3.1")], [])
    remembered.unlink()
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(json.dumps(planted))
    remembered.symlink_to(elsewhere)  # a link: never followed
    assert host_engines(timeout=10) == ([("podman", "4.3.1")], [])
    assert elsewhere.read_text() == json.dumps(planted)  # and never written through
    remembered.unlink()
    remembered.write_text(json.dumps(planted))
    cache.chmod(0o777)  # a dir others can write: its files prove nothing
    try:
        assert host_engines(timeout=10) == ([("podman", "4.3.1")], [])
    finally:
        cache.chmod(0o700)


def test_the_remembered_engine_is_asked_again_when_docker_host_or_container_host_changes(
    only_stand_ins: Path, monkeypatch: pytest.MonkeyPatch
):
    """Issue 21: for 300 s after a run without a daemon, a run pointed at a live one was judged by
    the remembered answer. What decides the answer is the key: the binaries and the environment."""
    _stand_in_podman(only_stand_ins, "4.3.1")
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("CONTAINER_HOST", raising=False)
    host_engines(timeout=10)
    host_engines(timeout=10)
    assert _calls(only_stand_ins) == 1
    monkeypatch.setenv("CONTAINER_HOST", "unix:///run/user/1000/podman/podman.sock")
    host_engines(timeout=10)
    assert _calls(only_stand_ins) == 2
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/docker.sock")
    host_engines(timeout=10)
    host_engines(timeout=10)
    assert _calls(only_stand_ins) == 3
    monkeypatch.delenv("DOCKER_HOST")
    host_engines(timeout=10)  # back to an earlier environment: the one remembered answer is for another key
    assert _calls(only_stand_ins) == 4


def _stand_in_docker(bin_dir: Path, version: str, spec_dirs: str) -> None:
    """A `docker` whose daemon answers `docker version` and `docker info` (CDISpecDirs) like a real one."""
    script = bin_dir / "docker"
    script.write_text(
        f'#!/bin/sh\necho "$1" >> "{bin_dir}/docker-calls"\n'
        f"case \"$1\" in version) echo {version};; info) echo '{spec_dirs}';; *) exit 1;; esac\n"
    )
    script.chmod(0o755)


@pytest.mark.parametrize(
    ("spec_dirs", "enabled"), [('["/etc/cdi","/var/run/cdi"]', True), ("[]", False), ("null", False)]
)
def test_a_docker_daemon_says_whether_cdi_is_on_wherever_it_runs(
    only_stand_ins: Path, monkeypatch: pytest.MonkeyPatch, spec_dirs: str, enabled: bool
):
    """Issue 21: Docker 25.0-28.1 injects CDI devices only with features.cdi; a daemon elsewhere
    (DOCKER_HOST) says so itself in `docker info` (CDISpecDirs empty: off)."""
    monkeypatch.setenv("DOCKER_HOST", "tcp://docker.invalid:2375")
    _stand_in_docker(only_stand_ins, "27.5.1", spec_dirs)
    spec = only_stand_ins.parent / "specs"
    spec.mkdir()
    shutil.copy(SAMPLES / "nvidia-current/spec/nvidia.yaml", spec)
    report = run_backend("cdi", {"spec_dirs": [str(spec)], "root": "/"}).build()
    [docker] = report["engines"]
    assert docker["cdi_enabled"] is enabled and "docker info" in docker["sources"]
    if not enabled:
        assert report["containers"] == [] and "CDI switched off" in report["evidence"]["cuda"]
    else:
        assert "docker 27.5.1 has CDI off" not in str(report["problems"])
    calls = (only_stand_ins / "docker-calls").read_text().split()
    run_backend("cdi", {"spec_dirs": [str(spec)], "root": "/"})  # remembered: neither asked again
    assert (only_stand_ins / "docker-calls").read_text().split() == calls == ["version", "info"]


@pytest.mark.parametrize("version", ["3.1.0", "3.4.4"])
def test_podman_3_gives_no_container_a_cdi_device(version: str):
    """Ubuntu 22.04's podman 3.4.4 with nvidia-ctk's spec: `podman run --device nvidia.com/gpu=0` fails with
    `stat nvidia.com/gpu=0: no such file or directory` (podman#20257, #24474): 3.2-3.4 carry a 2021 CDI draft
    that reads only *.json in its own format and fails every vendor/class=name request; 3.0-3.1 have no CDI."""
    report = _report(engine=f"podman@{version}")
    assert report["containers"] == [] and report["apis"]["cuda"]["state"] == "absent"
    [problem] = [p for p in report["problems"] if p["kind"] == "cdi-off"]
    assert f"podman {version} reads no spec in the CDI format" in problem["message"]
    assert "podman#20257" in report["evidence"]["cuda"]
    assert _report(engine="podman@5.4.2")["apis"]["cuda"]["state"] == "provided"  # the released library
