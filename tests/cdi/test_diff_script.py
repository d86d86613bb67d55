"""scripts/diff_cdi.py's Python parts, with a stand-in for the Go oracle (building the real one
needs a Go toolchain and the library's module sources, which CI does not have)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

from .conftest import minimal

spec = importlib.util.spec_from_file_location("diff_cdi", REPO / "scripts" / "diff_cdi.py")
assert spec is not None and spec.loader is not None
diff_cdi = importlib.util.module_from_spec(spec)
sys.modules["diff_cdi"] = diff_cdi  # its dataclass looks itself up there
spec.loader.exec_module(diff_cdi)


class FakeOracle:
    """A library that reads specs as cgpu does, except that it panics on a file holding PANIC."""

    def load(self, dirs: list[str]) -> dict:
        files = [path for d in dirs if Path(d).is_dir() for path in sorted(Path(d).iterdir())]
        if any(b"PANIC" in path.read_bytes() for path in files):
            return {"devices": None, "errors": {}, "panic": "runtime error"}
        verdict, _, _ = diff_cdi.cgpu_verdict(dirs, "v1.1.0")
        return {"devices": list(verdict.devices), "errors": {path: ["x"] for path in verdict.error_files}}


def test_agreement_and_a_minimal_disagreement(tmp_path):
    oracle = FakeOracle()
    good = [[("a.yaml", minimal().encode())]]
    assert diff_cdi.outcome(oracle, diff_cdi.write_case(tmp_path / "c", good), "v1.1.0")[0] == "agree"
    bad = [[("a.yaml", (minimal() + "# PANIC\n").encode()), ("b.yaml", minimal(kind="x.com/yy").encode())]]
    assert diff_cdi.outcome(oracle, diff_cdi.write_case(tmp_path / "c", bad), "v1.1.0")[0] == "disagree"
    small = diff_cdi.minimise(oracle, tmp_path / "c", bad, "v1.1.0")
    assert small == [[("a.yaml", b"# PANIC")]]


def test_a_crash_on_both_sides_agrees(tmp_path):
    crash = [[("a.yaml", (minimal(kind="a/gpu") + "# PANIC\n").encode())]]
    assert diff_cdi.outcome(FakeOracle(), diff_cdi.write_case(tmp_path / "c", crash), "v1.1.0")[0] == "agree"


def test_what_cgpu_declines_on_purpose_is_counted_apart(tmp_path):
    merge = [[("a.yaml", (minimal() + "x: {<<: {a: 1}}\n# PANIC\n").encode())]]
    assert diff_cdi.outcome(FakeOracle(), diff_cdi.write_case(tmp_path / "c", merge), "v1.1.0")[0] == "deliberate"


def test_the_corpus():
    samples = diff_cdi.sample_cases()
    assert len(samples) > 40 and all(name.endswith((".yaml", ".json")) for case in samples for name, _ in case[0])
    seeds = [data for case in samples for _, data in case[0]]
    first = diff_cdi.mutated_cases(seeds, 50, seed=3)
    assert first == diff_cdi.mutated_cases(seeds, 50, seed=3) and len(first) == 50
    assert (
        len({data for case in first for files in case if not isinstance(files, str) for _, data in files}) > 40
    )  # mutations differ


def test_the_mutations_reach_issue_25s_classes():
    seeds = [data for case in diff_cdi.sample_cases() for _, data in case[0]]
    cases = diff_cdi.mutated_cases(seeds, 2000, seed=1)
    texts = [data for case in cases for files in case if not isinstance(files, str) for _, data in files]
    assert any(rb"\ud83d" in t or rb"\U00110000" in t for t in texts)  # S: escapes in quoted strings
    assert any(t.startswith((b"%FOO", b"%yaml", b"%YAMLX")) for t in texts)  # G2: unknown directives
    assert any(str(2**64 - 1).encode() in t for t in texts)  # U: uint64 keys
    assert any("İ".encode() in t or "ı".encode() in t or b"\\u0130" in t or b"\\u0131" in t for t in texts)  # KI
    failing = [case for case in cases if any(isinstance(files, str) for files in case)]
    assert {files for case in failing for files in case if isinstance(files, str)} == set(diff_cdi.FAILING_DIRS)
    assert any(len(case) > 1 and not isinstance(case[-1], str) for case in failing)  # W: a later dir to lose


def test_the_mutations_reach_the_ar_n63_and_nz_classes():
    seeds = [data for case in diff_cdi.sample_cases() for _, data in case[0]]
    cases = diff_cdi.mutated_cases(seeds, 2000, seed=1)
    texts = [data for case in cases for files in case if not isinstance(files, str) for _, data in files]
    assert any(t.count(b"&e") >= 2 for t in texts)  # AR: one anchor name defined twice
    assert any(str(-(2**63) - 1).encode() in t for t in texts)  # N63: a float of -2^63 in an int64 field
    assert any(b"-0.0" in t for t in texts)  # NZ: -0.0 in a uint32 field


def test_what_cgpu_declines_is_read_from_the_problems_kind(tmp_path):
    oversized = [[("a.yaml", b"x" * (5 * 1024 * 1024))]]
    verdict, deliberate, _ = diff_cdi.cgpu_verdict(diff_cdi.write_case(tmp_path / "c", oversized), "v1.1.0")
    assert deliberate == set(verdict.error_files) and len(deliberate) == 1
    rejected = [[("a.yaml", b"kind: [")]]
    verdict, deliberate, _ = diff_cdi.cgpu_verdict(diff_cdi.write_case(tmp_path / "d", rejected), "v1.1.0")
    assert deliberate == set() and len(verdict.error_files) == 1


def test_a_failing_dir_of_a_case_fails_as_named(tmp_path):
    dirs = diff_cdi.write_case(tmp_path / "c", ["ENOTDIR", "ELOOP", "ENAMETOOLONG", "ENOENT", [("a.yaml", b"x")]])
    errors = []
    for directory in dirs[:4]:
        try:
            Path(directory).lstat()
        except OSError as exc:
            errors.append(exc.errno)
    import errno

    assert errors == [errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.ENOENT]
    assert Path(dirs[4], "a.yaml").read_bytes() == b"x"
    oracle = FakeOracle()
    case = [[("a.yaml", minimal().encode())], "ENOTDIR", [("b.yaml", minimal(kind="x.com/yy").encode())]]
    assert diff_cdi.outcome(oracle, diff_cdi.write_case(tmp_path / "c", case), "v1.1.0")[0] == "agree"


def test_test_tables_are_go_raw_strings_with_a_spec(tmp_path):
    (tmp_path / "pkg" / "cdi").mkdir(parents=True)
    (tmp_path / "pkg" / "cdi" / "x_test.go").write_text(
        'var a = `\ncdiVersion: "0.3.0"\nkind: a/b\n`\nvar b = `other`\n'
    )
    [[[(name, data)]]] = diff_cdi.test_table_cases(tmp_path)
    assert name == "spec.yaml" and b"kind: a/b" in data


def test_a_tree_that_is_no_cdi_checkout_is_a_build_error(tmp_path):
    deps = tmp_path / "deps"
    (deps / "vendor" / diff_cdi.CDI_MODULE).mkdir(parents=True)
    (deps / "go.mod").write_text("module x\n")
    (deps / "go.sum").write_text("")
    with pytest.raises(diff_cdi.BuildError, match="not a CDI library checkout"):
        diff_cdi.build_oracle(tmp_path / "empty", "go", deps, tmp_path / "work")
