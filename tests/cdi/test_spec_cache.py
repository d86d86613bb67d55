"""The disk cache of parsed specs: a hit gives exactly what parsing gives, any change or doubt
means parsing again, and a broken, foreign or shared cache is never trusted."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cgpu.cdi import spec_cache
from cgpu.cdi.parse import parse_spec
from cgpu.cdi.scan import scan_spec_dirs
from tests.conftest import REPO, corpus_files, validate_report

from .conftest import ALL_FIELDS, minimal, write


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """An empty cache dir; files written by the test count as settled (no racy window)."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("CGPU_CACHE_DIR", str(directory))
    monkeypatch.setattr(spec_cache, "RACY_SECONDS", 0)
    return directory


def fresh_scan(dirs: list[Path]):
    """A scan as a new process does it: nothing parsed in memory (no reader kept)."""
    return scan_spec_dirs([str(d) for d in dirs], cache_dir=os.environ["CGPU_CACHE_DIR"])


def entries(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / spec_cache.SUBDIR).glob("*.json"))


def test_a_hit_gives_exactly_what_parsing_gives(tmp_path, cache_dir, parses):
    etc = tmp_path / "etc"
    write(etc, "all.yaml", ALL_FIELDS)
    write(etc, "bad.yaml", "kind: [")
    write(etc, "dup.yaml", minimal() + "kind: example.com/other\n")
    parsed = fresh_scan([etc])
    assert len(parses) == 3 and len(entries(cache_dir)) == 3
    again = fresh_scan([etc])
    assert len(parses) == 3  # all three (two of them errors) read back from disk
    assert again.specs == parsed.specs and again.problems == parsed.problems
    assert again.devices == parsed.devices
    spec = again.specs[0]
    assert spec.warnings and spec.devices[1].edits is spec.devices[2].edits  # equal edits share one object
    assert [p for p in parsed.problems if p[0] == "error"]  # the rejected files keep their errors


def test_every_sample_and_published_spec_reads_back_equal(tmp_path, cache_dir):
    files = sorted(REPO.glob("cdi-samples/**/*.yaml")) + sorted(REPO.glob("cdi-samples/**/*.json"))
    files += corpus_files()
    assert len(files) > 20
    for number, source in enumerate(files):
        folder = tmp_path / f"d{number}"
        folder.mkdir()
        shutil.copyfile(source, folder / ("spec.json" if source.suffix == ".json" else "spec.yaml"))
        first = fresh_scan([folder])
        second = fresh_scan([folder])
        assert (second.specs, second.problems) == (first.specs, first.problems), source.name


def test_the_same_file_in_another_spec_dir_gets_its_priority(tmp_path, cache_dir, parses):
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal())
    fresh_scan([etc])
    assert fresh_scan([tmp_path / "none", etc]).specs[0].priority == 1 and len(parses) == 1


def test_a_changed_file_is_parsed_again_even_with_the_same_size_and_mtime(tmp_path, cache_dir, parses):
    etc = tmp_path / "etc"
    path = write(etc, "a.yaml", minimal(env="A=1"))
    fresh_scan([etc])
    before = path.stat()
    path.write_text(minimal(env="A=2"))  # in place: same inode, same size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # the mtime put back; the ctime moved
    assert path.stat().st_size == before.st_size and path.stat().st_ino == before.st_ino
    assert fresh_scan([etc]).devices["example.com/gpu=gpu0"].device.edits.env == ("A=2",)
    assert len(parses) == 2
    replacement = tmp_path / "new.yaml"
    replacement.write_text(minimal(env="A=3"))
    os.replace(replacement, path)  # another inode
    assert fresh_scan([etc]).devices["example.com/gpu=gpu0"].device.edits.env == ("A=3",)
    assert len(parses) == 3 and len(entries(cache_dir)) == 1  # one entry per spec path


def test_a_file_changed_just_now_is_not_stored(tmp_path, monkeypatch, parses):
    monkeypatch.setenv("CGPU_CACHE_DIR", str(tmp_path / "cache"))
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal())
    fresh_scan([etc])
    fresh_scan([etc])
    assert len(parses) == 2 and entries(tmp_path / "cache") == []


def test_another_version_of_cgpu_or_of_its_parser_does_not_read_the_entry(tmp_path, cache_dir, parses, monkeypatch):
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal())
    fresh_scan([etc])
    monkeypatch.setattr("cgpu.version.__version__", "0.0.0-other")
    fresh_scan([etc])
    monkeypatch.setattr(spec_cache, "_code_identity", [[1, 2]] * 4)
    fresh_scan([etc])
    assert len(parses) == 3


@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"{",
        b"null",
        b"[]",
        b'{"key": 1}',
        b"\xff\xfe",
        "truncated",
        "foreign key",
        "wrong shape",
        "invalid spec",
        "error not text",
    ],
)
def test_a_corrupt_entry_means_parsing_again_without_a_problem(tmp_path, cache_dir, parses, damage):
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal(env="A=1"))
    good = fresh_scan([etc])
    [entry] = entries(cache_dir)
    stored = json.loads(entry.read_bytes())
    if damage == "truncated":
        data = entry.read_bytes()[:-20]
    elif damage == "foreign key":
        data = json.dumps({**stored, "key": {**stored["key"], "path": "/etc/cdi/other.yaml"}}).encode()
    elif damage == "wrong shape":
        data = json.dumps({**stored, "spec": {**stored["spec"], "devices": [["gpu0", {}]]}}).encode()
    elif damage == "invalid spec":  # well-formed, but no longer a valid spec: validated again, so parsed
        data = json.dumps({**stored, "spec": {**stored["spec"], "devices": []}}).encode()
    elif damage == "error not text":
        data = json.dumps({"key": stored["key"], "error": {"message": 1, "by_library": True}}).encode()
    else:
        data = damage
    entry.write_bytes(data)
    again = fresh_scan([etc])
    assert (again.specs, again.problems) == (good.specs, good.problems) and len(parses) == 2
    assert json.loads(entry.read_bytes()) == stored  # the parse wrote a good entry back


def test_an_unwritable_cache_dir_changes_nothing(tmp_path, monkeypatch, parses):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("CGPU_CACHE_DIR", str(blocker / "cache"))  # cannot be created: a file is in the way
    monkeypatch.setattr(spec_cache, "RACY_SECONDS", 0)
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal())
    first, second = fresh_scan([etc]), fresh_scan([etc])
    assert (first.specs, first.problems) == (second.specs, second.problems) and len(parses) == 2


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root writes to a read-only dir")
def test_a_read_only_cache_dir_changes_nothing(tmp_path, cache_dir, parses):
    (cache_dir / spec_cache.SUBDIR).mkdir(parents=True, mode=0o500)
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal())
    first, second = fresh_scan([etc]), fresh_scan([etc])
    assert first.specs == second.specs and len(parses) == 2 and entries(cache_dir) == []


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
@pytest.mark.parametrize(
    "setup",
    ["group-writable dir", "symlinked dir", "another user's dir", "another user's entry", "world-writable parent"],
)
def test_a_cache_someone_else_could_write_is_ignored(tmp_path, cache_dir, parses, setup):
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal())
    fresh_scan([etc])  # a good entry exists
    specs_dir = cache_dir / spec_cache.SUBDIR
    [entry] = entries(cache_dir)
    if setup == "group-writable dir":
        specs_dir.chmod(0o770)
    elif setup == "world-writable parent":  # another user could swap cdi-specs for their own dir
        cache_dir.chmod(0o777)
    elif setup == "symlinked dir":
        specs_dir.rename(cache_dir / "elsewhere")
        specs_dir.symlink_to(cache_dir / "elsewhere")
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to hand a file to another user")
        os.chown(specs_dir if setup == "another user's dir" else entry, 54321, 54321)
    fresh_scan([etc])
    assert len(parses) == 2  # parsed, not read back


def test_the_cache_dir_is_private(tmp_path, cache_dir):
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal())
    fresh_scan([etc])
    if sys.platform != "win32":
        assert (cache_dir / spec_cache.SUBDIR).stat().st_mode & 0o777 == 0o700
        assert entries(cache_dir)[0].stat().st_mode & 0o077 == 0


def _write_many(path: str, rounds: int) -> None:
    info = os.stat(path)
    spec = parse_spec(Path(path).read_bytes(), path=path)
    for _ in range(rounds):
        spec_cache.store(os.environ["CGPU_CACHE_DIR"], path, info, info, spec)
        loaded = spec_cache.load(os.environ["CGPU_CACHE_DIR"], path, info, 0)
        assert loaded is None or loaded == spec


def test_concurrent_writers_leave_one_good_entry(tmp_path, cache_dir):
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs fork to share the test's settings with the writers")
    etc = tmp_path / "etc"
    path = write(etc, "a.yaml", ALL_FIELDS)
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write_many, args=(str(path), 30)) for _ in range(6)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    assert [writer.exitcode for writer in writers] == [0] * 6
    assert spec_cache.load(str(cache_dir), str(path), path.stat(), 0) == parse_spec(path.read_bytes(), path=str(path))
    assert [p.name for p in (cache_dir / spec_cache.SUBDIR).iterdir() if not p.name.endswith(".json")] == []


def test_the_cli_with_a_warm_cache_does_not_import_yaml(tmp_path, cache_dir):
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal())
    program = textwrap.dedent(f"""
        import sys
        from cgpu.cdi import spec_cache
        spec_cache.RACY_SECONDS = 0
        from cgpu.cli import main
        code = main(["probe", "--backend", "cdi", "--spec-dir", {str(etc)!r}, "--root", "/", "--json"])
        print("yaml" in sys.modules, file=sys.stderr)
        sys.exit(code)
        """)
    runs = [
        subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "CGPU_CACHE_DIR": str(cache_dir)},
            timeout=60,
        )
        for _ in range(2)
    ]
    assert [run.stderr.split()[-1] for run in runs] == ["True", "False"], runs[-1].stderr
    reports = [validate_report(run.stdout) and json.loads(run.stdout) for run in runs]
    for report in reports:
        del report["checked_at"]  # the two runs may straddle a second
    assert reports[0] == reports[1]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_swapped_in_for_an_entry_does_not_hang_the_scan(tmp_path, cache_dir, parses):
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal())
    fresh_scan([etc])
    [entry] = entries(cache_dir)
    entry.unlink()
    os.mkfifo(entry)  # opened blocking, this waits for a writer for ever
    done = subprocess.run(
        [sys.executable, "-c", f"from tests.cdi.test_spec_cache import fresh_scan; fresh_scan([{str(etc)!r}])"],
        cwd=REPO,
        env={**os.environ, "CGPU_CACHE_DIR": str(cache_dir)},
        timeout=30,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_entries_no_longer_used_are_pruned(tmp_path, cache_dir, monkeypatch):
    monkeypatch.setattr(spec_cache, "MAX_ENTRIES", 5)
    for run in range(3):  # each run over uniquely named files: 3 x 4 entries without pruning
        etc = tmp_path / f"etc{run}"
        for index in range(4):
            write(etc, f"r{run}-{index}.yaml", minimal(kind=f"example.com/c{index}"))
        fresh_scan([etc])
    assert len(entries(cache_dir)) == 5
    old = entries(cache_dir)[0]
    month_ago = old.stat().st_mtime - (spec_cache.PRUNE_DAYS + 1) * 86400
    os.utime(old, (month_ago, month_ago))
    write(tmp_path / "etc3", "new.yaml", minimal())
    fresh_scan([tmp_path / "etc3"])
    assert old not in entries(cache_dir) and len(entries(cache_dir)) <= 5


def test_the_spec_cache_is_told_its_dir_and_reads_no_other(tmp_path, cache_dir, parses):
    etc = tmp_path / "etc"
    write(etc, "a.yaml", minimal())
    scan_spec_dirs([str(etc)])  # no cache dir: nothing kept, even with CGPU_CACHE_DIR set
    assert not cache_dir.exists()
    # it keeps cgpu.node.files's rules for private files, never its default dir (CGPU_CACHE_DIR)
    assert "default_cache_dir" not in Path(spec_cache.__file__).read_text()


def test_a_node_with_more_specs_than_the_limit_keeps_all_of_its_own(tmp_path, cache_dir, monkeypatch):
    monkeypatch.setattr(spec_cache, "MAX_ENTRIES", 5)
    etc = tmp_path / "etc"
    for index in range(12):
        write(etc, f"claim-{index}.yaml", minimal(kind=f"example.com/c{index}"))
    fresh_scan([etc])
    assert len(entries(cache_dir)) == 12  # not trimmed to 5: the next process would parse 7 again
    write(etc, "claim-new.yaml", minimal(kind="example.com/new"))
    fresh_scan([etc])
    assert len(entries(cache_dir)) == 13
