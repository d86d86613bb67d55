"""A long fuzz run of the CDI reader: `parse_spec` and `scan_spec_dirs` on mutated real specs,
random YAML and random bytes, with hypothesis. It stops by itself and prints its figures.

    uv run python scripts/fuzz_cdi.py [--seconds 300] [--max-examples N] [--seed N]

The properties (the same ones tests/faults/test_fuzz_scan.py checks with a small budget):
  parse_spec   returns a Spec or raises SpecError with a message; nothing else, ever.
  scan         scan_spec_dirs over 1-2 dirs of generated files never raises; every problem
               names a path under those dirs; every device comes from a spec it lists; every
               file that does not parse on its own is named in an error.
Outcomes are counted by kind (a valid spec, or the SpecError message with names and numbers
blanked), so "distinct outcomes" says how much of the reader the run reached. A failure is
shrunk by hypothesis and printed as a reproducer (the bytes, as a Python literal), exit 1.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cgpu.cdi.parse import SpecError, parse_spec  # noqa: E402
from cgpu.cdi.scan import scan_spec_dirs  # noqa: E402

SAMPLES = sorted(p for p in (REPO / "cdi-samples").glob("*/spec/*") if p.is_file()) + sorted(
    p for p in (REPO / "cdi-samples" / "broken").rglob("*") if p.is_file()
)
SEEDS = [p.read_bytes() for p in SAMPLES]
TOKENS = [
    b"- ",
    b": ",
    b"{",
    b"}",
    b"[",
    b"]",
    b"&x ",
    b"*x",
    b"\n  ",
    b"\n",
    b"!!int ",
    b"!!binary ",
    b"<<: ",
    b"~",
    b"yes",
    b"---\n",
    b"...\n",
    b'"',
    b"'",
    b"\t",
    b"\x00",
    b"\xef\xbb\xbf",
    b"0x1F",
    b"1e400",
    b"cdiVersion: ",
    b"kind: ",
    b"devices:",
    b"containerEdits:",
    b"deviceNodes:",
    b"mounts:",
    b"hooks:",
    b"name: ",
    b"path: ",
    b"hostPath: ",
    b"env: [",
    b"0.8.0",
    b"0.3.0",
    b"vendor.com/class",
    b"=",
    b"\xff\xfe",
    b"&a [*a]",
    b"? ",
    b"%YAML 1.1\n",
]
KEYS = [
    "cdiVersion",
    "kind",
    "devices",
    "containerEdits",
    "annotations",
    "name",
    "deviceNodes",
    "mounts",
    "hooks",
    "env",
    "path",
    "hostPath",
    "containerPath",
    "options",
    "type",
    "major",
    "minor",
    "fileMode",
    "permissions",
    "uid",
    "gid",
    "hookName",
    "args",
    "timeout",
    "additionalGIDs",
    "intelRdt",
    "netDevices",
]

printable = st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.sampled_from("\n\t")
mutation = st.tuples(
    st.integers(0, 1 << 20),
    st.integers(0, 16),
    st.one_of(
        st.sampled_from(TOKENS), st.text(printable, max_size=8).map(str.encode), st.text(max_size=4).map(str.encode)
    ),
)


@st.composite
def mutated_sample(draw) -> bytes:
    data = draw(st.sampled_from(SEEDS))
    for at, cut, insert in draw(st.lists(mutation, min_size=1, max_size=8)):
        at %= len(data) + 1
        data = data[:at] + insert + data[at + cut :]
    if draw(st.booleans()):  # splice in a slice of another sample
        other = draw(st.sampled_from(SEEDS))
        start = draw(st.integers(0, max(0, len(other) - 1)))
        at = draw(st.integers(0, len(data)))
        data = data[:at] + other[start : start + draw(st.integers(0, 400))] + data[at:]
    return data


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(1 << 70), 1 << 70)
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.sampled_from(["0.5.0", "0.7.0", "1.0.0", "x.com/gpu", "/dev/null", "c", "all"])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=30,
)


@st.composite
def random_yaml(draw) -> bytes:
    import yaml

    document = draw(st.dictionaries(st.sampled_from(KEYS), values, max_size=6))
    if draw(st.booleans()):
        return yaml.safe_dump(document, allow_unicode=draw(st.booleans())).encode()
    import json

    return json.dumps(document, default=str).encode()


# Random bytes mostly stop at the UTF-8 check, so they get one draw in six.
spec_bytes = st.one_of(*[mutated_sample()] * 3, *[random_yaml()] * 2, st.binary(max_size=3000))
file_name = st.sampled_from(["a.yaml", "b.yaml", "c.json", "d.yml", "e.txt", "nvidia.yaml", "amd.json"])
spec_dirs = st.lists(st.dictionaries(file_name, spec_bytes, max_size=4), min_size=1, max_size=2)

_BLANK = re.compile(r"'[^']*'|\"[^\"]*\"|\b\d[\d.:x-]*\b|/[^\s,;:)]*")


def outcome_of(data: bytes) -> str:
    """What parse_spec made of data: "valid", or the SpecError message with specifics blanked.
    Anything but a Spec or a SpecError is the bug this run hunts: it propagates."""
    try:
        parse_spec(data, path="/etc/cdi/fuzz.yaml", priority=0)
    except SpecError as exc:
        assert str(exc).strip(), "a SpecError without a message"
        return "error: " + _BLANK.sub("_", str(exc))[:90]
    return "valid"


def check_scan(dirs: list[dict[str, bytes]]) -> str:
    """Write the files, scan them, check the scan's invariants; returns an outcome label."""
    root = tempfile.mkdtemp(prefix="cgpu-fuzz-")
    try:
        paths = []
        written: dict[str, bytes] = {}
        for index, files in enumerate(dirs):
            folder = os.path.join(root, f"d{index}")
            os.mkdir(folder)
            paths.append(folder)
            for name, data in files.items():
                path = os.path.join(folder, name)
                with open(path, "wb") as handle:
                    handle.write(data)
                written[path] = data
        result = scan_spec_dirs(paths)
        for severity, source, message in result.problems:
            assert severity in ("error", "warning", "info"), severity
            assert source.startswith(root) and message, (source, message)
        listed = {spec.path for spec in result.specs}
        for name, device in result.devices.items():
            assert device.spec.path in listed, name
        named = {source for severity, source, _ in result.problems if severity == "error"}
        for path, data in written.items():
            if path.endswith((".yaml", ".json")) and outcome_of(data) != "valid":
                assert path in named, f"{path} does not parse but no error names it"
        return (
            f"scan: {min(len(result.specs), 3)} spec(s), {min(len(result.devices), 3)} device(s), "
            f"{min(len(result.problems), 3)} problem(s) (3: or more)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300, help="stop after this long (default 300)")
    parser.add_argument("--max-examples", type=int, default=10**9, help="stop after this many examples")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed, to repeat a run")
    parser.add_argument("--batch", type=int, default=1000, help="examples per hypothesis run")
    args = parser.parse_args()

    outcomes: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    deadline = time.monotonic() + args.seconds
    started = time.monotonic()
    failure: BaseException | None = None
    failing = False  # once an example fails, hypothesis shrinks it: no more skipping then

    def one(choice: str, data) -> None:
        nonlocal failing
        if time.monotonic() >= deadline and not failing:
            return
        kinds[choice] += 1
        try:
            outcomes[check_scan(data) if choice == "scan" else outcome_of(data)] += 1
        except BaseException:
            failing = True
            raise

    batch = 0
    while time.monotonic() < deadline and sum(kinds.values()) < args.max_examples:
        budget = min(args.batch, args.max_examples - sum(kinds.values()))
        run_settings = settings(
            max_examples=budget,
            deadline=None,
            database=None,
            derandomize=False,
            phases=[Phase.generate, Phase.shrink],
            print_blob=True,
            suppress_health_check=list(HealthCheck),
        )

        @run_settings
        @given(
            st.sampled_from(["parse"] * 9 + ["scan"]).flatmap(
                lambda c: st.tuples(st.just(c), spec_dirs if c == "scan" else spec_bytes)
            )
        )
        def fuzz(case: tuple[str, bytes]) -> None:
            one(*case)

        if args.seed is not None:
            fuzz = __import__("hypothesis").seed(args.seed + batch)(fuzz)
        try:
            fuzz()
        except Exception as exc:  # hypothesis re-raises the shrunk failure with its reproducer
            failure = exc
            break
        batch += 1

    elapsed = time.monotonic() - started
    total = sum(kinds.values())
    print(f"examples run     {total:,} ({', '.join(f'{n:,} {k}' for k, n in sorted(kinds.items()))})")
    print(f"time             {elapsed:.1f} s, {total / elapsed:,.0f} examples/s")
    print(f"distinct outcomes {len(outcomes):,} (valid specs parsed: {outcomes['valid']:,})")
    for label, count in outcomes.most_common(12):
        print(f"  {count:>8,}  {label}")
    if failure is not None:
        import traceback

        print("\nFAILURE (shrunk by hypothesis; the falsifying example above is the reproducer):")
        traceback.print_exception(failure)
        return 1
    print("failures         none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
