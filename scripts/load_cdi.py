"""Load on the CDI path: many concurrent `cgpu probe --backend cdi --json` runs (processes, and
threads calling the library), concurrent `--verify` runs against one podman service, and
concurrent users of the answer cache. Every answer is checked; it stops by itself and prints
its figures. Only local resources: the samples, this host's podman, a temp folder.

    uv run python scripts/load_cdi.py [--procs 8] [--cli-runs 200] [--threads 8] [--calls 2000]
                                      [--verify 4] [--cache-procs 8] [--seconds 120]

Parts: cli (processes), library (threads), verify (needs podman and root to write /etc/cdi;
skipped with the reason otherwise), cache. `--only PART` runs one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SAMPLES = REPO / "cdi-samples"
MARK_VAR = "CGPU_LOAD_MARK"

# (sample spec dir, host tree, the containers the samples' README says it gets)
CASES = [
    ("nvidia-current", "nvidia-580", ["cuda", "vulkan", "opencl"]),
    ("nvidia-1.17", "nvidia-575", ["cuda", "vulkan"]),
    ("nvidia-1.17", "nvidia-580", []),
    ("nvidia-compute-only", "nvidia-580", ["cuda"]),
    ("nvidia-8gpu-mig", "nvidia-580", ["cuda", "vulkan", "opencl"]),
    ("nvidia-no-hooks", "nvidia-580", []),
    ("nvidia-wsl", "wsl", ["cuda"]),
    ("amd", "amd", ["rocm", "vulkan", "opencl"]),
    ("intel", "intel", ["vulkan", "opencl"]),
    ("lavapipe", "software", []),
]


def _options(case: tuple[str, str, list[str]]) -> dict[str, Any]:
    sample, host, _ = case
    # Fake host trees: judged by the newest CDI rules, not by whatever engine this machine has.
    return {"spec_dirs": [str(SAMPLES / sample / "spec")], "root": str(SAMPLES / "hosts" / host), "engine": "none"}


def _comparable(report: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in report.items() if k != "checked_at"}, sort_keys=True)


def reference_answers() -> list[str]:
    """Each case's report, computed once, alone; and each checked against the documented answer."""
    from cgpu.backends import run_backend

    answers = []
    for case in CASES:
        report = run_backend("cdi", _options(case)).build()
        assert report["containers"] == case[2], f"{case}: {report['containers']}"
        answers.append(_comparable(report))
    return answers


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = 0
        self.wrong: list[str] = []

    def add(self, error: str | None) -> None:
        with self.lock:
            self.done += 1
            if error:
                self.wrong.append(error)


def cli_load(procs: int, runs: int, seconds: float, expected: list[str]) -> dict[str, Any]:
    """`runs` CLI processes, `procs` at a time, cycling through the cases."""
    tally = Tally()
    mark = uuid.uuid4().hex
    cache = tempfile.mkdtemp(prefix="cgpu-load-cli-")  # empty: the first runs race to fill the spec cache
    env = {**os.environ, MARK_VAR: mark, "PYTHONPATH": str(REPO), "CGPU_CACHE_DIR": cache}
    deadline = time.monotonic() + seconds

    def one(index: int) -> None:
        if time.monotonic() > deadline:
            return
        case = CASES[index % len(CASES)]
        options = _options(case)
        argv = [
            sys.executable,
            "-m",
            "cgpu",
            "probe",
            "--backend",
            "cdi",
            "--json",
            "--spec-dir",
            options["spec_dirs"][0],
            "--root",
            options["root"],
            "--engine",
            options["engine"],
        ]
        done = subprocess.run(argv, capture_output=True, env=env, timeout=60, cwd=REPO)
        error = None
        if done.returncode != 0 or b"Traceback" in done.stderr:
            error = f"{case[0]}: exit {done.returncode}: {done.stderr[-300:]!r}"
        elif _comparable(json.loads(done.stdout)) != expected[index % len(CASES)]:
            error = f"{case[0]}: the answer differs from the one computed alone"
        tally.add(error)

    started = time.monotonic()
    try:
        with ThreadPoolExecutor(procs) as pool:
            list(pool.map(one, range(runs)))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    elapsed = time.monotonic() - started
    return {
        "runs": tally.done,
        "concurrency": procs,
        "seconds": round(elapsed, 2),
        "per_second": round(tally.done / elapsed, 1),
        "wrong": tally.wrong,
        "left_running": _marked(mark),
    }


MIG = 4  # the 8-GPU MIG sample: an agent asking about its one node, again and again


def library_load(threads: int, calls: int, seconds: float, expected: list[str], *, minimum: int = 0) -> dict[str, Any]:
    """`calls` library calls: one node's spec asked again and again, then all the cases in
    turn in one thread, then over `threads` threads (the GIL makes that a safety test more
    than a speed-up). Each part ends at a third of `seconds`, but not before it has made
    `minimum` calls (shared among its threads): a busy host makes the load slower, never smaller
    than what a test counts on."""
    from cgpu.backends import run_backend

    def check(index: int, cases: list[int]) -> str | None:
        number = cases[index % len(cases)]
        case = CASES[number]
        try:
            report = run_backend("cdi", _options(case)).build()
        except Exception as exc:  # the finding this part hunts
            return f"{case[0]}: {type(exc).__name__}: {exc}"
        if _comparable(report) != expected[number]:
            return f"{case[0]}: the answer differs from the one computed alone"
        return None

    figures: dict[str, Any] = {}
    every = list(range(len(CASES)))
    for label, workers, cases in (
        ("one_node_one_thread", 1, [MIG]),
        ("all_cases_one_thread", 1, every),
        (f"all_cases_{threads}_threads", threads, every),
    ):
        tally = Tally()
        deadline = time.monotonic() + seconds / 3

        def worker(
            start: int,
            workers: int = workers,
            tally: Tally = tally,
            deadline: float = deadline,
            cases: list[int] = cases,
        ) -> None:
            share = -(-minimum // workers)
            for made, index in enumerate(range(start, calls, workers)):
                if made >= share and time.monotonic() > deadline:
                    return
                tally.add(check(index, cases))

        started = time.monotonic()
        pool = [threading.Thread(target=worker, args=(n,)) for n in range(workers)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        elapsed = time.monotonic() - started
        figures[label] = {
            "calls": tally.done,
            "seconds": round(elapsed, 2),
            "per_second": round(tally.done / elapsed),
            "wrong": tally.wrong,
        }
    return figures


# --- --verify against one podman service -------------------------------------------------------


def verify_load(runs: int, seconds: float) -> dict[str, Any]:
    """`runs` concurrent `cgpu probe --backend cdi --verify` against one podman service, each with
    its own device of one unique test kind in /etc/cdi (removed after)."""
    podman = shutil.which("podman")
    lvp = Path("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json")
    if podman is None or not lvp.exists():
        return {"skipped": "needs podman and Mesa's lavapipe (mesa-vulkan-drivers)"}
    from cgpu.engines.client import PodmanService

    work = Path(tempfile.mkdtemp(prefix="cgpu-load-"))
    kind = f"cgpu-load-{uuid.uuid4().hex[:8]}.example.com/gpu"
    spec = Path("/etc/cdi") / f"{kind.split('/')[0]}.yaml"
    mark = uuid.uuid4().hex
    service = None
    try:
        shutil.copy(lvp, work / "lvp.json")
        mount = f"{{hostPath: {work / 'lvp.json'}, containerPath: /etc/cgpu-load/lvp.json, options: [ro, bind]}}"
        devices = "".join(
            f"  - name: dev{n}\n    containerEdits:\n      mounts:\n        - {mount}\n" for n in range(runs)
        )
        try:
            spec.parent.mkdir(parents=True, exist_ok=True)
            spec.write_text(
                f'cdiVersion: "0.5.0"\nkind: {kind}\n'
                "containerEdits:\n  env: [VK_DRIVER_FILES=/etc/cgpu-load/lvp.json]\n"
                f"devices:\n{devices}"
            )
        except OSError as exc:
            return {"skipped": f"cannot write a spec into /etc/cdi: {exc}"}
        service = PodmanService.start(timeout=30)
        label = f"load-{mark[:12]}"  # these runs' containers alone, whatever else runs on this host
        env = {
            **os.environ,
            MARK_VAR: mark,
            "PYTHONPATH": str(REPO),
            "CONTAINER_HOST": service.url,
            "CGPU_VERIFY_LABEL": label,
        }
        before = _labelled(podman, label)
        started = time.monotonic()
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cgpu",
                    "probe",
                    "--backend",
                    "cdi",
                    "--json",
                    "--verify",
                    "--device",
                    f"{kind}=dev{n}",
                ],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for n in range(runs)
        ]
        wrong = []
        for n, proc in enumerate(procs):
            try:
                out, err = proc.communicate(timeout=max(1.0, started + seconds - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                wrong.append(f"dev{n}: still running after {seconds:g} s")
                continue
            if proc.returncode != 0 or b"Traceback" in err:
                wrong.append(f"dev{n}: exit {proc.returncode}: {err[-300:]!r}")
                continue
            [entry] = json.loads(out)["devices"]
            if entry.get("live_status") != "agrees":
                wrong.append(f"dev{n}: live_status {entry.get('live_status')}: {json.loads(out)['problems']}")
        elapsed = time.monotonic() - started
        left: set[str] = set()
        for _ in range(20):  # a container being removed may take a moment to go
            left = _labelled(podman, label) - before
            if not left:
                break
            time.sleep(0.5)
        return {
            "runs": runs,
            "seconds": round(elapsed, 2),
            "wrong": wrong,
            "containers_left": sorted(left),
            "left_running": _marked(mark),
        }
    finally:
        spec.unlink(missing_ok=True)
        if service is not None:
            service.stop()
        shutil.rmtree(work, ignore_errors=True)


def _labelled(podman: str, label: str) -> set[str]:
    done = subprocess.run(
        [podman, "ps", "-a", "-q", "--filter", f"label=cgpu.verify={label}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return set(done.stdout.split())


# --- the answer cache ----------------------------------------------------------------------------


CACHE_WORKER = """
import json, sys, time
from pathlib import Path
from cgpu.backends.krunkit.answer_cache import AnswerCache
directory, key_index, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
warnings = []
cache = AnswerCache("load", ttl=3600, warn=lambda s, m: warnings.append(m), directory=Path(directory))
key = {"vm": f"image-{key_index}", "host": "load"}
with cache.locked(key, timeout=60) as held:
    got = cache.get(key)
    if got is None:
        with open(log, "a") as f:
            f.write(f"{key_index}\\n")  # one line per computation: the lock should make it one per key
        time.sleep(0.2)  # a VM boot, shortened
        value = {"answer": key_index, "pad": "x" * 20000}
        cache.put(key, value)
    else:
        value = got[0]
print(json.dumps({"value": value["answer"], "held": held, "warnings": warnings}))
"""


def cache_load(procs: int, keys: int) -> dict[str, Any]:
    """`procs` processes at once asking for `keys` keys: each key is computed once (the lock),
    every process reads its key's value, and no temp file or torn entry stays."""
    directory = Path(tempfile.mkdtemp(prefix="cgpu-load-cache-"))
    log = directory / "computed.log"
    try:
        started = time.monotonic()
        children = [
            subprocess.Popen(
                [sys.executable, "-c", CACHE_WORKER, str(directory), str(n % keys), str(log)],
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for n in range(procs)
        ]
        wrong = []
        for n, child in enumerate(children):
            out, err = child.communicate(timeout=120)
            if child.returncode != 0:
                wrong.append(f"worker {n}: exit {child.returncode}: {err[-300:]!r}")
                continue
            answer = json.loads(out)
            if answer["value"] != n % keys or not answer["held"] or answer["warnings"]:
                wrong.append(f"worker {n}: {answer}")
        elapsed = time.monotonic() - started
        computed = log.read_text().split() if log.exists() else []
        entries = list((directory / "load").glob("*.json"))
        torn = [p.name for p in entries if not _valid_json(p)]
        temp = [p.name for p in (directory / "load").glob("*.tmp")]
        return {
            "processes": procs,
            "keys": keys,
            "seconds": round(elapsed, 2),
            "computations": len(computed),
            "entries": len(entries),
            "torn": torn,
            "temp_left": temp,
            "wrong": wrong,
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _valid_json(path: Path) -> bool:
    try:
        json.loads(path.read_bytes())
        return True
    except ValueError:
        return False


def _marked(mark: str) -> list[str]:
    """Processes still alive (zombies aside) that carry this run's mark."""
    left = []
    needle = f"{MARK_VAR}={mark}".encode()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if needle in env and state != "Z":
            left.append(entry)
    return left


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=8, help="CLI processes at a time")
    parser.add_argument("--cli-runs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--calls", type=int, default=2000, help="library calls per thread setting")
    parser.add_argument("--verify", type=int, default=4, help="concurrent --verify runs")
    parser.add_argument("--cache-procs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=120, help="time limit of each part")
    parser.add_argument("--only", choices=("cli", "library", "verify", "cache"))
    args = parser.parse_args()

    expected = reference_answers()
    results: dict[str, Any] = {}
    if args.only in (None, "cli"):
        results["cli"] = cli_load(args.procs, args.cli_runs, args.seconds, expected)
    if args.only in (None, "library"):
        results["library"] = library_load(args.threads, args.calls, args.seconds, expected)
    if args.only in (None, "verify"):
        results["verify"] = verify_load(args.verify, args.seconds)
    if args.only in (None, "cache"):
        results["cache"] = cache_load(args.cache_procs, max(1, args.cache_procs // 4))
    print(json.dumps(results, indent=2))
    failed = any(
        part.get(key)
        for part in _parts(results)
        for key in ("wrong", "left_running", "containers_left", "torn", "temp_left")
    )
    cache = results.get("cache")
    if cache and cache["computations"] != cache["keys"]:
        failed = True
    print("FAILED" if failed else "all answers correct, nothing left behind")
    return 1 if failed else 0


def _parts(results: dict[str, Any]) -> list[dict[str, Any]]:
    parts = []
    for value in results.values():
        parts.extend(value.values() if "all_cases_one_thread" in value else [value])
    return parts


if __name__ == "__main__":
    sys.exit(main())
