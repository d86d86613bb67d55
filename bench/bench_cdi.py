"""Benchmark of the cdi backend (design §9); a script, not a timed test.

    uv run python bench/bench_cdi.py [--runs N]

1. CLI: `cgpu probe --backend cdi --json` on the 8-GPU MIG sample beside `python -c pass`, both
   fresh processes of the same interpreter, median of N. Target: within 10x the bare start.
2. Library call (`cgpu.backends.run_backend`) on that spec copied 1x, 10x and 100x (more GPUs
   in one file), cold (parse cache and remembered answers cleared) and again with unchanged
   files. Targets: under 5 ms, under 1 ms again, cost linear in spec size.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "cdi-samples/nvidia-8gpu-mig/spec/nvidia.yaml"
HOST = REPO / "cdi-samples/hosts/nvidia-580"


def _median_process(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _scaled_spec(folder: Path, factor: int) -> int:
    """The 8-GPU spec with its device list repeated `factor` times under new names; returns device count."""
    text = SPEC.read_text()
    head, _, rest = text.partition("devices:\n")
    devices, _, tail = rest.partition("\ncontainerEdits:\n")  # the spec-level edits follow the device list
    copies = [re.sub(r"(name: )\"?([^\n\"]+)\"?", lambda m: f'{m.group(1)}"c{i}-{m.group(2)}"', devices)
              if i else devices for i in range(factor)]
    (folder / "nvidia.yaml").write_text(head + "devices:\n" + "\n".join(copies) + "\ncontainerEdits:\n" + tail)
    return len(re.findall(r"^-   name: ", "".join(copies), flags=re.M))


def _library(folder: Path, runs: int) -> tuple[float, float]:
    import cgpu.backends.cdi as backend
    from cgpu.backends import run_backend
    from cgpu.cdi import scan

    options = {"spec_dirs": [str(folder)], "root": str(HOST)}
    cold, warm = [], []
    for _ in range(runs):
        scan.clear_parse_cache()
        backend._REMEMBERED.clear()
        start = time.perf_counter()
        run_backend("cdi", options).build()
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        run_backend("cdi", options).build()
        warm.append(time.perf_counter() - start)
    return statistics.median(cold) * 1000, statistics.median(warm) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    python = sys.executable
    bare = _median_process([python, "-c", "pass"], args.runs)
    cli = _median_process([python, "-m", "cgpu", "probe", "--backend", "cdi", "--spec-dir", str(SPEC.parent),
                           "--root", str(HOST), "--json"], args.runs)
    print(f"python -c pass                         {bare:8.1f} ms")
    print(f"cgpu probe --backend cdi --json (8 GPU) {cli:8.1f} ms  = {cli / bare:.1f}x (target <= 10x)")
    import cgpu.backends.cdi  # noqa: F401  the library call is measured with cgpu imported
    import cgpu.cdi.scan  # noqa: F401

    print(f"{'spec':>14} {'devices':>8} {'cold ms':>9} {'again ms':>9} {'cold/device µs':>15}")
    with tempfile.TemporaryDirectory() as tmp:
        for factor in (1, 10, 100):
            folder = Path(tmp) / f"x{factor}"
            folder.mkdir()
            count = _scaled_spec(folder, factor)
            cold, warm = _library(folder, max(3, args.runs // (1 + factor // 10)))
            size = os.path.getsize(folder / "nvidia.yaml") // 1024
            print(f"{f'{factor}x ({size} KiB)':>14} {count:8d} {cold:9.2f} {warm:9.2f} {cold * 1000 / count:15.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
