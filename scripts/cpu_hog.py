"""Keep this machine N times oversubscribed for a bounded time: N busy processes per CPU, each
ending by itself at the time limit or as soon as this script is gone (so none outlives it, even
one killed with SIGKILL). With a command after `--`, the hog runs while the command does, and the
command's exit status is the script's.

    uv run python scripts/cpu_hog.py --times 4 --seconds 900 -- uv run pytest -m "not podman" -q
    uv run python scripts/cpu_hog.py --times 4 --seconds 60        # just the hog, for 60 s

`--times 4` on a 2-core machine is a load of 8 from the hog alone (what docs/hardening.md's
"Deadlines" table calls loaded). Linux and macOS; on Windows it runs too (spawned processes)."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time


def _spin(until: float, parent: int) -> None:
    """Busy until `until` (monotonic), or until the process that started the hog is gone."""
    while time.monotonic() < until:
        for _ in range(200_000):  # about 5-10 ms of work between looks at the clock and the parent
            pass
        if os.getppid() != parent:
            return


def start(times: float, seconds: float) -> list[multiprocessing.Process]:
    """Start round(times x CPUs) busy processes that end by themselves after `seconds`."""
    count = max(1, round(times * (os.cpu_count() or 1)))
    until = time.monotonic() + seconds
    hogs = [multiprocessing.Process(target=_spin, args=(until, os.getpid()), daemon=True) for _ in range(count)]
    for hog in hogs:
        hog.start()
    return hogs


def stop(hogs: list[multiprocessing.Process]) -> None:
    for hog in hogs:
        if hog.is_alive():
            hog.terminate()
    for hog in hogs:
        hog.join(5)
        if hog.is_alive():
            hog.kill()
            hog.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--times", type=float, default=4, help="busy processes per CPU (default: 4)")
    parser.add_argument("--seconds", type=float, default=600, help="the hog's time limit (default: 600)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND to run under the hog")
    args = parser.parse_args(argv)
    if args.times <= 0 or args.seconds <= 0:
        parser.error("--times and --seconds must be positive")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    hogs = start(args.times, args.seconds)
    print(
        f"cpu_hog: {len(hogs)} busy processes on {os.cpu_count()} CPUs for at most {args.seconds:g} s",
        file=sys.stderr,
        flush=True,
    )
    try:
        if command:
            return subprocess.call(command)
        for hog in hogs:
            hog.join()
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        stop(hogs)


if __name__ == "__main__":
    raise SystemExit(main())
