#!/usr/bin/env python3
"""Bring real Docker Engines and containerd from newer Debian suites into a scratch dir, never installed.

    python3 scripts/real_engines.py [--scratch DIR] [--suite trixie] [--suite sid] [--deadline SECONDS]

For each suite: a private apt configuration (its own sources.list naming the Debian archive this system's own
apt sources name, its own lists, cache and an empty preferences dir; the system's dpkg status is read, never
written), `apt-get -c CONF update`, `apt-get -c CONF download docker.io docker-cli containerd`, each .deb unpacked
with `dpkg-deb -x` into SCRATCH/SUITE/root and its control data kept (what a node's dpkg status holds). The
binaries are then run once (`--version`): a suite whose binaries do not run here is recorded as absent, with the
reason. Debian's static busybox (the test images) and the CRI's api.proto (golang-k8s-cri-api-dev) come from the
first suite that has them.

The result is SCRATCH/engines.json, which the tests under tests/engines/ read. A second run reuses what the
first unpacked (no network); a suite that failed is tried again. Stdlib only: it runs before any virtualenv.
Exit status 0 when at least one suite is usable, 1 otherwise; either way engines.json says what happened.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SUITES = ("trixie", "sid")
ENGINE_PACKAGES = ("docker.io", "docker-cli", "containerd")
EXTRA_PACKAGES = {"busybox-static": "busybox", "golang-k8s-cri-api-dev": "cri_proto"}
CRI_PROTO = "usr/share/gocode/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto"
BUSYBOX = ("usr/bin/busybox", "bin/busybox")  # merged /usr from trixie on
BINARIES = {
    "containerd": "usr/bin/containerd",
    "containerd-shim-runc-v2": "usr/bin/containerd-shim-runc-v2",
    "ctr": "usr/bin/ctr",
    "dockerd": "usr/sbin/dockerd",
    "docker": "usr/bin/docker",
}
# The control fields a node's dpkg status holds for a package (and that cgpu may read).
CONTROL_FIELDS = ("Package", "Version", "Architecture", "Built-Using", "Static-Built-Using")
DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MANIFEST = "engines.json"


def default_scratch() -> Path:
    """Where the engines are kept unless --scratch or CGPU_REAL_ENGINES says otherwise."""
    env = os.environ.get("CGPU_REAL_ENGINES")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "cgpu-real-engines"


class SetupError(Exception):
    """One step failed; the message says which and why."""


def _run(argv: list[str], *, timeout: float, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=max(timeout, 1.0), stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise SetupError(f"{' '.join(argv[:4])}: no answer within {timeout:.0f} s") from None
    except OSError as exc:
        raise SetupError(f"{argv[0]}: {exc.strerror}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SetupError(f"{' '.join(argv[:4])}: exit {done.returncode}: {' / '.join(tail)}")
    return done.stdout


# --- the system's own Debian archive ------------------------------------------------------------------------


def _codename() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return ""
    found = re.search(r"^VERSION_CODENAME=\"?([a-z]+)", text, re.MULTILINE)
    return found.group(1) if found else ""


def _source_entries(etc: Path) -> list[dict[str, Any]]:
    """Every `deb` entry of the system's apt sources: {uris, suites, components, signed_by}."""
    entries: list[dict[str, Any]] = []
    files = [etc / "sources.list"]
    parts = etc / "sources.list.d"
    if parts.is_dir():
        files += sorted(p for p in parts.iterdir() if p.suffix in (".list", ".sources"))
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                key = ""
                for line in stanza.splitlines():
                    if line.startswith("#") or not line.strip():
                        continue
                    if line[0] in " \t" and key:
                        fields[key] += " " + line.strip()
                        continue
                    key, _, value = line.partition(":")
                    key = key.strip().lower()
                    fields[key] = value.strip()
                if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
                    continue
                entries.append(
                    {
                        "uris": fields.get("uris", "").split(),
                        "suites": fields.get("suites", "").split(),
                        "components": fields.get("components", "").split(),
                        "signed_by": fields.get("signed-by", ""),
                    }
                )
        else:
            for line in text.splitlines():
                line = line.split("#", 1)[0].strip()
                found = re.match(r"deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s*(.*)", line)
                if not found:
                    continue
                options = dict(o.split("=", 1) for o in (found.group(1) or "").split() if "=" in o)
                entries.append(
                    {
                        "uris": [found.group(2)],
                        "suites": [found.group(3)],
                        "components": found.group(4).split(),
                        "signed_by": options.get("signed-by", ""),
                    }
                )
    return entries


def system_archive(etc: Path = Path("/etc/apt")) -> tuple[str, str]:
    """(URI, keyring) of the Debian archive the system's own apt sources name for its release's main suite."""
    codename = _codename()
    for entry in _source_entries(etc):
        if codename and codename not in entry["suites"]:
            continue
        if "main" not in entry["components"] or not entry["uris"]:
            continue
        keyring = entry["signed_by"]
        if not keyring or not keyring.startswith("/"):
            keyring = DEFAULT_KEYRING
        return entry["uris"][0], keyring
    raise SetupError(f"no 'deb' source for {codename or 'this release'} main in {etc}")


# --- one suite -----------------------------------------------------------------------------------------------


def _apt_conf(base: Path, uri: str, keyring: str, suite: str) -> Path:
    apt = base / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "preferences.d", "sources.list.d", "conf.d"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb [signed-by={keyring}] {uri} {suite} main\n")
    conf = apt / "apt.conf"
    conf.write_text(
        "\n".join(
            [
                f'Dir::Etc::SourceList "{apt / "sources.list"}";',
                f'Dir::Etc::SourceParts "{apt / "sources.list.d"}";',
                f'Dir::Etc::Preferences "{apt / "preferences"}";',
                f'Dir::Etc::PreferencesParts "{apt / "preferences.d"}";',
                f'Dir::Etc::Parts "{apt / "conf.d"}";',
                f'Dir::State::Lists "{apt / "lists"}";',
                f'Dir::Cache "{apt / "cache"}";',
                # The system's dpkg status is read (apt needs one), never written: nothing here installs.
                'Dir::State::status "/var/lib/dpkg/status";',
                'Acquire::Languages "none";',
                'APT::Sandbox::User "root";',
                "",
            ]
        )
    )
    return conf


def _available(conf: Path, package: str, timeout: float) -> bool:
    try:
        out = _run(["apt-cache", "-c", str(conf), "show", "--no-all-versions", package], timeout=timeout)
    except SetupError:
        return False
    return f"Package: {package}" in out


def _control(deb: Path, timeout: float) -> dict[str, str]:
    out = _run(["dpkg-deb", "-f", str(deb), *CONTROL_FIELDS], timeout=timeout)
    fields: dict[str, str] = {}
    key = ""
    for line in out.splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += " " + line.strip()
            continue
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def _version_line(binary: Path, timeout: float) -> str:
    out = _run([str(binary), "--version"], timeout=timeout)
    return out.strip().splitlines()[0] if out.strip() else ""


def fetch_suite(scratch: Path, suite: str, uri: str, keyring: str, deadline: float) -> dict[str, Any]:
    """Bring one suite's engines into SCRATCH/SUITE/root; the suite's record for engines.json."""
    base = scratch / suite
    record_path = base / "suite.json"
    with contextlib.suppress(OSError, ValueError):
        cached = json.loads(record_path.read_text())
        if cached.get("ok") and all((base / "root" / rel).is_file() for rel in BINARIES.values()):
            cached["cached"] = True
            return dict(cached)

    started = time.monotonic()

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 1:
            raise SetupError("out of time")
        return remaining

    record: dict[str, Any] = {"suite": suite, "ok": False, "cached": False, "root": str(base / "root")}
    try:
        # A run stopped half-way must not leave a record that vouches for a half-unpacked tree.
        record_path.unlink(missing_ok=True)
        shutil.rmtree(base / "root", ignore_errors=True)
        shutil.rmtree(base / "debs", ignore_errors=True)
        (base / "debs").mkdir(parents=True)
        conf = _apt_conf(base, uri, keyring, suite)
        _run(["apt-get", "-c", str(conf), "-q", "update"], timeout=min(left(), 90))
        extras = [p for p in EXTRA_PACKAGES if _available(conf, p, min(left(), 30))]
        wanted = [*ENGINE_PACKAGES, *extras]
        _run(["apt-get", "-c", str(conf), "-q", "download", *wanted], timeout=min(left(), 120), cwd=base / "debs")
        packages: dict[str, dict[str, str]] = {}
        for deb in sorted((base / "debs").glob("*.deb")):
            control = _control(deb, min(left(), 30))
            name = control.get("Package", deb.name)
            target = base / "extra" / name if name in EXTRA_PACKAGES else base / "root"
            target.mkdir(parents=True, exist_ok=True)
            _run(["dpkg-deb", "-x", str(deb), str(target)], timeout=min(left(), 120))
            packages[name] = control
        missing = [p for p in ENGINE_PACKAGES if p not in packages]
        if missing:
            raise SetupError(f"not downloaded: {', '.join(missing)}")
        record["packages"] = {p: packages[p] for p in ENGINE_PACKAGES}
        record["extras"] = {}
        for package, rels in (("busybox-static", BUSYBOX), ("golang-k8s-cri-api-dev", (CRI_PROTO,))):
            found = [base / "extra" / package / rel for rel in rels if (base / "extra" / package / rel).is_file()]
            if package in packages and found:
                record["extras"][EXTRA_PACKAGES[package]] = {"path": str(found[0]), "package": packages[package]}
        record["binaries"] = {name: str(base / "root" / rel) for name, rel in BINARIES.items()}
        # Do the binaries run here (glibc, libraries)? Their own answer is the version they report.
        record["version_output"] = {
            name: _version_line(base / "root" / BINARIES[name], min(left(), 20)) for name in ("containerd", "dockerd")
        }
        record["ok"] = True
        record["reason"] = ""
    except (SetupError, OSError) as exc:
        record["reason"] = str(exc)
    finally:
        shutil.rmtree(base / "debs", ignore_errors=True)  # the unpacked tree is what is kept
    record["seconds"] = round(time.monotonic() - started, 1)
    if base.is_dir():
        tmp = record_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, record_path)
    return record


def _du(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def ensure(scratch: Path, suites: tuple[str, ...] = SUITES, *, seconds: float = 110.0) -> dict[str, Any]:
    """Bring every suite that can be had; write and return SCRATCH/engines.json."""
    started = time.monotonic()
    deadline = started + seconds
    scratch.mkdir(parents=True, exist_ok=True)
    with open(scratch / ".lock", "w") as lock:
        # Two runs at once: the second waits for the first and then reuses what it unpacked.
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SetupError(f"{scratch}: another setup holds the lock") from None
                time.sleep(0.5)
        manifest: dict[str, Any] = {"scratch": str(scratch), "suites": {}}
        try:
            uri, keyring = system_archive()
        except SetupError as exc:
            uri, keyring = "", ""
            manifest["archive_problem"] = str(exc)
        manifest["archive"] = uri
        if uri:
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(suites)) as pool:
                futures = {s: pool.submit(fetch_suite, scratch, s, uri, keyring, deadline) for s in suites}
                for suite, future in futures.items():
                    manifest["suites"][suite] = future.result()
        else:
            for suite in suites:
                manifest["suites"][suite] = {"suite": suite, "ok": False, "reason": manifest["archive_problem"]}
        for record in manifest["suites"].values():
            for key, extra in record.get("extras", {}).items():
                manifest.setdefault(key, extra["path"])
        manifest["seconds"] = round(time.monotonic() - started, 1)
        manifest["disk_bytes"] = _du(scratch)
        tmp = scratch / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
        os.replace(tmp, scratch / MANIFEST)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scratch", type=Path, default=None, help="default: $CGPU_REAL_ENGINES or ~/.cache/...")
    parser.add_argument("--suite", action="append", choices=SUITES, help="repeatable; default: all")
    parser.add_argument("--deadline", type=float, default=110.0, help="seconds for the whole setup (default 110)")
    args = parser.parse_args(argv)
    scratch = (args.scratch or default_scratch()).absolute()
    try:
        manifest = ensure(scratch, tuple(args.suite or SUITES), seconds=args.deadline)
    except (SetupError, OSError) as exc:
        print(f"real engines: {exc}", file=sys.stderr)
        return 1
    for suite, record in manifest["suites"].items():
        if record.get("ok"):
            versions = ", ".join(record["version_output"].values())
            how = "cached" if record.get("cached") else f"{record.get('seconds')} s"
            print(f"real engines: {suite}: {versions} ({how})")
        else:
            print(f"real engines: {suite}: absent: {record.get('reason')}")
    print(f"real engines: {manifest['seconds']} s, {manifest['disk_bytes'] / 1e6:.0f} MB in {scratch}")
    return 0 if any(r.get("ok") for r in manifest["suites"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
