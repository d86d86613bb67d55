"""`cgpu watch` under churn, as a DRA driver loads a node (a spec per claim): RSS after 500 spec
changes, RSS, probe time and the CPU of a change with 200, 2,000 and 20,000 specs, idle CPU, and
how soon a change reaches the NFD feature file (one inotify event on its visible name, as
nfd-worker >= v0.19 watches features.d).

    uv run python bench/bench_watch.py [--changes 500] [--specs 200 2000 20000] [--idle 20] [--only many]

Runs as deployed (PYTHONMALLOC=malloc, deploy/kubernetes/daemonset.yaml). Prints one line per
figure; docs/kubernetes.md quotes them.

Prints one line per figure; docs/kubernetes.md quotes them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOST = REPO / "cdi-samples" / "hosts" / "nvidia-580"

CLAIM = """cdiVersion: 0.6.0
kind: k8s.gpu.nvidia.com/claim
devices:
  - name: {uid}
    containerEdits:
      env:
        - NVIDIA_VISIBLE_DEVICES=void
        - CLAIM_UID={uid}
      deviceNodes:
        - path: /dev/nvidia0
containerEdits:
  deviceNodes:
    - path: /dev/nvidiactl
    - path: /dev/nvidia-uvm
"""


REQUEST_KIB = 32 * 1024  # the DaemonSet's memory request (deploy/kubernetes/daemonset.yaml)


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Watch:
    def __init__(self, spec_dir: Path, out: Path, features: Path | None = None) -> None:
        self.answer = out / "answer.json"
        argv = [sys.executable, "-m", "cgpu", "watch", "--spec-dir", str(spec_dir), "--root", str(HOST),
                "--engine", "none", "--answer-file", str(self.answer), "--interval", "3600"]  # fmt: skip
        if features is not None:
            argv += ["--nfd-file", str(features / "cgpu")]
        # as deployed (deploy/kubernetes/daemonset.yaml): glibc's allocator; PYTHONMALLOC=pymalloc for CPython's own
        env = {**os.environ, "CGPU_CACHE_DIR": str(out / "cache")}
        env.setdefault("PYTHONMALLOC", "malloc")
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def written(self) -> int:
        try:
            return os.stat(self.answer).st_mtime_ns
        except FileNotFoundError:
            return 0

    def wait_written(self, after: int, timeout: float = 600) -> float:
        started = time.monotonic()
        while self.written() <= after:
            if self.proc.poll() is not None or time.monotonic() - started > timeout:
                raise SystemExit(f"watch stopped or no answer within {timeout} s")
            time.sleep(0.005)
        return time.monotonic() - started

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def churn(work: Path, changes: int) -> None:
    specs, out = work / "churn-specs", work / "churn-out"
    specs.mkdir()
    out.mkdir()
    watch = Watch(specs, out)
    watch.wait_written(0)
    start_rss = rss_kib(watch.proc.pid)
    marks = {}
    for index in range(changes):
        before = watch.written()
        (specs / f"claim-{index}.yaml").write_text(CLAIM.format(uid=f"uid-{index:05d}"))
        if index >= 5:
            (specs / f"claim-{index - 5}.yaml").unlink()  # ~5 claims at a time, each a new file
        watch.wait_written(before)
        if index + 1 in (50, changes):
            marks[index + 1] = rss_kib(watch.proc.pid)
    print(f"churn: RSS {start_rss / 1024:.1f} MiB at start, " + ", ".join(
        f"{kib / 1024:.1f} MiB after {n} changes" for n, kib in marks.items()))  # fmt: skip
    watch.stop()


def many(work: Path, count: int, idle: float) -> None:
    specs, out = work / "many-specs", work / "many-out"
    work.mkdir()
    specs.mkdir()
    out.mkdir()
    for index in range(count):
        (specs / f"claim-{index:05d}.yaml").write_text(CLAIM.format(uid=f"uid-{index:05d}"))
    past = time.time() - 60  # older than the disk cache's racy window: stored on the first read
    for entry in os.scandir(specs):
        os.utime(entry.path, (past, past))
    watch = Watch(specs, out)
    first = watch.wait_written(0)
    time.sleep(3)  # the probe's tail: the collection and heap trim after the write
    between = rss_kib(watch.proc.pid)
    before = watch.written()
    cpu_before = cpu_seconds(watch.proc.pid)
    started = time.monotonic()
    (specs / f"claim-{count // 2:05d}.yaml").write_text(CLAIM.format(uid="uid-changed"))  # one claim changed
    watch.wait_written(before)
    second = time.monotonic() - started
    time.sleep(3)
    change_cpu = cpu_seconds(watch.proc.pid) - cpu_before
    size = os.stat(watch.answer).st_size
    rss = rss_kib(watch.proc.pid)
    peak = rss_kib(watch.proc.pid, "VmHWM")
    cpu = cpu_seconds(watch.proc.pid)
    time.sleep(idle)
    idle_cpu = cpu_seconds(watch.proc.pid) - cpu
    print(f"{count} specs: first answer {first:.1f} s, a change {second:.1f} s ({change_cpu:.2f} s CPU), "
          f"answer file {size / 2**20:.1f} MiB, RSS between probes {between / 1024:.1f} MiB "
          f"({'within' if between < REQUEST_KIB else 'over'} the DaemonSet's 32 Mi request), "
          f"{rss / 1024:.1f} after the change (peak {peak / 1024:.1f}), "
          f"idle CPU {idle_cpu:.2f} s in {idle:g} s")  # fmt: skip
    watch.stop()
    watch.answer.unlink()
    watch = Watch(specs, out)  # a new process: specs from the disk cache
    print(f"{count} specs, restarted: first answer {watch.wait_written(0):.1f} s (disk cache)")
    watch.stop()


def idle_and_delay(work: Path, idle: float) -> None:
    from inotify_simple import INotify, flags

    specs, out, features = work / "idle-specs", work / "idle-out", work / "features.d"
    for directory in (specs, out, features):
        directory.mkdir()
    shutil.copy(REPO / "cdi-samples" / "nvidia-current" / "spec" / "nvidia.yaml", specs / "nvidia.yaml")
    watch = Watch(specs, out, features)
    watch.wait_written(0)
    time.sleep(1.5)
    cpu = cpu_seconds(watch.proc.pid)
    time.sleep(idle)
    print(f"idle (one NVIDIA spec): CPU {cpu_seconds(watch.proc.pid) - cpu:.2f} s in {idle:g} s, "
          f"RSS {rss_kib(watch.proc.pid) / 1024:.1f} MiB")  # fmt: skip
    inotify = INotify()
    inotify.add_watch(str(features), flags.CREATE | flags.MOVED_TO | flags.MODIFY | flags.CLOSE_WRITE | flags.DELETE)
    delays, events = [], []
    text = (specs / "nvidia.yaml").read_text()
    for index in range(20):
        edited = text.replace("kind: nvidia.com/gpu", "kind: nvidia.com/gpu" if index % 2 else "kind: example.com/gpu")
        started = time.monotonic()
        (specs / "nvidia.yaml").write_text(edited)
        got = inotify.read(timeout=10_000)
        delays.append(time.monotonic() - started)
        events.append([(e.name, flags.from_mask(e.mask)) for e in got])
        time.sleep(1.1)  # past nfd-worker's one-second rate limit
        events[-1] += [(e.name, flags.from_mask(e.mask)) for e in inotify.read(timeout=0)]
    one_event = sum(1 for e in events if len(e) == 1 and e[0][0] == "cgpu")
    print(
        f"label delay (spec change to the feature file's event): median {statistics.median(delays) * 1000:.0f} ms, "
        f"max {max(delays) * 1000:.0f} ms; {one_event} of {len(events)} writes were one event on the visible name"
    )
    watch.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=500)
    parser.add_argument("--specs", type=int, nargs="+", default=[200, 2_000, 20_000])
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--only", choices=["idle", "churn", "many"], help="one part of the bench")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cgpu-bench-watch-") as work:
        if args.only in (None, "idle"):
            idle_and_delay(Path(work), args.idle)
        if args.only in (None, "churn"):
            churn(Path(work), args.changes)
        if args.only in (None, "many"):
            for count in args.specs:
                many(Path(work) / str(count), count, args.idle)


if __name__ == "__main__":
    main()
