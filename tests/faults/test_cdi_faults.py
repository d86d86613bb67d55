"""CDI backend faults: hostile spec files next to a good one, unreadable files, a hung or
refusing engine, and Ctrl-C while cgpu waits on the engine."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import validate_report
from tests.faults.conftest import SAMPLES, STOPS, fill, hung, mount_tmpfs, stand_in, unmount
from tests.timing import wait_for

AMD_APIS = ["rocm", "vulkan", "opencl"]
# A fake host under --root: judged by the newest CDI rules, not by whatever engine this host has.
AMD = ["--spec-dir", "{specs}", "--root", str(SAMPLES / "hosts" / "amd"), "--engine", "none"]
# The host's engine is asked only without --root (under --root the root's engines judge)
ON_HOST = ["--spec-dir", "{specs}"]


def _hostile(name: str, spec_dir: Path) -> Path:
    """Write one hostile file into spec_dir; returns its path."""
    path = spec_dir / "hostile.yaml"
    if name == "random-bytes":
        path.write_bytes(bytes(range(256)) * 16)
    elif name == "billion-laughs":
        lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
        lines += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
        path.write_text("\n".join(lines) + "\n")
    elif name == "deep-nesting":
        path.write_text('cdiVersion: "0.5.0"\nkind: x.example.com/gpu\ndevices: ' + "[" * 50_000 + "]" * 50_000)
    elif name == "huge":
        with open(path, "wb") as handle:
            handle.write(b'cdiVersion: "0.5.0"\nkind: x.example.com/gpu\n# ')
            handle.truncate(64 * 1024 * 1024)
    elif name == "fifo":
        os.mkfifo(path)
    elif name == "dangling-symlink":
        path.symlink_to(spec_dir / "nowhere.yaml")
    elif name == "symlink-loop":
        path.symlink_to(path)
    elif name == "nul-and-utf16":
        path.write_bytes(b"\xff\xfe" + 'cdiVersion: "0.5.0"\x00kind: ../../etc/passwd\n'.encode("utf-16-le"))
    elif name == "hostile-names":
        path.write_text(
            'cdiVersion: "0.5.0"\nkind: "../../x.com/$(reboot)"\ndevices:\n'
            '  - name: "; rm -rf /"\n    containerEdits:\n'
            '      deviceNodes: [{path: "/dev/../../etc/shadow"}]\n'
        )
    elif name == "wrong-types":
        path.write_text('cdiVersion: 0.5\nkind: [1, 2]\ndevices: {name: 7}\ncontainerEdits: "x"\n')
    else:  # pragma: no cover - a typo in the parameter list
        raise AssertionError(name)
    return path


HOSTILE = [
    "random-bytes",
    "billion-laughs",
    "deep-nesting",
    "huge",
    "fifo",
    "dangling-symlink",
    "symlink-loop",
    "nul-and-utf16",
    "hostile-names",
    "wrong-types",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_spec_is_named_and_hides_no_good_one(cli, tmp_path, name):
    specs = tmp_path / "specs"
    shutil.copytree(SAMPLES / "amd" / "spec", specs)
    hostile = _hostile(name, specs)
    code, out, _ = cli("probe", "--backend", "cdi", "--json", *[a.format(specs=specs) for a in AMD], timeout=60)
    report = json.loads(out)
    validate_report(report)
    assert code == 0
    assert report["containers"] == AMD_APIS
    assert any(p["source"] == str(hostile) and p["severity"] == "error" for p in report["problems"]), report["problems"]


def test_an_unreadable_spec_is_named(cli, nobody):
    wrapper, folder = nobody
    specs = folder / "specs"
    shutil.copytree(SAMPLES / "amd" / "spec", specs)
    secret = specs / "secret.yaml"
    shutil.copy(SAMPLES / "nvidia-current" / "spec" / "nvidia.yaml", secret)
    secret.chmod(0o600)
    code, out, _ = cli("probe", "--backend", "cdi", "--json", *[a.format(specs=specs) for a in AMD], wrapper=wrapper)
    report = json.loads(out)
    assert code == 0 and report["containers"] == AMD_APIS
    assert {
        "severity": "error",
        "source": str(secret),
        "message": "cgpu cannot read this file: Permission denied",
        "kind": "unreadable-file",
    } in report["problems"]


def test_an_unlistable_spec_dir_is_a_warning(cli, nobody):
    wrapper, folder = nobody
    specs = folder / "specs"
    shutil.copytree(SAMPLES / "amd" / "spec", specs)
    specs.chmod(0o700)
    code, out, _ = cli(
        "probe", "--backend", "cdi", "--json", "--spec-dir", str(specs), "--engine", "none", wrapper=wrapper
    )
    report = json.loads(out)
    assert code == 0 and report["containers"] == []
    assert {report["apis"][api]["state"] for api in ("cuda", "rocm", "vulkan", "opencl")} == {"unknown"}
    assert str(specs) in report["evidence"]["rocm"]
    assert [p["source"] for p in report["problems"]] == [str(specs)]
    assert "cannot list this spec dir (Permission denied)" in report["problems"][0]["message"]


@pytest.mark.slow
def test_a_hung_engine_is_stopped_at_the_timeout(cli, bin_dir):
    hung(bin_dir, "podman")
    hung(bin_dir, "docker")
    code, out, _ = cli(
        "probe",
        "--backend",
        "cdi",
        "--json",
        "--timeout",
        "1",
        *[a.format(specs=SAMPLES / "amd" / "spec") for a in ON_HOST],
        "--engine",
        "auto",
        timeout=30,
    )
    report = json.loads(out)
    assert code == 0 and report["engines"] == []  # judged by the newest rules, and said so
    [warning] = [p for p in report["problems"] if p["source"] == "--engine auto"]
    assert "no answer within 1 s; it was stopped" in warning["message"]


def test_a_refusing_engine_is_quoted(cli, bin_dir):
    stand_in(bin_dir, "podman", 'echo "Error: cannot connect: permission denied" >&2\nexit 125\n')
    stand_in(bin_dir, "docker", "exit 1\n")
    code, out, _ = cli(
        "probe",
        "--backend",
        "cdi",
        "--json",
        *[a.format(specs=SAMPLES / "amd" / "spec") for a in ON_HOST],
        "--engine",
        "auto",
    )
    report = json.loads(out)
    assert code == 0 and report["engines"] == []
    [warning] = [p for p in report["problems"] if p["source"] == "--engine auto"]
    assert "exit 125: Error: cannot connect: permission denied" in warning["message"]


@pytest.mark.parametrize("signum, status, said", STOPS)
def test_ctrl_c_while_asking_the_engine(cli, bin_dir, signum, status, said):
    hung(bin_dir, "podman")
    code, out, err = cli.interrupt_when(
        lambda: cli.running("sleep 600"),
        "probe",
        "--backend",
        "cdi",
        *[a.format(specs=SAMPLES / "amd" / "spec") for a in ON_HOST],
        "--engine",
        "auto",
        signum=signum,
    )
    assert code == status and out == "" and said in err


@pytest.mark.parametrize("options", ["ro,size=1m", "size=64k,full"])
def test_the_spec_cache_on_a_read_only_or_full_disk_changes_nothing(cli, tmp_path, options):
    """The parsed-spec cache is an optimisation: a read-only or full file system under it gives
    the same answer, no problem, and no temp file."""

    specs = [a.format(specs=SAMPLES / "amd" / "spec") for a in AMD]
    _, plain, _ = cli("probe", "--backend", "cdi", "--json", *specs, env={"CGPU_CACHE_DIR": str(tmp_path / "c")})
    cache = mount_tmpfs(tmp_path / "mnt", options.removesuffix(",full"))
    try:
        if options.endswith(",full"):
            fill(cache)
        for _ in range(2):  # the second run would read what the first stored
            code, out, _ = cli("probe", "--backend", "cdi", "--json", *specs, env={"CGPU_CACHE_DIR": str(cache)})
            report = json.loads(out)
            assert code == 0 and report["problems"] == json.loads(plain)["problems"] == []
            assert report["containers"] == AMD_APIS and report["devices"] == json.loads(plain)["devices"]
        assert not [p for p in cache.rglob("*") if p.name != "filler" and p.is_file()]
    finally:
        unmount(cache)


def test_a_symlink_out_of_a_shared_spec_dir_never_quotes_its_target(cli, tmp_path):
    """Issue 18 item 9: another user plants `x.yaml -> ~/.bash_history` in a spec dir they can
    write; the problem names the file but quotes none of its content."""
    secret = tmp_path / "home" / ".bash_history"
    secret.parent.mkdir()
    secret.write_text("export TOKEN=hunter2-secret\n")
    specs = tmp_path / "specs"
    shutil.copytree(SAMPLES / "amd" / "spec", specs)
    (specs / "x.yaml").symlink_to(secret)
    specs.chmod(0o1777)
    try:
        for output in ([], ["--json"]):
            code, out, err = cli("probe", "--backend", "cdi", *output, *[a.format(specs=specs) for a in AMD])
            assert code == 0 and "hunter2" not in out + err
            assert "/specs/x.yaml" in "".join(out.split())  # the human output may wrap the path
    finally:
        specs.chmod(0o755)
    code, out, _ = cli("probe", "--backend", "cdi", "--json", *[a.format(specs=specs) for a in AMD])
    assert "hunter2-secret" in out  # a dir only its owner can write: the reason, with an excerpt


def test_a_fifo_swapped_into_the_spec_cache_does_not_hang_the_cli(cli, tmp_path):
    """Issue 18 item 10: entries are opened non-blocking; a FIFO is refused, not waited on."""
    args = ["probe", "--backend", "cdi", "--json", *[a.format(specs=SAMPLES / "amd" / "spec") for a in AMD]]
    _, first, _ = cli(*args)
    entries = list((tmp_path / "cache" / "cdi-specs").glob("*.json"))
    assert entries
    for entry in entries:
        entry.unlink()
        os.mkfifo(entry)
    code, again, _ = cli(*args, timeout=20)
    assert code == 0 and json.loads(again)["containers"] == json.loads(first)["containers"] == AMD_APIS


def test_the_spec_cache_is_pruned(cli, tmp_path):
    """Issue 18 item 14: runs over uniquely named spec files do not grow the cache without end."""
    spec = (SAMPLES / "amd" / "spec" / "amd.json").read_text()
    dirs = []
    for run in range(3):
        folder = tmp_path / f"specs{run}"
        folder.mkdir()
        for index in range(400):
            (folder / f"run{run}-{index}.json").write_text(spec)
        dirs.append(folder)
    # files changed in the last 2 s are not stored: wait until the newest is older (ctime cannot be set back)
    from cgpu.cdi.spec_cache import RACY_SECONDS

    newest = max(p.stat().st_ctime_ns for d in dirs for p in d.iterdir())
    wait_for(lambda: time.time_ns() - newest > RACY_SECONDS * 1e9, within=60, what="the spec files to age")
    for folder in dirs:
        code, _, _ = cli("probe", "--backend", "cdi", "--json", "--spec-dir", str(folder), "--root", "/", timeout=120)
        assert code in (0, 1)
    assert 400 < len(list((tmp_path / "cache" / "cdi-specs").iterdir())) <= 1024


@pytest.mark.parametrize("root", ["/", str(SAMPLES / "hosts" / "amd")])
def test_a_nul_byte_in_a_spec_path_is_a_missing_path_not_a_crash(cli, tmp_path, root):
    """No file name holds a NUL: the OS calls raise ValueError for one; the mount is missing."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "nul.yaml").write_text(
        'cdiVersion: "0.5.0"\nkind: example.com/gpu\ndevices:\n- name: d0\n  containerEdits:\n'
        '    mounts:\n    - {hostPath: "/usr/lib/x\\0y", containerPath: /x}\n'
    )
    code, out, err = cli(
        "probe", "--backend", "cdi", "--json", "--engine", "none", "--spec-dir", str(specs), "--root", root
    )
    assert code == 0 and "Traceback" not in err, err
    [device] = json.loads(out)["devices"]
    assert device["status"] == "blocked" and device["missing"], device
