"""Real Debian node roots (scripts/node_roots.py built them with mmdebstrap), copied for one test and given what
the NVIDIA driver and nvidia-ctk would add; and the DaemonSet's view of such a node, laid out from its manifest.

A copy is made of hard links (`cp -al`: a 500 MB root in a tenth of a second), so a file of the copy is never
written in place: `place` removes the name first, and the cached root keeps its bytes. Paths inside a root are
resolved inside it (`var/run -> /run` is absolute there): nothing here writes through a link out of the root.
"""

from __future__ import annotations

import importlib.util
import json
import os
import posixpath
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

NVIDIA_HOST = REPO / "cdi-samples" / "hosts" / "nvidia-580"
NVIDIA_SPEC = REPO / "cdi-samples" / "nvidia-current" / "spec" / "nvidia.yaml"  # toolkit 1.20, cdiVersion 0.7.0
DAEMONSET = REPO / "deploy" / "kubernetes" / "daemonset.yaml"
# kubeadm writes the kubelet's runtime as a flag here (the endpoint Debian's containerd listens on)
KUBEADM_FLAGS = "/var/lib/kubelet/kubeadm-flags.env"
CONTAINERD_ENDPOINT = "unix:///var/run/containerd/containerd.sock"
WATCH_SECONDS = 120.0  # the first answer of a watch on a busy 2-core host (a quiet one: about 2 s)


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("node_roots", REPO / "scripts" / "node_roots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


node_roots = _script()


def built_root(suite: str) -> tuple[Path | None, str]:
    """The cached root of `suite`, or None and why it is not there."""
    cache = node_roots.default_cache()
    try:
        entry = json.loads((cache / node_roots.MANIFEST).read_text(encoding="utf-8")).get(suite)
    except (OSError, ValueError):
        return None, f"no node roots here: run `python3 scripts/node_roots.py` as root first ({cache})"
    if not entry or "path" not in entry:
        return None, f"no {suite} root: {(entry or {}).get('absent', 'not built')}"
    root = Path(entry["path"])
    if not (root / "var" / "lib" / "dpkg" / "status").is_file():
        return None, f"the {suite} root at {root} is gone (run scripts/node_roots.py again)"
    return root, ""


def inside(root: Path, path: str) -> Path:
    """`path` of the node resolved inside `root`, every link component included (absolute ones from the root)."""
    parts = [p for p in path.split("/") if p]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            resolved = resolved[:-1]
            continue
        here = root.joinpath(*resolved, part)
        if not here.is_symlink():
            resolved.append(part)
            continue
        hops += 1
        assert hops < 40, f"{path}: too many links under {root}"
        target = os.readlink(here)
        if target.startswith("/"):
            resolved = []
        parts = [p for p in target.split("/") if p] + parts
    return root.joinpath(*resolved)


def place(root: Path, path: str, content: bytes | str) -> Path:
    """Write a node file, never into a file the cached root shares (its name is removed first)."""
    target = inside(root, posixpath.dirname(path)) / posixpath.basename(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.exists():
        target.unlink()
    data = content.encode() if isinstance(content, str) else content
    target.write_bytes(data)
    return target


def copy_root(suite_root: Path, into: Path) -> Path:
    subprocess.run(["cp", "-al", str(suite_root), str(into)], check=True, timeout=300)
    return into


def add_nvidia(root: Path, *, spec_dir: str) -> None:
    """What the driver (version file, device nodes as files, libraries) and nvidia-ctk (a spec) add."""
    for dirpath, _, names in os.walk(NVIDIA_HOST):
        for name in names:
            rel = os.path.relpath(os.path.join(dirpath, name), NVIDIA_HOST)
            place(root, "/" + rel, Path(dirpath, name).read_bytes())
    place(root, f"{spec_dir}/nvidia.yaml", NVIDIA_SPEC.read_text())


def nvidia_node(tmp_path: Path, *, suite: str = "trixie", spec_dir: str = "/etc/cdi") -> Path:
    """A copy of the suite's root (hard links) with what NVIDIA's driver and nvidia-ctk add; skips with the
    reason where this machine cannot have one."""
    if os.geteuid() != 0:
        pytest.skip("the node roots are root's (mmdebstrap's root mode)")
    built, why = built_root(suite)
    if built is None:
        pytest.skip(why)
    node = copy_root(built, tmp_path / "node")
    add_nvidia(node, spec_dir=spec_dir)
    return node


def kubelet_runs(root: Path, endpoint: str) -> None:
    place(root, KUBEADM_FLAGS, f'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint={endpoint}"\n')


def containerd_dump(root: Path) -> dict[str, Any]:
    """The root's own containerd's reading of its configuration (`containerd config dump`, in a chroot): the CRI
    plugin's `enable_cdi` and `cdi_spec_dirs`, under whichever name the dumped config version gives the plugin;
    None for both where the dump has no such setting (containerd 1.6, whose CRI plugin injects no CDI device)."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's tomllib reads the dump")
    done = subprocess.run(
        ["chroot", str(root), "/usr/bin/containerd", "config", "dump"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    plugins = tomllib.loads(done.stdout).get("plugins", {})
    # version 1: `cri`; version 2: `io.containerd.grpc.v1.cri`; version 3 (containerd 2.x): the CRI runtime plugin
    for name in ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri", "cri"):
        table = plugins.get(name)
        if table is not None and "enable_cdi" in table:
            return {"enable_cdi": table["enable_cdi"], "cdi_spec_dirs": table.get("cdi_spec_dirs")}
    return {"enable_cdi": None, "cdi_spec_dirs": None}  # containerd 1.6: no CDI in its CRI plugin


def _daemonset() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    return next(d for d in docs if d.get("kind") == "DaemonSet")


def pod_view(node: Path, pod: Path) -> Path:
    """The DaemonSet container's filesystem over `node`, laid out from the manifest's mounts: the host's `/` at
    /host; under it, a hostPath mount of the node's same path is the node's dir as it is, and an emptyDir is an
    empty dir hiding what the node has there, the deeper hostPath mounts placed back into it. `node` (a copy
    made for this test) becomes the pod's /host. Returns the pod's dir."""
    spec = _daemonset()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = sorted(spec["containers"][0]["volumeMounts"], key=lambda m: m["mountPath"].count("/"))
    top = next(m for m in mounts if m["mountPath"] == "/host")
    assert volumes[top["name"]]["hostPath"]["path"] == "/"
    pod.mkdir()
    host = pod / "host"
    node.rename(host)
    hidden: dict[str, Path] = {}  # a node path an emptyDir covers -> where the node's own dir was put aside
    for number, mount in enumerate(mounts):
        where = mount["mountPath"]
        if not where.startswith("/host/"):
            continue
        path = where.removeprefix("/host")
        volume = volumes[mount["name"]]
        target = host / path.lstrip("/")
        if "emptyDir" in volume:
            if target.exists():
                hidden[path] = pod / f"hidden-{number}"
                target.rename(hidden[path])
            target.mkdir()
            continue
        source = volume["hostPath"]["path"]
        assert source == path, f"{where}: the tests lay out hostPath mounts of the node's same path only"
        covering = [h for h in hidden if path.startswith(h + "/")]
        if covering:
            shutil.copytree(hidden[covering[-1]] / path.removeprefix(covering[-1] + "/"), target, symlinks=True)
    return pod


def daemonset_args(pod: Path) -> tuple[list[str], dict[str, str]]:
    """The manifest's `cgpu` arguments and environment, its paths moved into the pod's dir."""
    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    rewrite = {
        "/host": str(pod / "host"),
        "/etc/kubernetes/node-feature-discovery/features.d": str(pod / "features.d"),
        "/run/cgpu": str(pod / "run"),
    }
    args = []
    for arg in container["args"]:
        for old, new in rewrite.items():
            arg = arg.replace(f"={old}", f"={new}")
        args.append(arg)
    env = {**os.environ}
    for item in container.get("env", []):
        value = item["value"]
        for old, new in rewrite.items():
            value = new + value.removeprefix(old) if value.startswith(old + "/") or value == old else value
        env[item["name"]] = value
    features = pod / "features.d"
    if not features.exists():  # as the init container makes them: cgpu's hidden dir, and the link nfd reads
        (features / ".cgpu").mkdir(parents=True)
        (features / "cgpu").symlink_to(".cgpu/cgpu")
    (pod / "run").mkdir(exist_ok=True)
    return args, env


def daemonset_watch(pod: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """Run the DaemonSet's own `cgpu watch` over the pod's view until its first answer: the report and the
    labels nfd-worker would publish."""
    from tests.fleet.test_nfd import read_features_dir

    args, env = daemonset_args(pod)
    answer, features = pod / "run" / "answer.json", pod / "features.d"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu", *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + WATCH_SECONDS
        while not (answer.exists() and (features / "cgpu").exists()):  # through the link
            assert proc.poll() is None, proc.communicate(timeout=10)[1]
            assert time.monotonic() < deadline, "no first answer"
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    return json.loads(answer.read_text()), read_features_dir(features)


def daemonset_probe(pod: Path) -> dict[str, Any]:
    """`cgpu probe --json` with the DaemonSet's root and environment (what a person runs in the pod)."""
    args, env = daemonset_args(pod)
    root = next(a for a in args if a.startswith("--root="))
    done = subprocess.run(
        [sys.executable, "-m", "cgpu", "probe", root, "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=WATCH_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
