"""Benchmark of the cdi backend (docs/cdi.md#speed); a script, not a timed test.

    uv run python bench/bench_cdi.py [--runs N]

1. CLI: `cgpu probe --backend cdi --json` on the 8-GPU MIG sample beside `python -c pass`, both
   fresh processes of the same interpreter, median of N. Target: within 10x the bare start.
2. Library call (`cgpu.backends.run_backend`) on that spec with its device list copied 1x, 10x
   and 100x, with remembered answers cleared except for `again`:
   - no cache: nothing parsed in memory, nothing on disk (the first run on a node; it parses
     the YAML and stores the result on disk);
   - disk: a fresh process's call, parse results read back from the disk cache;
   - parsed: specs cached in memory (host checks and rules redone: the backend's own cost);
   - again: unchanged files, same process.
   Targets: under 5 ms, under 1 ms again, cost linear in spec size. Both the CLI and the library
   call cache under a temporary CGPU_CACHE_DIR, never the user's.
3. First call: a fresh process's `import cgpu` and first call on the 8-GPU spec, timed inside
   that process from before the import to after the answer (median of N), both ways the library
   is called: `cgpu.probe(...)` (the pydantic Report) and `cgpu.backends.run_backend(...).build()`
   (the dict the CLI prints). The spec is in the disk cache, as on any node after its first call.
   Target: under 100 ms.

    uv run python bench/bench_cdi.py --installed [--python /usr/bin/python3] [--runs N]

measures 1 and 3 as a user runs them, instead of 2: the wheel built (`uv build`), installed into a
new venv of that interpreter (Debian's Python 3.11 by default) with the locked dependencies from
uv's cache (offline; one not in the cache is skipped and named: none is imported on this path),
bytecode compiled; then `cgpu probe` and `python -c pass` run in pairs, one after the other, and
the ratio is the median of the pairs' CPU ratios (a loaded moment slows both of a pair). Target:
within 4x the bare start.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "cdi-samples/nvidia-8gpu-mig/spec/nvidia.yaml"
HOST = REPO / "cdi-samples/hosts/nvidia-580"
RUN_S = 600  # the most one measured or set-up process may take: a hung one ends the bench


def _median_process(argv: list[str], runs: int) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system) of fresh processes, in ms. CPU time
    is the steadier figure on a shared machine: it does not count waiting for a core."""
    import resource

    # As installed: byte-compiled modules (a PYTHONDONTWRITEBYTECODE environment would recompile
    # every module, yaml's too, in every process); one warm-up run writes them.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO, env=env, timeout=RUN_S)
    wall, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO, env=env, timeout=RUN_S)
        wall.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(wall) * 1000, statistics.median(cpu) * 1000


def _scaled_spec(folder: Path, factor: int) -> int:
    """The 8-GPU spec with its device list repeated `factor` times under new names; returns device count."""
    text = SPEC.read_text()
    head, _, rest = text.partition("devices:\n")
    devices, _, tail = rest.partition("\ncontainerEdits:\n")  # the spec-level edits follow the device list
    copies = [
        re.sub(r"(name: )\"?([^\n\"]+)\"?", lambda m, i=i: f'{m.group(1)}"c{i}-{m.group(2)}"', devices)
        if i
        else devices
        for i in range(factor)
    ]
    listed = "\n".join(copies)
    (folder / "nvidia.yaml").write_text(head + "devices:\n" + listed + "\ncontainerEdits:\n" + tail)
    return len(re.findall(r"^-   name: ", listed, flags=re.M))


def _library(folder: Path, cache: Path, runs: int) -> tuple[float, ...]:
    """Median CPU ms of the library call (process time: steady on a busy machine): no cache,
    disk cache, specs parsed in memory, and again with nothing changed."""
    from cgpu.backends import memory, run_backend

    options = {"spec_dirs": [str(folder)], "root": str(HOST), "engine": "none"}

    def timed(series: list[float]) -> None:
        start = time.process_time()
        run_backend("cdi", options).build()
        series.append(time.process_time() - start)

    kept = memory("cdi")  # what the library keeps between calls in this process
    assert kept is not None
    uncached, disk, parsed, again = [], [], [], []
    for _ in range(runs):
        shutil.rmtree(cache, ignore_errors=True)
        kept.clear()
        timed(uncached)
        kept.clear()
        timed(disk)
        timed(again)
        kept.forget()  # every rule redone: the answers and the risky edits, the parsed specs kept
        timed(parsed)
    return tuple(statistics.median(series) * 1000 for series in (uncached, disk, parsed, again))


def _as_installed(env: dict[str, str]) -> dict[str, str]:
    # As installed: byte-compiled modules (a PYTHONDONTWRITEBYTECODE environment would recompile
    # every module, yaml's too, in every process).
    return {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _cpu_ms(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) ms of one fresh process."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO, env=env, timeout=RUN_S)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall * 1000, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000


def _paired(bare: list[str], argv: list[str], runs: int) -> tuple[float, float, float]:
    """Median CPU ms of `bare` and of `argv`, run in pairs, and the median of the pairs' ratios."""
    env = _as_installed(dict(os.environ))
    # one warm-up run writes the bytecode and the caches
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO, env=env, timeout=RUN_S)
    pairs = []
    for index in range(runs):
        first, second = (bare, argv) if index % 2 == 0 else (argv, bare)  # neither always runs first
        one, two = _cpu_ms(first, env)[1], _cpu_ms(second, env)[1]
        pairs.append((one, two) if first is bare else (two, one))
    ratios = [cli / max(base, 0.1) for base, cli in pairs]
    return (
        statistics.median(b for b, _ in pairs),
        statistics.median(c for _, c in pairs),
        statistics.median(ratios),
    )


# A fresh process's import and first call, timed inside it; prints wall and CPU ms.
FIRST_CALL = """
import time
wall, cpu = time.perf_counter(), time.process_time()
{call}
print((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000)
"""
CALLS = {
    "cgpu.probe (Report)": """
import cgpu
assert cgpu.probe("cdi", spec_dirs=[{spec!r}], root={root!r}, engine="none").containers""",
    "run_backend().build() (dict)": """
import cgpu
from cgpu.backends import run_backend
assert run_backend("cdi", dict(spec_dirs=[{spec!r}], root={root!r}, engine="none")).build()["devices"]""",
    # what any pydantic model costs a fresh process before cgpu does anything: cgpu.probe's floor
    "pydantic, one model": """
from pydantic import BaseModel
class Model(BaseModel):
    field: int
assert Model(field=1).field == 1""",
}


def _first_call(python: str, runs: int) -> None:
    env = _as_installed(dict(os.environ))
    for label, call in CALLS.items():
        code = FIRST_CALL.format(call=call.format(spec=str(SPEC.parent), root=str(HOST)))
        argv = [python, "-c", code]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO, env=env, timeout=RUN_S)  # warm-up
        wall, cpu = [], []
        for _ in range(runs):
            done = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=REPO, env=env, timeout=RUN_S)
            figures = done.stdout.split()
            wall.append(float(figures[0]))
            cpu.append(float(figures[1]))
        target = "" if call is CALLS["pydantic, one model"] else "; target < 100 ms"
        print(
            f"{'first call: ' + label:40} {statistics.median(wall):8.1f} {statistics.median(cpu):8.1f}"
            f"   (in-process{target})"
        )


def _install(python: str, folder: Path) -> Path:
    """The wheel built and installed into a new venv of `python`, bytecode compiled; its bin dir."""
    dist, venv = folder / "dist", folder / "venv"
    subprocess.run(["uv", "build", "--wheel", "-q", "-o", dist, REPO], check=True, timeout=600)
    (wheel,) = dist.glob("cgpu-*.whl")
    subprocess.run([python, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    target = str(venv / "bin/python")
    pins = subprocess.run(
        ["uv", "export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes", "-q", "--directory", REPO],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.splitlines()
    install = ["uv", "pip", "install", "-q", "--offline", "--no-deps", "--python", target]
    skipped = []
    for pin in (line.strip() for line in pins):
        if pin and not pin.startswith("#"):
            done = subprocess.run([*install, pin], capture_output=True, timeout=300)
            if done.returncode:
                skipped.append(pin.split(";")[0].strip())
    subprocess.run([*install, wheel], check=True, timeout=300)
    subprocess.run(
        [target, "-m", "compileall", "-q", venv / "lib"], check=True, stdout=subprocess.DEVNULL, timeout=RUN_S
    )
    if skipped:
        print(f"not in uv's cache, not installed: {', '.join(skipped)}")
    return venv / "bin"


def _installed(python: str, runs: int, tmp: Path, keep: str | None) -> int:
    bin_dir = _install(python, Path(keep) if keep else tmp / "install")
    version = subprocess.run(
        [bin_dir / "python", "-VV"], check=True, capture_output=True, text=True, timeout=RUN_S
    ).stdout
    print(f"installed wheel, {python}: {version.split()[1]}, bytecode compiled; CPU ms, {runs} pairs")
    bare = [str(bin_dir / "python"), "-c", "pass"]
    command = [str(bin_dir / "cgpu"), "probe", "--backend", "cdi", "--spec-dir", str(SPEC.parent)]
    command += ["--root", str(HOST), "--json"]
    print(f"{'':40} {'bare':>8} {'cgpu':>8}")
    for label, argv in (("--engine none", [*command, "--engine", "none"]), ("default (--engine auto)", command)):
        base, cli, ratio = _paired(bare, argv, runs)
        print(
            f"{'cgpu probe --backend cdi --json (8 GPU)':40} {base:8.1f} {cli:8.1f}"
            f"   = {ratio:.1f}x cpu (target <= 4x), {label}"
        )
    print(f"{'':40} {'wall ms':>8} {'cpu ms':>8}")
    _first_call(str(bin_dir / "python"), runs)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--installed", action="store_true", help="the CLI and first call as installed from the wheel")
    parser.add_argument("--python", default="/usr/bin/python3", help="the interpreter for --installed")
    parser.add_argument("--keep", metavar="DIR", help="--installed: install in DIR, kept")
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        if args.installed:
            os.environ["CGPU_CACHE_DIR"] = str(Path(tmp) / "cache")
            return _installed(args.python, args.runs, Path(tmp), args.keep)
        cache = Path(tmp) / "cache"
        os.environ["CGPU_CACHE_DIR"] = str(cache)
        bare = _median_process([python, "-c", "pass"], args.runs)
        # the sample spec was written long ago: the warm-up run stores its parse on disk
        command = [python, "-m", "cgpu", "probe", "--backend", "cdi", "--spec-dir", str(SPEC.parent)]
        command += ["--root", str(HOST), "--json"]
        # --engine none measures the reader and the rules; the default (auto) adds the host's engine,
        # asked once and then remembered in the cache dir.
        cli = _median_process([*command, "--engine", "none"], args.runs)
        auto = _median_process(command, args.runs)
        print(f"{'':40} {'wall ms':>8} {'cpu ms':>8}")
        print(f"{'python -c pass':40} {bare[0]:8.1f} {bare[1]:8.1f}")
        for label, figures in (("--engine none", cli), ("default (--engine auto)", auto)):
            print(
                f"{'cgpu probe --backend cdi --json (8 GPU)':40} {figures[0]:8.1f} {figures[1]:8.1f}"
                f"   = {figures[0] / bare[0]:.1f}x wall, {figures[1] / bare[1]:.1f}x cpu (target <= 10x), {label}"
            )
        _first_call(python, args.runs)
        import cgpu.backends.cdi
        import cgpu.cdi.scan  # noqa: F401
        from cgpu.cdi import spec_cache

        folders = {}
        for factor in (1, 10, 100):
            folder = Path(tmp) / f"x{factor}"
            folder.mkdir()
            folders[factor] = folder, _scaled_spec(folder, factor)
        time.sleep(spec_cache.RACY_SECONDS)  # files changed just now are not stored on disk (see spec_cache)
        print(
            f"{'spec':>15} {'devices':>8} {'no cache':>9} {'disk':>7} {'parsed':>7} {'again':>7}"
            f" {'no cache/device µs':>19}   (CPU ms)"
        )
        for factor, (folder, count) in folders.items():
            uncached, disk, parsed, again = _library(folder, cache, max(3, args.runs // (1 + factor // 10)))
            size = os.path.getsize(folder / "nvidia.yaml") // 1024
            print(
                f"{f'{factor}x ({size} KiB)':>15} {count:8d} {uncached:9.2f} {disk:7.2f} {parsed:7.2f} {again:7.2f}"
                f" {uncached * 1000 / count:19.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
