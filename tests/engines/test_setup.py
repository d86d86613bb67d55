"""scripts/real_engines.py without the network: which archive it names (the system's own, read from its apt
sources), what its apt configuration keeps private, and how a suite that cannot be had reaches the tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engines import harness

setup = harness.setup


def write_sources(etc: Path) -> None:
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list").write_text("# nothing here\n")
    (etc / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n"
        "URIs: http://mirror.example/debian-security\n"
        "Suites: bookworm-security\n"
        "Components: main\n"
        "\n"
        "Types: deb deb-src\n"
        "# a comment inside the stanza\n"
        "URIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main contrib\n"
        "Signed-By: /usr/share/keyrings/example.gpg\n"
    )
    (etc / "sources.list.d" / "other.list").write_text("deb https://vendor.example/apt stable main\n")
    (etc / "sources.list.d" / "off.sources.disabled").write_text("Types: deb\nURIs: http://wrong.example\n")


def test_the_archive_is_the_one_the_system_names(tmp_path, monkeypatch):
    write_sources(tmp_path)
    monkeypatch.setattr(setup, "_codename", lambda: "bookworm")
    assert setup.system_archive(tmp_path) == ("http://mirror.example/debian", "/usr/share/keyrings/example.gpg")


def test_a_one_line_source_and_the_default_keyring(tmp_path, monkeypatch):
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://mirror.example/debian bookworm main\n")
    monkeypatch.setattr(setup, "_codename", lambda: "bookworm")
    assert setup.system_archive(tmp_path) == ("http://mirror.example/debian", setup.DEFAULT_KEYRING)


def test_no_source_for_this_release_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "sources.list").write_text("deb http://mirror.example/debian bullseye main\n")
    monkeypatch.setattr(setup, "_codename", lambda: "bookworm")
    with pytest.raises(setup.SetupError, match="no 'deb' source for bookworm main"):
        setup.system_archive(tmp_path)


def test_the_apt_configuration_is_private(tmp_path):
    """Its own sources, lists, cache and preferences under the scratch dir; the system's dpkg status only read."""
    conf = setup._apt_conf(tmp_path, "http://mirror.example/debian", "/k.gpg", "sid")
    text = conf.read_text()
    for key in ("SourceList", "SourceParts", "Preferences", "PreferencesParts", "Parts"):
        assert f'Dir::Etc::{key} "{tmp_path}/apt/' in text
    assert f'Dir::State::Lists "{tmp_path}/apt/lists"' in text
    assert f'Dir::Cache "{tmp_path}/apt/cache"' in text
    assert 'Dir::State::status "/var/lib/dpkg/status"' in text
    assert (
        tmp_path / "apt/sources.list"
    ).read_text() == "deb [signed-by=/k.gpg] http://mirror.example/debian sid main\n"
    assert not any((tmp_path / "apt/preferences.d").iterdir())


def test_a_suite_that_cannot_be_had_is_recorded_with_the_reason(tmp_path, monkeypatch):
    def failing(argv, *, timeout, cwd=None):
        raise setup.SetupError(f"{argv[0]}: exit 100: E: The repository does not have a Release file.")

    monkeypatch.setattr(setup, "_run", failing)
    record = setup.fetch_suite(tmp_path, "sid", "http://mirror.example/debian", "/k.gpg", deadline=1e18)
    assert record["ok"] is False and "Release file" in record["reason"]
    assert json.loads((tmp_path / "sid/suite.json").read_text())["reason"] == record["reason"]
    assert not (tmp_path / "sid/debs").exists()  # nothing half-downloaded is kept


def test_the_tests_skip_with_the_suite_s_reason(tmp_path, monkeypatch):
    (tmp_path / "engines.json").write_text(
        json.dumps({"suites": {"sid": {"ok": False, "reason": "apt-get download: exit 100"}}})
    )
    monkeypatch.setenv("CGPU_REAL_ENGINES", str(tmp_path))
    monkeypatch.setattr(harness.os, "geteuid", lambda: 0)
    monkeypatch.setattr(harness.os, "access", lambda path, mode: True)
    found, reason = harness.suite("sid")
    assert found is None and reason == "suite sid could not be had: apt-get download: exit 100"
    found, reason = harness.suite("trixie")
    assert found is None and reason == "suite trixie was not set up"


def test_a_second_run_reuses_what_the_first_unpacked(tmp_path, monkeypatch):
    base = tmp_path / "trixie"
    for rel in setup.BINARIES.values():
        (base / "root" / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / "root" / rel).write_text("")
    (base / "suite.json").write_text(json.dumps({"suite": "trixie", "ok": True, "packages": {}}))

    def no_network(argv, *, timeout, cwd=None):
        raise AssertionError(f"ran {argv}")

    monkeypatch.setattr(setup, "_run", no_network)
    record = setup.fetch_suite(tmp_path, "trixie", "http://mirror.example/debian", "/k.gpg", deadline=1e18)
    assert record["ok"] and record["cached"]


def test_a_daemon_that_does_not_come_up_skips_its_tests_with_the_reason(tmp_path):
    """Asked again, it is not started again: every test that needs it skips with the same reason."""
    from tests.engines.conftest import RealEngines

    class Broken:
        starts = 0

        def start(self, *args):
            Broken.starts += 1
            raise RuntimeError("exited with status 1")

        def log(self):
            return "containerd: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found"

    engines = RealEngines(tmp_path)
    key = ("sid", "containerd", True)
    for _ in range(2):
        with pytest.raises(
            pytest.skip.Exception, match=r"(?s)containerd of sid \(cdi-on\) did not come up.*GLIBC_2\.38"
        ):
            engines._start(key, Broken())
    assert Broken.starts == 1
    engines.close()
