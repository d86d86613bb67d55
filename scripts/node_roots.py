#!/usr/bin/env python3
"""Build real node roots from Debian's archive, the engines installed by dpkg, for tests/nodes/.

    python3 scripts/node_roots.py [--cache DIR] [--suite bookworm] [--suite trixie] [--suite sid] [--deadline SECONDS]

Each suite's root is made by `mmdebstrap --variant=essential --include=containerd,podman,docker.io --mode=root`,
so its binaries, `var/lib/dpkg/status`, default configuration and links are those of a real node: `var/run -> /run`
(an absolute link, as on every Debian and Ubuntu system) and merged `/usr`. A root is built into SUITE.partial and
renamed to SUITE once mmdebstrap succeeded, so a root in the cache is whole. A second run reuses what the first
built (no network); a suite that failed is tried again. The suites are built at the same time, each bounded by
what is left of the deadline.

The result is CACHE/roots.json, which the tests read: per suite its path, the engines' package versions (from the
root's own dpkg status), the seconds the build took and its size, or why it is absent. Stdlib only: it runs before
any virtualenv. Exit status 0 when at least one root is usable, 1 otherwise; either way roots.json says what
happened. It needs root (mmdebstrap's root mode) and mmdebstrap itself (`apt-get install mmdebstrap`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SUITES = ("bookworm", "trixie", "sid")
ENGINE_PACKAGES = ("containerd", "podman", "docker.io")
MANIFEST = "roots.json"
# unstable's Release file can be past its Valid-Until on a mirror that lags; the keyring still checks it.
SUITE_OPTIONS = {"sid": ['--aptopt=Acquire::Check-Valid-Until "false"']}


def default_cache() -> Path:
    """Where the roots are kept unless --cache or CGPU_NODE_ROOTS says otherwise."""
    env = os.environ.get("CGPU_NODE_ROOTS")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "cgpu-node-roots"


def dpkg_versions(root: Path, packages: tuple[str, ...] = ENGINE_PACKAGES) -> dict[str, str]:
    """The installed version of each of `packages` in the root's own dpkg status."""
    status = root / "var" / "lib" / "dpkg" / "status"
    found: dict[str, str] = {}
    for stanza in status.read_text(encoding="utf-8", errors="replace").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " ")
        if fields.get("Package") in packages and fields.get("Status", "").endswith(" installed"):
            found[fields["Package"]] = fields.get("Version", "")
    return found


def _size_mb(root: Path) -> int:
    total = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total // (1 << 20)


def build(cache: Path, suite: str, deadline: float) -> dict[str, Any]:
    """One suite's root, built or found; the manifest entry for it."""
    root = cache / suite
    if (root / "var" / "lib" / "dpkg" / "status").is_file():
        return {"path": str(root), "versions": dpkg_versions(root), "built": "cached"}
    partial = cache / f"{suite}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    left = deadline - time.monotonic()
    if left < 30:
        return {"absent": "no time left before the deadline"}
    argv = [
        "mmdebstrap",
        "--variant=essential",
        f"--include={','.join(ENGINE_PACKAGES)}",
        "--mode=root",
        *SUITE_OPTIONS.get(suite, []),
        suite,
        str(partial),
    ]
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=left, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        shutil.rmtree(partial, ignore_errors=True)
        return {"absent": f"mmdebstrap {suite}: not done within {left:.0f} s"}
    except OSError as exc:
        return {"absent": f"mmdebstrap: {exc.strerror}"}
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        tail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        return {"absent": f"mmdebstrap {suite}: exit {done.returncode}: {tail}"}
    os.replace(partial, root)
    return {
        "path": str(root),
        "versions": dpkg_versions(root),
        "built": f"{time.monotonic() - started:.0f} s",
        "size_mb": _size_mb(root),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=None, help="where roots are kept (default: %(default)s)")
    parser.add_argument("--suite", action="append", choices=SUITES, help="a Debian suite (default: all)")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds for the whole run")
    args = parser.parse_args(argv)
    cache: Path = args.cache or default_cache()
    suites = tuple(args.suite or SUITES)
    deadline = time.monotonic() + args.deadline
    cache.mkdir(parents=True, exist_ok=True)
    entries: dict[str, Any] = {}
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once build each root once
        if os.geteuid() != 0:
            entries = {suite: {"absent": "mmdebstrap's root mode needs root"} for suite in suites}
        elif shutil.which("mmdebstrap") is None:
            entries = {
                suite: {"absent": "mmdebstrap is not installed (apt-get install mmdebstrap)"} for suite in suites
            }
        else:
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(suites)) as pool:
                futures = {suite: pool.submit(build, cache, suite, deadline) for suite in suites}
                entries = {suite: future.result() for suite, future in futures.items()}
        manifest = cache / MANIFEST
        previous: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            previous = json.loads(manifest.read_text(encoding="utf-8"))
        previous.update(entries)
        manifest.write_text(json.dumps(previous, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for suite, entry in entries.items():
        print(f"{suite}: {entry.get('absent') or entry['versions']} ({entry.get('built', '')})", file=sys.stderr)
    return 0 if any("path" in entry for entry in entries.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
