"""containerd's configuration per release line where no real containerd of that line runs here (1.7.0-1.7.16,
2.3 and later): the rules as containerd's source has them (docs/cdi.md "containerd's configuration"). The lines
that do run here are checked against the real `containerd config dump` in tests/engines/test_containerd_config.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgpu.engines import containerd
from cgpu.engines.config import Config
from tests.cdi_backend import engine_files as ef
from tests.cdi_backend.test_installed import judge, judged, nvidia_node

MAIN = "/etc/containerd/config.toml"
CRI2 = '[plugins."io.containerd.grpc.v1.cri"]'
RUNTIME3 = "[plugins.'io.containerd.cri.v1.runtime']"


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))


def _read(files: dict[str, str], release: tuple[int, ...] | None) -> Config:
    def read(path: str) -> tuple[str | None, str | None, str]:
        return files.get(path), None, path

    def listdir(path: str) -> list[str]:
        return [name.rsplit("/", 1)[1] for name in files if name.rsplit("/", 1)[0] == path]

    return containerd.read_config(read, listdir, MAIN, release)


def _errors(config: Config) -> list[str]:
    return [message for severity, _, message in config.problems if severity == "error"]


def test_from_2_3_a_file_without_version_has_its_cri_tables_migrated_step_by_step():
    """2.3's LoadConfigWithPlugins runs the CRI runtime plugin's migration at every step from the file's own
    version: a version-1 file's `io.containerd.grpc.v1.cri` and `cri` tables count; up to 2.2 they do not."""
    for table in (CRI2, "[plugins.cri]"):
        files = {MAIN: f'{table}\nenable_cdi = false\ncdi_spec_dirs = ["/opt/cdi"]\n'}
        newer = _read(files, (2, 3, 0))
        assert (newer.enabled, newer.spec_dirs, newer.defaulted) == (False, ["/opt/cdi"], [])
        older = _read(files, (2, 2, 7))
        assert (older.enabled, older.spec_dirs) == (None, None)
        assert older.defaulted == ["enable_cdi", "cdi_spec_dirs"] and not _errors(older)


def test_an_unknown_release_is_read_as_the_newest_line():
    files = {MAIN: f"{CRI2}\nenable_cdi = false\n"}
    assert _read(files, None).enabled is False  # as 2.3 reads it


def test_from_2_3_a_drop_in_above_the_main_files_version_is_refused():
    files = {MAIN: 'version = 2\nimports = ["d.toml"]\n', "/etc/containerd/d.toml": f"version = 3\n{RUNTIME3}\n"}
    assert any("above the main file's 2" in message for message in _errors(_read(files, (2, 3, 1))))
    assert not _errors(_read(files, (2, 2, 7)))  # 2.2 has no such check


def test_a_config_version_above_the_lines_highest_is_refused():
    assert any("refuses config version 4" in m for m in _errors(_read({MAIN: "version = 4\n"}, (2, 1, 9))))
    assert not _errors(_read({MAIN: "version = 4\n"}, (2, 3, 0)))
    assert any("refuses config version 5" in m for m in _errors(_read({MAIN: "version = 5\n"}, (2, 3, 0))))


def test_containerd_1_7_refuses_version_3_from_1_7_17_and_reads_it_as_version_2_before():
    files = {MAIN: f"version = 3\n{CRI2}\nenable_cdi = true\n"}
    assert any("refuses config version 3" in m for m in _errors(_read(files, (1, 7, 17))))
    before = _read(files, (1, 7, 16))
    assert before.enabled is True and not _errors(before)


def test_a_negative_version_is_an_error_not_a_long_migration():
    assert any("not a config version" in m for m in _errors(_read({MAIN: "version = -1000000000000\n"}, (2, 3, 0))))


def test_1_7_names_the_import_whose_cri_table_counts_as_the_file_to_change(tmp_path: Path):
    root = nvidia_node(
        tmp_path,
        {
            "/usr/bin/containerd": ef.upstream_containerd("v1.7.27", "v0.8.1"),
            MAIN: f'version = 2\nimports = ["conf.d/*.toml"]\n{CRI2}\nenable_cdi = true\n',
            "/etc/containerd/conf.d/99-nvidia.toml": f"version = 2\n{CRI2[:-1]}.containerd.runtimes.nvidia]\n",
        },
    )
    report = judge(root)
    entry = judged(report)
    drop_in = str(root / "etc/containerd/conf.d/99-nvidia.toml")
    assert entry["cdi_enabled"] is False and report["containers"] == []  # the drop-in replaced the whole table
    assert entry["config_files"] == [str(root / "etc/containerd/config.toml"), drop_in]
    assert entry["defaulted"] == ["enable_cdi", "cdi_spec_dirs"]
    off = next(p for p in report["problems"] if "CDI switched off" in p["message"])
    assert off["source"] == drop_in and f"of {drop_in}" in off["message"]


VALUES = {  # a line of a CRI table -> (its setting, what cgpu reads of it: enabled, or the first spec dir)
    "enable_cdi = true": ("enable_cdi", True),
    "enable_cdi = false": ("enable_cdi", False),
    'cdi_spec_dirs = ["/a"]': ("cdi_spec_dirs", "/a"),
    'cdi_spec_dirs = ["/b"]': ("cdi_spec_dirs", "/b"),
}
FILE = st.lists(st.sampled_from(sorted(VALUES)), max_size=2, unique_by=lambda line: VALUES[line][0])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), FILE), min_size=1, max_size=5))
def test_1_7_replaces_and_2_x_merges_the_cri_table_of_every_import(tables: list[list[str] | None]):
    """Files of the same version, each one's CRI table (None: no table at all): 1.7 takes the last file's whole
    table, 2.x the last value of each setting; a setting nobody sets is defaulted."""
    names = [MAIN] + [f"/etc/containerd/conf.d/{n:02}.toml" for n in range(1, len(tables))]
    files = {}
    for number, (name, lines) in enumerate(zip(names, tables)):
        head = 'version = 2\nimports = ["conf.d/*.toml"]\n' if number == 0 else "version = 2\n"
        files[name] = head + ("" if lines is None else "\n".join([CRI2, *lines]) + "\n")

    def value(lines: list[str], key: str) -> object:
        return next((VALUES[line][1] for line in lines if VALUES[line][0] == key), None)

    for release, expected_from in (((1, 7, 27), "replace"), ((2, 1, 9), "merge")):
        config = _read(files, release)
        for key in ("enable_cdi", "cdi_spec_dirs"):
            if expected_from == "replace":
                last = [lines for lines in tables if lines is not None]
                want = value(last[-1], key) if last else None
            else:
                values = [value(lines, key) for lines in tables if lines is not None]
                want = next((v for v in reversed(values) if v is not None), None)
            got = config.enabled if key == "enable_cdi" else (config.spec_dirs[0] if config.spec_dirs else None)
            assert got == want, (release, key, files)
            assert (key in config.defaulted) is (want is None)
