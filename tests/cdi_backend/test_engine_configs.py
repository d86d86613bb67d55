"""CRI-O's, podman's and Docker's configuration read as each release of the engine reads it (docs/cdi.md
"Engines: as installed and configured"): which files count and in which order, which settings are honoured,
the defaults, and the release rows of the old releases. The rules come from each engine's source at its tags
(cri-o `pkg/config`, containers/common `pkg/config`, podman `libpod`, moby `cmd/dockerd`); where the real
engine runs here (`dockerd --validate`), it is the oracle."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cgpu.engines import crio, docker, podman
from cgpu.engines.installed import Files, with_version
from cgpu.engines.registry import engine, max_cdi_version
from tests.cdi_backend import engine_files as ef
from tests.cdi_backend.test_installed import ALL, judge, judged, nvidia_node

REAL_ENGINES = Path(os.environ.get("CGPU_REAL_ENGINES", Path.home() / ".cache/cgpu-real-engines"))


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))


def node_files(tmp_path: Path, files: dict[str, str]) -> Files:
    root = tmp_path / "node"
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    root.mkdir(exist_ok=True)
    return Files(str(root))


def shown(files: Files, *paths: str) -> list[str]:
    return [files.shown(path) for path in paths]


# --- CRI-O ------------------------------------------------------------------------------------------


def test_crio_reads_every_file_of_crio_conf_d_in_the_order_its_walk_takes_them(tmp_path: Path):
    """cri-o `UpdateFromPath` walks crio.conf.d with filepath.Walk: every file whatever its suffix (nvidia-ctk
    writes 99-nvidia.toml), names in byte order, a subfolder's files where its name sorts; crio.conf first."""
    files = node_files(
        tmp_path,
        {
            "/etc/crio/crio.conf": "[crio.runtime]\ncdi_spec_dirs = ['/main']\n",
            "/etc/crio/crio.conf.d/10-crio.conf": "[crio.runtime]\ncdi_spec_dirs = ['/ten']\n",
            "/etc/crio/crio.conf.d/50-site/gpu.conf": "[crio.runtime]\ncdi_spec_dirs = ['/site']\n",
            "/etc/crio/crio.conf.d/99-nvidia.toml": (
                '[crio.runtime]\ndefault_runtime = "nvidia"\n[crio.runtime.runtimes.nvidia]\n'
                'runtime_path = "/usr/bin/nvidia-container-runtime"\n'
            ),
            "/etc/crio/crio.conf.d/Z-last": "[crio.runtime]\ncdi_spec_dirs = ['/last']\n",
        },
    )
    (Path(files.root) / "etc/crio/crio.conf.d/60-empty").mkdir()
    config = crio.ENGINE.read_configuration(files.read_config, files.listdir, major=1, flavour="", on_host=False)
    assert config.files == shown(
        files,
        "/etc/crio/crio.conf",
        "/etc/crio/crio.conf.d/10-crio.conf",
        "/etc/crio/crio.conf.d/50-site/gpu.conf",
        "/etc/crio/crio.conf.d/99-nvidia.toml",
        "/etc/crio/crio.conf.d/Z-last",
    )
    assert config.spec_dirs == ["/last"] and config.defaulted == [] and config.problems == []
    assert config.default_runtime == "nvidia" and config.runtime_file == files.shown(
        "/etc/crio/crio.conf.d/99-nvidia.toml"
    )


def test_crio_without_cdi_spec_dirs_reads_the_defaults_and_says_so(tmp_path: Path):
    files = node_files(tmp_path, {"/etc/crio/crio.conf.d/10-crio.conf": "[crio.runtime]\nlog_level = 'info'\n"})
    config = crio.ENGINE.read_configuration(files.read_config, files.listdir, major=1, flavour="", on_host=False)
    assert config.files == shown(files, "/etc/crio/crio.conf.d/10-crio.conf")  # no crio.conf: skipped, as CRI-O does
    assert config.spec_dirs is None and config.defaulted == ["cdi_spec_dirs"] and config.enabled is True


def test_a_file_in_crio_conf_d_that_is_no_toml_stops_crio(tmp_path: Path):
    """A README left in crio.conf.d is decoded as TOML like any other file there: CRI-O does not start."""
    files = node_files(tmp_path, {"/etc/crio/crio.conf.d/README": "Drop your CRI-O settings here.\n"})
    config = crio.ENGINE.read_configuration(files.read_config, files.listdir, major=1, flavour="", on_host=False)
    assert [p.severity for p in config.problems] == ["error", "error"]
    assert config.problems[0].source == files.shown("/etc/crio/crio.conf.d/README")


def test_crio_with_nvidias_drop_in_and_its_version_from_the_package(tmp_path: Path):
    """A CRI-O whose build info names its CDI library but not its version (a source constant in CRI-O, never
    an -X flag): the version is the package's; `nvidia-ctk runtime configure --runtime=crio`'s drop-in counts."""
    root = nvidia_node(
        tmp_path,
        {
            "/usr/bin/crio": ef.elf_with_section(
                ef.blob(["mod\tgithub.com/cri-o/cri-o\t(devel)\t", f"dep\t{ef.CDI}\tv0.8.1\t"])
            ),
            "/var/lib/dpkg/status": ef.dpkg_stanza("cri-o", "1.31.4-1.1"),
            "/etc/crio/crio.conf.d/99-nvidia.toml": '[crio.runtime]\ndefault_runtime = "nvidia"\n',
        },
    )
    entry = judged(judge(root))
    assert (entry["name"], entry["version"], entry["cdi_library"]) == ("crio", "1.31.4", "v0.8.1")
    assert entry["nvidia_runtime"] is not None and entry["nvidia_runtime"]["runtime"] == "nvidia"


def test_crio_1_23_reads_no_cdi_and_1_24_is_the_first_row():
    """CRI-O's CDI support came in 1.24 (cri-o PR #5571); 1.23 vendors only podman's copy of a pre-release."""
    assert max_cdi_version("crio", "1.23.5") is None
    assert max_cdi_version("crio", "1.24.0") == "0.3.0"


# --- podman -----------------------------------------------------------------------------------------


def podman_config(files: Files, version: str | None, *, on_host: bool = False):
    return podman.ENGINE.read_release_configuration(
        files.read_config, files.listdir, version=version, flavour="", on_host=on_host
    )


@pytest.mark.parametrize(
    ("version", "dirs"),
    [
        ("3.4.4", ["/etc/cdi"]),  # the pre-release CDI package walks /etc/cdi only
        ("4.2.0", ["/etc/cdi", "/var/run/cdi"]),  # the library's DefaultSpecDirs
        ("5.4.2", ["/etc/cdi", "/var/run/cdi"]),
        ("5.5.0", ["/etc/cdi"]),  # containers/common v0.63's DefaultCdiSpecDirs
        ("5.5.2", ["/etc/cdi"]),
        ("5.6.0", ["/etc/cdi", "/var/run/cdi"]),  # common PR #2462 (v0.64.0)
        ("5.8.2", ["/etc/cdi", "/var/run/cdi"]),
        (None, ["/etc/cdi", "/var/run/cdi"]),  # a release not known: the newest rules
    ],
)
def test_podmans_default_spec_dirs_by_release(tmp_path: Path, version: str | None, dirs: list[str]):
    config = podman_config(node_files(tmp_path, {}), version)
    assert config.spec_dirs == dirs and config.defaulted == ["cdi_spec_dirs"] and config.files == []


@pytest.mark.parametrize(
    ("version", "honoured"), [("4.3.1", False), ("5.4.2", False), ("5.5.0", True), ("5.8.2", True)]
)
def test_cdi_spec_dirs_in_containers_conf_counts_from_podman_5_5(tmp_path: Path, version: str, honoured: bool):
    """podman before 5.5 builds its CDI cache without spec dirs (libpod `cdi.NewCache(cdi.WithAutoRefresh(false))`):
    containers.conf's cdi_spec_dirs is read by containers/common and ignored; podman PR #25717 (5.5) passes it."""
    files = node_files(tmp_path, {"/etc/containers/containers.conf": "[engine]\ncdi_spec_dirs = ['/srv/cdi']\n"})
    config = podman_config(files, version)
    assert config.files == shown(files, "/etc/containers/containers.conf")
    if honoured:
        assert config.spec_dirs == ["/srv/cdi"] and config.defaulted == [] and config.problems == []
    else:
        assert config.spec_dirs == ["/etc/cdi", "/var/run/cdi"] and config.defaulted == ["cdi_spec_dirs"]
        [warning] = config.problems
        assert warning.severity == "warning" and warning.source == files.shown("/etc/containers/containers.conf")
        assert f"podman {version} ignores [engine] cdi_spec_dirs" in warning.message


def test_podman_reads_drop_ins_from_etc_only_never_beside_usr_share(tmp_path: Path):
    """containers/common `systemConfigs` (v0.44 to v0.64, container-libs common v0.65 to v0.67): the main
    files in /usr/share and /etc, then `addConfigs` of /etc/containers/containers.conf.d alone, *.conf in
    name order."""
    files = node_files(
        tmp_path,
        {
            "/usr/share/containers/containers.conf": "[engine]\ncdi_spec_dirs = ['/usr-share']\n",
            "/usr/share/containers/containers.conf.d/90-vendor.conf": "[engine]\ncdi_spec_dirs = ['/vendor']\n",
            "/etc/containers/containers.conf.d/20-b.conf": "[engine]\ncdi_spec_dirs = ['/b']\n",
            "/etc/containers/containers.conf.d/10-a.conf": "[engine]\ncdi_spec_dirs = ['/a']\n",
            "/etc/containers/containers.conf.d/30-c.toml": "[engine]\ncdi_spec_dirs = ['/not-conf']\n",
        },
    )
    config = podman_config(files, "5.6.0")
    assert config.files == shown(
        files,
        "/usr/share/containers/containers.conf",
        "/etc/containers/containers.conf.d/10-a.conf",
        "/etc/containers/containers.conf.d/20-b.conf",
    )
    assert config.spec_dirs == ["/b"]


@pytest.mark.parametrize(
    ("euid", "version", "reads_user"),
    [(0, "4.9.4", False), (0, "5.0.0", True), (1000, "4.3.1", True), (1000, "5.8.2", True)],
    ids=["root-4", "root-5", "user-4", "user-5"],
)
def test_which_podman_reads_the_users_own_containers_conf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, euid: int, version: str, reads_user: bool
):
    """containers/common before v0.58 (podman 4) reads the user's file only rootless (`ifRootlessConfigPath`);
    from v0.58 (podman 5.0) `systemConfigs` appends `userConfigPath()` whoever runs it, root's own as well."""
    user = tmp_path / "home/.config"
    (user / "containers").mkdir(parents=True)
    (user / "containers/containers.conf").write_text("[engine]\ncdi_spec_dirs = ['/home/cdi']\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(user))
    monkeypatch.setattr(os, "geteuid", lambda: euid)

    def read(path: str) -> tuple[str | None, str | None, str]:
        return (Path(path).read_text(), None, path) if path.startswith(str(user)) else (None, None, path)

    config = podman.ENGINE.read_release_configuration(read, lambda _: [], version=version, flavour="", on_host=True)
    assert (str(user / "containers/containers.conf") in config.files) is reads_user
    if version >= "5.5":
        assert config.spec_dirs == (["/home/cdi"] if reads_user else ["/etc/cdi", "/var/run/cdi"])


def test_a_rootless_podman_5_7_reads_the_systems_rootless_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """container-libs common v0.65.0 (podman 5.7): rootless, /etc/containers/containers.rootless.conf and its
    .d dirs (the user's uid's too) come after the system's drop-ins, before the user's own."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nobody"))
    written = {
        "/etc/containers/containers.conf": "[engine]\ncdi_spec_dirs = ['/etc-main']\n",
        "/etc/containers/containers.rootless.conf": "[engine]\ncdi_spec_dirs = ['/rootless']\n",
    }

    def read(path: str) -> tuple[str | None, str | None, str]:
        return (written[path], None, path) if path in written else (None, None, path)

    for version, dirs in (("5.6.0", ["/etc-main"]), ("5.7.0", ["/rootless"])):
        config = podman.ENGINE.read_release_configuration(read, lambda _: [], version=version, flavour="", on_host=True)
        assert config.spec_dirs == dirs


def test_podman_5_5_does_not_read_a_spec_where_nvidia_cdi_refresh_writes_it(tmp_path: Path):
    """podman 5.5.0-5.5.2 read /etc/cdi alone by default (podman#26569): the spec in /var/run/cdi is not
    resolvable there, and is again from 5.6."""
    for version, containers in (("5.5.1+ds1-1", []), ("5.6.1+ds1-1", ALL)):
        root = nvidia_node(
            tmp_path / version,
            {
                "/usr/bin/podman": ef.debian_binary("github.com/containers/podman/v5/cmd/podman"),
                "/var/lib/dpkg/status": ef.dpkg_stanza("podman", version),
            },
            spec_dir="/var/run/cdi",
        )
        report = judge(root)
        assert judged(report)["spec_dirs"] == (["/etc/cdi"] if not containers else ["/etc/cdi", "/var/run/cdi"])
        assert report["containers"] == containers, version


@pytest.mark.parametrize(
    ("version", "reads"),
    [
        ("3.1.0", None),
        ("3.4.4", None),
        ("4.0.3", "0.2.0"),
        ("4.1.1", "0.4.0"),
        ("4.2.0", "0.4.0"),
        ("4.3.0", "0.5.0"),
    ],
)
def test_the_old_podman_rows(version: str, reads: str | None):
    """podman `go.mod`/vendor at each tag: 3.0-3.1 no CDI package; 3.2-3.4 a 2021 draft that reads no spec in
    the CDI format (podman#20257, #24474); 4.0 a pre-release taking 0.1.0 and 0.2.0; 4.1-4.2 v0.4.0; 4.3.0
    v0.5.2."""
    assert max_cdi_version("podman", version) == reads


def test_engine_podman_at_4_2_0_is_judged_by_its_row(run_cli, tmp_path: Path):
    """RHEL 8.7's and 9.1's podman 4.2.0: judged by its row, no usage error."""
    code, out, err = run_cli(
        "probe",
        "--backend",
        "cdi",
        "--engine",
        "podman@4.2.0",
        "--spec-dir",
        str(tmp_path),
        "--json",
        env={"CGPU_CACHE_DIR": str(tmp_path / "c")},
    )
    assert code != 2, err
    [entry] = [e for e in json.loads(out)["engines"] if e["judged"]]
    assert (entry["version"], entry["max_cdi_version"]) == ("4.2.0", "0.4.0")


@pytest.mark.parametrize(("name", "version"), [("podman", "6.1.0"), ("crio", "1.37.0"), ("docker", "30.0.1")])
def test_a_release_newer_than_the_checked_table_is_judged_by_the_newest_row_and_said(name: str, version: str):
    entry = with_version(None, name, version, "option")
    assert entry.max_cdi_version == engine(name).rows[-1][1] and not entry.rules_unknown
    [warning] = [p for p in entry.problems if "release table" in p.message]
    assert warning.severity == "warning" and warning.source == f"{name} {version}"
    newest = ".".join(map(str, engine(name).checked_through or ()))
    assert not [p for p in with_version(None, name, newest, "option").problems if "release table" in p.message]


# --- Docker -----------------------------------------------------------------------------------------


def docker_config(tmp_path: Path, daemon_json: str | None):
    files = node_files(tmp_path, {} if daemon_json is None else {"/etc/docker/daemon.json": daemon_json})
    return files, docker.read_config(files.read_config, "/etc/docker/daemon.json")


@pytest.mark.parametrize(
    ("daemon_json", "enabled", "dirs", "defaulted"),
    [
        (None, None, None, ["features.cdi", "cdi-spec-dirs"]),
        ('{"features": {"cdi": true}}', True, None, ["cdi-spec-dirs"]),
        ('{"cdi-spec-dirs": ["/srv/cdi"]}', None, ["/srv/cdi"], ["features.cdi"]),
        ('{"features": {"cdi": true}, "cdi-spec-dirs": []}', False, [], []),
        ('{"features": {"cdi": true}, "cdi-spec-dirs": [""]}', False, [], []),
        ('{"cdi-spec-dirs": [""]}', False, [], ["features.cdi"]),
    ],
)
def test_docker_daemon_json_cdi_settings(
    tmp_path: Path, daemon_json: str | None, enabled: bool | None, dirs: list[str] | None, defaulted: list[str]
):
    """moby `cmd/dockerd/daemon.go` (v25.0.0 to v29.x): cdi-spec-dirs unset takes the CDI library's defaults;
    `[""]` is cleared, and `daemon/cdi.go` `createCDICache` refuses no dir at all ("No CDI specification
    directories specified"): CDI off whatever `features` says."""
    files, config = docker_config(tmp_path, daemon_json)
    assert (config.enabled, config.spec_dirs, config.defaulted) == (enabled, dirs, defaulted)
    assert config.files == ([] if daemon_json is None else shown(files, "/etc/docker/daemon.json"))
    assert config.problems == []
    if enabled is False:
        assert config.setting.startswith('"cdi-spec-dirs" to the spec dirs')


def test_docker_with_no_spec_dir_gives_no_cdi_device(tmp_path: Path):
    root = nvidia_node(
        tmp_path,
        {
            "/usr/bin/dockerd": ef.debian_binary("github.com/docker/docker/cmd/dockerd"),
            "/var/lib/dpkg/status": ef.dpkg_stanza("docker.io", "28.5.2+dfsg1-1"),
            "/etc/docker/daemon.json": '{"cdi-spec-dirs": [""]}',
        },
    )
    report = judge(root)
    entry = judged(report)
    assert (entry["name"], entry["cdi_enabled"], entry["spec_dirs"]) == ("docker", False, [])
    assert report["containers"] == []


def real_dockerd() -> Path:
    for suite in ("sid", "trixie"):
        binary = REAL_ENGINES / suite / "root/usr/sbin/dockerd"
        if binary.is_file():
            return binary
    pytest.skip(f"no real dockerd unpacked under {REAL_ENGINES} (scripts/real_engines.py)")


@pytest.mark.parametrize(
    "daemon_json",
    [
        '{"cdi-spec-dirs": []}',
        '{"cdi-spec-dirs": [""]}',
        '{"features": {"cdi": false}, "cdi-spec-dirs": ["/srv/cdi"]}',
        '{"features": {"cdi": "yes"}}',
        '{"cdi-spec-dirs": "/etc/cdi"}',
        '{"features": {"cdi": true}, "cdi-spec-dirs": ["/a", 1]}',
    ],
)
def test_dockerd_validate_agrees_on_which_daemon_json_starts(tmp_path: Path, daemon_json: str):
    """The real dockerd's own check (`dockerd --validate --config-file`) is the oracle of which daemon.json
    it starts with: cgpu calls exactly those broken (an error problem on the file)."""
    dockerd = real_dockerd()
    (tmp_path / "daemon.json").write_text(daemon_json)
    path = f"{dockerd.parent}:{dockerd.parent.parent / 'bin'}:/usr/bin:/bin"
    done = subprocess.run(
        ["env", "-i", f"PATH={path}", str(dockerd), "--validate", "--config-file", str(tmp_path / "daemon.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    starts = "configuration OK" in done.stdout + done.stderr
    _, config = docker_config(tmp_path / "cgpu", daemon_json)
    assert starts == (not [p for p in config.problems if p.severity == "error"]), done.stdout + done.stderr


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(["", "/etc/cdi", "/srv/cdi"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["cdi", "x"]), inner, max_size=2),
    max_leaves=6,
)


@given(JSON, JSON)
def test_any_cdi_settings_read_as_dirs_cdi_off_or_a_problem(dirs: object, features: object):
    text = json.dumps({"cdi-spec-dirs": dirs, "features": features})
    config = docker.read_config(lambda path: (text, None, path), "/etc/docker/daemon.json")
    errors = [p for p in config.problems if p.severity == "error"]
    if not (isinstance(dirs, list) and all(isinstance(d, str) for d in dirs)):
        assert any('"cdi-spec-dirs" is not a list of paths' in p.message for p in errors)
    elif dirs in ([], [""]):
        assert config.enabled is False and config.spec_dirs == []
    else:
        assert config.spec_dirs == dirs
        cdi = features.get("cdi") if isinstance(features, dict) else None
        assert config.enabled is (cdi if isinstance(cdi, bool) else None)


# --- podman here as the oracle ------------------------------------------------------------------------


def podman_reading(tmp_path: Path, layout: dict[str, str]) -> tuple[str, list[str], list[str]]:
    """podman's own account of the containers.conf files it merges ("Merged system config" at debug level) and
    the keys it does not know, with `layout` bind-mounted over /etc/containers and /usr/share/containers in a
    private mount namespace (the machine's own files untouched); and its version."""
    podman_binary = shutil.which("podman")
    if podman_binary is None or shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs podman, unshare and root (a private mount namespace)")
    etc, usr = tmp_path / "etc-containers", tmp_path / "usr-containers"
    for folder in (etc, usr):
        folder.mkdir(parents=True)
    for path, text in layout.items():
        target = (etc if path.startswith("/etc/") else usr) / path.split("containers/", 1)[1]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    script = (
        f"mount --bind {etc} /etc/containers && mount --bind {usr} /usr/share/containers && "
        f"{podman_binary} --log-level=debug info"
    )
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    if "mount" in done.stderr and done.returncode != 0 and "Merged" not in done.stderr:
        pytest.skip(f"no private mount namespace here: {done.stderr[-300:]}")
    merged = re.findall(r'Merged system config \\"([^"\\]+)\\"', done.stderr)
    unknown = re.findall(r"Failed to decode the keys \[([^\]]*)\]", done.stderr)
    version = subprocess.run([podman_binary, "--version"], capture_output=True, text=True, timeout=60, check=False)
    return version.stdout.split()[-1], merged, unknown


@pytest.mark.parametrize(
    "layout",
    [
        {
            "/usr/share/containers/containers.conf": "[engine]\n",
            "/usr/share/containers/containers.conf.d/50-vendor.conf": "[engine]\ncdi_spec_dirs = ['/vendor']\n",
            "/etc/containers/containers.conf": "[engine]\n",
            "/etc/containers/containers.conf.d/20-b.conf": "[engine]\n",
            "/etc/containers/containers.conf.d/10-a.conf": "[engine]\ncdi_spec_dirs = ['/srv/cdi']\n",
            "/etc/containers/containers.conf.d/30-c.toml": "[engine]\n",
        },
        {"/etc/containers/containers.conf.d/99-gpu.conf": "[engine]\ncdi_spec_dirs = ['/srv/cdi']\n"},
        {"/usr/share/containers/containers.conf": "[engine]\n"},
    ],
    ids=["usr-and-etc-drop-ins", "etc-drop-in-only", "usr-only"],
)
def test_podman_here_merges_the_files_cgpu_reads_for_its_release(tmp_path: Path, layout: dict[str, str]):
    """The installed podman (Debian 12's 4.3.1 in CI) says which files it merged, in order, and that it does
    not know cdi_spec_dirs at all (before 5.5): cgpu's reading for that release names the same files, and
    spec dirs from the defaults with a warning where a file sets them."""
    version, merged, unknown = podman_reading(tmp_path / "podman", layout)
    files = node_files(tmp_path, layout)
    config = podman_config(files, version)
    assert [files.shown(path) for path in merged] == config.files
    release = tuple(int(part) for part in version.split(".")[:2])
    sets_dirs = any("cdi_spec_dirs" in text for path, text in layout.items() if files.shown(path) in config.files)
    if release < (5, 5):
        assert any("engine.cdi_spec_dirs" in keys for keys in unknown) is sets_dirs
        assert config.defaulted == ["cdi_spec_dirs"] and bool(config.problems) is sets_dirs
