"""How long each command takes to end at its --timeout when what it waits on hangs; a script, not
a timed test (the tests bound the same cases against a baseline: tests/timing.py).

    uv run python bench/bench_deadlines.py [--runs N] [--only NAME]
    uv run python scripts/cpu_hog.py --times 4 -- uv run python bench/bench_deadlines.py   # at load 8 on 2 cores

Each case runs the real CLI (`python -m cgpu`) N times as a fresh process and reports the
median and the longest wall time from start to exit, the part past the --timeout, and whether
any process the run started outlived it (each run carries an environment mark). The promise is
the timeout plus 2 s (docs/hardening.md, "Deadlines"). A case whose tools are missing (podman,
busybox, docker-py, root for /etc/cdi) is skipped with the reason.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
MARK_VAR = "CGPU_FAULT_MARK"
PROMISE_S = 2.0


class Skip(Exception):
    pass


def _marked(mark: str) -> list[str]:
    found = []
    needle = f"{MARK_VAR}={mark}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if needle in env and state != "Z":
            found.append(entry)
    return found


def _run(argv: list[str], env: dict[str, str], cache: str) -> tuple[float, int, bool]:
    """One run: (seconds, exit status, whether a process it started outlived it 5 s later)."""
    mark = uuid.uuid4().hex
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu", *argv],
        cwd=REPO,
        env={**os.environ, **env, MARK_VAR: mark, "PYTHONPATH": str(REPO), "CGPU_CACHE_DIR": cache},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        code = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    seconds = time.monotonic() - started
    deadline = time.monotonic() + 5
    while (left := _marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return seconds, code, bool(left)


# --- the things that hang ---------------------------------------------------------------------


@contextmanager
def _docker_daemon(export: str) -> Iterator[dict[str, str]]:
    try:
        import docker  # noqa: F401 - the CLI needs it too
    except ImportError:
        raise Skip("the docker Python package is not installed") from None
    from tests.faults.test_image_faults import _Daemon, _daemon_handler

    folder = tempfile.mkdtemp(prefix="cgpu-bench-docker-")
    server = _Daemon(os.path.join(folder, "docker.sock"), _daemon_handler(export))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield {"DOCKER_HOST": f"unix://{folder}/docker.sock"}
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _hung_podman() -> Iterator[dict[str, str]]:
    folder = tempfile.mkdtemp(prefix="cgpu-bench-bin-")
    Path(folder, "podman").write_text("#!/bin/sh\nexec sleep 600\n")
    Path(folder, "podman").chmod(0o755)
    try:
        yield {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "DOCKER_HOST": ""}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _hung_build() -> Iterator[dict[str, str]]:
    from tests.krunkit.test_build_image import FAKE

    folder = tempfile.mkdtemp(prefix="cgpu-bench-bin-")
    Path(folder, "podman").write_text(FAKE.format(python=sys.executable))
    Path(folder, "podman").chmod(0o755)
    try:
        yield {
            "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
            "FAKE_PODMAN_MODE": "hang",
            "FAKE_PODMAN_LOG": os.path.join(folder, "log"),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _gzip_bomb() -> Iterator[str]:
    from tests.image.hostile import gzip_bomb_layer
    from tests.image.trees import oci_archive

    folder = Path(tempfile.mkdtemp(prefix="cgpu-bench-bomb-"))
    try:
        gzip_bomb_layer(folder / "bomb.gz", 16)  # 16 GiB of zeros in 16 MB
        yield str(oci_archive(folder / "o.tar", [(folder / "bomb.gz").read_bytes()], gzip_layers=False))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _podman(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=300)


@contextmanager
def _busybox_image(python3: str) -> Iterator[str]:
    """A busybox image whose `python3` is this sh script (removed after)."""
    busybox = shutil.which("busybox")
    if shutil.which("podman") is None or busybox is None:
        raise Skip("needs podman and busybox-static")
    root = Path(tempfile.mkdtemp(prefix="cgpu-bench-image-"))
    ref = f"localhost/cgpu-bench:{uuid.uuid4().hex[:8]}"
    try:
        for folder in ("bin", "usr/bin", "tmp"):
            (root / "tree" / folder).mkdir(parents=True)
        shutil.copy(busybox, root / "tree/bin/busybox")
        for applet in ("sh", "sleep", "true"):
            (root / "tree/bin" / applet).symlink_to("busybox")
        (root / "tree/usr/bin/python3").write_text("#!/bin/sh\n" + python3)
        (root / "tree/usr/bin/python3").chmod(0o755)
        with tarfile.open(root / "image.tar", "w") as tar:
            tar.add(root / "tree", arcname=".")
        done = _podman("import", "--change", "ENV PATH=/usr/bin:/bin", str(root / "image.tar"), ref)
        if done.returncode != 0:
            raise Skip(f"podman cannot import an image: {done.stderr.strip()}")
        yield ref
    finally:
        _podman("rmi", "-f", ref)
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _cdi_device(edits: str) -> Iterator[str]:
    """A device of a unique kind in /etc/cdi (removed after)."""
    kind = f"cgpu-bench-{uuid.uuid4().hex[:8]}.example.com/gpu"
    path = Path("/etc/cdi") / f"{kind.split('/')[0]}.yaml"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'cdiVersion: "0.5.0"\nkind: {kind}\ndevices:\n  - name: dev0\n    containerEdits:\n{edits}')
    except OSError as exc:
        raise Skip(f"cannot write a CDI spec into /etc/cdi: {exc}") from None
    try:
        yield f"{kind}=dev0"
    finally:
        path.unlink(missing_ok=True)


# --- the cases ---------------------------------------------------------------------------------

Case = Callable[[ExitStack], tuple[list[str], dict[str, str]]]


def docker_silent(stack: ExitStack) -> tuple[list[str], dict[str, str]]:
    return ["image", "check", "docker-daemon:x:1", "--json", "--timeout", "0.5"], stack.enter_context(
        _docker_daemon("silent")
    )


def docker_trickle(stack: ExitStack) -> tuple[list[str], dict[str, str]]:
    return ["image", "check", "docker-daemon:x:1", "--json", "--timeout", "20"], stack.enter_context(
        _docker_daemon("slow")
    )


def podman_hung(stack: ExitStack) -> tuple[list[str], dict[str, str]]:
    return ["image", "check", "localhost/x:1", "--json", "--timeout", "1"], stack.enter_context(_hung_podman())


def gzip_bomb(stack: ExitStack) -> tuple[list[str], dict[str, str]]:
    return ["image", "check", f"oci-archive:{stack.enter_context(_gzip_bomb())}", "--json", "--timeout", "2"], {}


def verify_hung_hook(stack: ExitStack) -> tuple[list[str], dict[str, str]]:
    image = stack.enter_context(_busybox_image("exec sleep 600\n"))
    hook = "      hooks:\n        - {hookName: createContainer, path: /bin/sleep, args: [sleep, '120']}\n"
    device = stack.enter_context(_cdi_device(hook))
    return ["probe", "--backend", "cdi", "--json", "--verify", "--device", device, "--probe-image", image,
            "--timeout", "10"], {}  # fmt: skip


def verify_hung_probe(stack: ExitStack) -> tuple[list[str], dict[str, str]]:
    image = stack.enter_context(_busybox_image("exec sleep 600\n"))
    device = stack.enter_context(_cdi_device("      env: [CGPU_BENCH=1]\n"))
    return ["probe", "--backend", "cdi", "--json", "--verify", "--device", device, "--probe-image", image,
            "--timeout", "5"], {}  # fmt: skip


def verify_hung_engine(stack: ExitStack) -> tuple[list[str], dict[str, str]]:
    device = stack.enter_context(_cdi_device("      env: [CGPU_BENCH=1]\n"))
    env = {**stack.enter_context(_hung_podman()), "DOCKER_HOST": "unix:///nonexistent.sock"}
    return ["probe", "--backend", "cdi", "--json", "--verify", "--device", device, "--timeout", "2"], env


def build_hung(stack: ExitStack) -> tuple[list[str], dict[str, str]]:
    return ["krunkit", "build-image", "--timeout", "2"], stack.enter_context(_hung_build())


CASES: dict[str, tuple[str, Case]] = {
    "docker-silent": ("`image check docker-daemon:x:1`, a Docker export that never starts", docker_silent),
    "docker-trickle": ("`image check docker-daemon:x:1`, a Docker export that trickles for ever", docker_trickle),
    "podman-hung": ("`image check localhost/x:1`, a podman that never answers", podman_hung),
    "gzip-bomb": ("`image check oci-archive:...`, a layer of 16 GiB of zeros in 16 MB", gzip_bomb),
    "verify-hook": ("`probe --backend cdi --verify`, a createContainer hook that sleeps 120 s", verify_hung_hook),
    "verify-probe": ("`probe --backend cdi --verify`, a probe that never answers", verify_hung_probe),
    "verify-engine": ("`probe --backend cdi --verify`, a podman that never answers, no Docker", verify_hung_engine),
    "build-hung": ("`krunkit build-image`, a podman build that hangs", build_hung),
}


def _timeout_of(argv: list[str]) -> float:
    return float(argv[argv.index("--timeout") + 1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=sorted(CASES), action="append")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    print("| command, what hangs | --timeout | median s | longest s | longest past the timeout | left running |")
    print("| --- | --- | --- | --- | --- | --- |")
    failed = False
    cache = tempfile.mkdtemp(prefix="cgpu-bench-cache-")  # never the user's cache
    for name in args.only or CASES:
        what, case = CASES[name]
        with ExitStack() as stack:
            try:
                argv, env = case(stack)
            except Skip as exc:
                print(f"| {what} | | skipped: {exc} | | | |", flush=True)
                continue
            runs = [_run(argv, env, cache) for _ in range(args.runs)]
        limit = _timeout_of(argv)
        seconds = [s for s, _, _ in runs]
        past = max(seconds) - limit
        failed |= past > PROMISE_S or any(left for _, _, left in runs)
        left = "yes" if any(left for _, _, left in runs) else "no"
        print(
            f"| {what} | {limit:g} | {statistics.median(seconds):.2f} | {max(seconds):.2f} | {past:+.2f} | {left} |",
            flush=True,
        )
    shutil.rmtree(cache, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
