"""Real containerd and Docker Engine daemons for the tests, from the suites scripts/real_engines.py unpacked.

Each daemon gets its own dirs, sockets and runc state root under one scratch dir of this test session, runs on
the host's runc with no networking, and is stopped by its PID at the end; the shims it started are found by the
address they were given and stopped too. Outside that dir the daemons touch only /run/containerd/s,
/run/containerd/fifo and /run/docker/plugins: removed at the end where this session made them and they are empty
(another session's daemons may be using them).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import importlib.util
import io
import json
import os
import re
import signal
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cgpu.run import Completed, Helper, run

REPO = Path(__file__).resolve().parents[2]
HOST_RUNC = "/usr/sbin/runc"
# Children before their parents: removed in this order, each only where this session made it and it is empty.
SHARED_DIRS = ("/run/containerd/s", "/run/containerd/fifo", "/run/containerd", "/run/docker/plugins", "/run/docker")
IMAGE = "docker.io/cgpu-real/busybox:1"  # the one image: the CRI's sandbox (pause) and the test containers
APPLETS = ("sh", "cat", "env", "sleep", "echo", "true", "ls", "id")
START_SECONDS = 60.0  # a daemon's start on a busy 2-core host (a quiet one: 1-2 s)
CALL_SECONDS = 60.0  # one CLI call to a daemon


def _setup_module() -> Any:
    spec = importlib.util.spec_from_file_location("real_engines", REPO / "scripts" / "real_engines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


setup = _setup_module()


@dataclass
class Suite:
    """One Debian suite's engines as scripts/real_engines.py unpacked them."""

    name: str
    root: Path
    binaries: dict[str, str]
    packages: dict[str, dict[str, str]]  # package -> its control data (Package, Version, Built-Using, ...)

    def binary(self, name: str) -> str:
        return self.binaries[name]

    @property
    def path_env(self) -> str:
        """PATH with the suite's binaries first (containerd finds its shim there, dockerd its containerd
        tools), then the host's (runc)."""
        return f"{self.root}/usr/bin:{self.root}/usr/sbin:/usr/sbin:/usr/bin:/sbin:/bin"


def manifest() -> tuple[dict[str, Any] | None, str]:
    """The setup's engines.json, or None and why there is none."""
    where = setup.default_scratch() / setup.MANIFEST
    try:
        return json.loads(where.read_text()), ""
    except FileNotFoundError:
        return None, f"no real engines here: run `python3 scripts/real_engines.py` first ({where} is missing)"
    except (OSError, ValueError) as exc:
        return None, f"no real engines here: {where} cannot be read ({exc})"


def suite(name: str) -> tuple[Suite | None, str]:
    """The suite's engines, or None and why they cannot be used (the reason a test skips with)."""
    if os.geteuid() != 0:
        return None, "the real engines need root (their own containerd and dockerd)"
    if not os.access(HOST_RUNC, os.X_OK):
        return None, f"the real engines run containers with the host's {HOST_RUNC}: not installed (apt install runc)"
    found, reason = manifest()
    if found is None:
        return None, reason
    record = found.get("suites", {}).get(name)
    if record is None:
        return None, f"suite {name} was not set up"
    if not record.get("ok"):
        return None, f"suite {name} could not be had: {record.get('reason') or 'no reason recorded'}"
    binaries = record["binaries"]
    missing = [b for b in binaries.values() if not os.access(b, os.X_OK)]
    if missing:
        return None, f"suite {name}: {missing[0]} is gone (run scripts/real_engines.py again)"
    return Suite(name, Path(record["root"]), binaries, record["packages"]), ""


def busybox() -> tuple[Path | None, str]:
    found, reason = manifest()
    if found is None:
        return None, reason
    path = found.get("busybox")
    if not path or not os.path.isfile(path):
        return None, "Debian's busybox-static was not fetched by scripts/real_engines.py"
    return Path(path), ""


def cri_proto() -> tuple[Path | None, str]:
    found, reason = manifest()
    if found is None:
        return None, reason
    path = found.get("cri_proto")
    if not path or not os.path.isfile(path):
        return None, "the CRI's api.proto (golang-k8s-cri-api-dev) was not fetched by scripts/real_engines.py"
    return Path(path), ""


def call(argv: list[str], *, timeout: float = CALL_SECONDS, env: dict[str, str] | None = None) -> Completed:
    """One command, with a timeout (cgpu's own runner: the whole group is killed at the limit)."""
    return run(argv, timeout=timeout, env=env)


def text(done: Completed) -> str:
    return (done.stdout + done.stderr).decode("utf-8", "backslashreplace").strip()


# --- images --------------------------------------------------------------------------------------------------


def rootfs_tar(busybox_path: Path, dest: Path) -> Path:
    """A tar of a tiny root: Debian's static busybox and a few applet links."""
    with tarfile.open(dest, "w") as tar:
        for folder in ("bin", "tmp", "etc", "proc", "sys", "dev"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        tar.add(busybox_path, arcname="bin/busybox")
        for applet in APPLETS:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
    return dest


def oci_archive(rootfs: Path, dest: Path, ref: str = IMAGE) -> Path:
    """An OCI image archive of the root (one layer), named `ref` for `ctr images import`: no registry."""
    layer = gzip.compress(rootfs.read_bytes(), mtime=0)
    diff_id = "sha256:" + hashlib.sha256(rootfs.read_bytes()).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sleep", "2147483647"]},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        }
    ).encode()
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    manifest_doc = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": blob(config),
                "size": len(config),
            },
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": blob(layer), "size": len(layer)}
            ],
        }
    ).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": blob(manifest_doc),
                "size": len(manifest_doc),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": "1"},
            }
        ],
    }
    with tarfile.open(dest, "w") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", json.dumps(index).encode())
        for digest, data in blobs.items():
            add(f"blobs/sha256/{digest.split(':', 1)[1]}", data)
    return dest


# --- daemons -------------------------------------------------------------------------------------------------


def _dirs_before() -> dict[str, bool]:
    return {d: os.path.lexists(d) for d in SHARED_DIRS}


def _remove_ours(before: dict[str, bool]) -> None:
    """Remove the shared dirs this session made, where they are empty now (rmdir: never another run's files)."""
    for folder, existed in before.items():
        if not existed:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def pids_mentioning(marker: str) -> list[int]:
    """Processes whose command line names `marker` (this session's dir): what a teardown must leave none of."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


def _stop_pids(pids: list[int], *, grace: float = 10.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@dataclass
class Containerd:
    """A containerd of one suite with the CRI plugin; `cdi`: True/False written in its config, None left default."""

    suite: Suite
    home: Path
    cdi: bool | None
    spec_dir: Path
    helper: Helper | None = None
    version: str = ""
    config_text: str = ""

    @property
    def socket(self) -> Path:
        return self.home / "c.sock"

    @property
    def major(self) -> int:
        found = re.search(r"\s(\d+)\.\d+\.\d+", self.suite_version_line())
        return int(found.group(1)) if found else 0

    def suite_version_line(self) -> str:
        return text(call([self.suite.binary("containerd"), "--version"], timeout=20))

    def config(self) -> str:
        h = self.home
        common = [
            f'root = "{h}/root"',
            f'state = "{h}/state"',
            'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",'
            ' "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]',
            "[grpc]",
            f'  address = "{self.socket}"',
            "[ttrpc]",
            f'  address = "{self.socket}.ttrpc"',
            "[debug]",
            '  address = ""',
            "[metrics]",
            '  address = ""',
        ]
        cdi = [] if self.cdi is None else [f"  enable_cdi = {'true' if self.cdi else 'false'}"]
        cdi += [f'  cdi_spec_dirs = ["{self.spec_dir}"]', "  restrict_oom_score_adj = true"]
        runc_options = [f'  BinaryName = "{HOST_RUNC}"', f'  Root = "{h}/runc"']
        if self.major >= 2:
            cri = "plugins.'io.containerd.cri.v1.runtime'"
            lines = [
                "version = 3",
                *common,
                f"[{cri}]",
                *cdi,
                f"[{cri}.containerd]",
                '  default_runtime_name = "runc"',
                f"[{cri}.containerd.runtimes.runc]",
                '  runtime_type = "io.containerd.runc.v2"',
                f"[{cri}.containerd.runtimes.runc.options]",
                *runc_options,
                f"[{cri}.cni]",
                f'  bin_dir = "{h}/cni/bin"',
                f'  conf_dir = "{h}/cni/conf"',
                "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
                f'  sandbox = "{IMAGE}"',
                "[plugins.'io.containerd.nri.v1.nri']",
                "  disable = true",
                "[plugins.'io.containerd.internal.v1.opt']",
                f'  path = "{h}/opt"',
            ]
        else:
            cri = 'plugins."io.containerd.grpc.v1.cri"'
            lines = [
                "version = 2",
                *common,
                f"[{cri}]",
                *cdi,
                f'  sandbox_image = "{IMAGE}"',
                f"[{cri}.containerd]",
                '  default_runtime_name = "runc"',
                f"[{cri}.containerd.runtimes.runc]",
                '  runtime_type = "io.containerd.runc.v2"',
                f"[{cri}.containerd.runtimes.runc.options]",
                *runc_options,
                f"[{cri}.cni]",
                f'  bin_dir = "{h}/cni/bin"',
                f'  conf_dir = "{h}/cni/conf"',
                '[plugins."io.containerd.nri.v1.nri"]',
                "  disable = true",
                '[plugins."io.containerd.internal.v1.opt"]',
                f'  path = "{h}/opt"',
            ]
        return "\n".join(lines) + "\n"

    def start(self, oci_image: Path) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.config_text = self.config()
        (self.home / "config.toml").write_text(self.config_text)
        env = f"PATH={self.suite.path_env}"
        self.helper = Helper(
            ["env", "-i", env, self.suite.binary("containerd"), "--config", str(self.home / "config.toml")],
            stop_grace=10,
        )
        self.helper.start()
        self.helper.wait_for(self._answers, timeout=START_SECONDS, interval=0.1)
        self.version = self._answers() or ""
        done = self.ctr("-n", "k8s.io", "images", "import", str(oci_image))
        if done.returncode != 0:
            raise RuntimeError(f"ctr images import: {text(done)}")

    def _answers(self) -> str | None:
        if not self.socket.exists():
            return None
        done = self.ctr("version", timeout=10)
        found = re.search(r"Server:\s*\n\s*Version:\s*(\S+)", text(done))
        return found.group(1) if done.returncode == 0 and found else None

    def ctr(self, *args: str, timeout: float = CALL_SECONDS) -> Completed:
        return call([self.suite.binary("ctr"), "--address", str(self.socket), *args], timeout=timeout)

    def log(self) -> str:
        return self.helper.output().decode("utf-8", "backslashreplace")[-4000:] if self.helper else ""

    def kill_tasks(self) -> None:
        """SIGKILL every task still running here (a container outlives its shim otherwise)."""
        done = self.ctr("namespaces", "ls", "-q", timeout=20)
        for namespace in done.stdout.decode().split():
            tasks = self.ctr("-n", namespace, "tasks", "ls", "-q", timeout=20).stdout.decode().split()
            for task in tasks:
                self.ctr("-n", namespace, "tasks", "kill", "-s", "SIGKILL", task, timeout=20)

    def stop(self) -> None:
        if self.helper is not None and self.helper.returncode is None:
            with contextlib.suppress(Exception):
                self.kill_tasks()
        if self.helper is not None:
            self.helper.stop()
        # The shims outlive containerd (they are their own process groups): found by the address they were given.
        _stop_pids(pids_mentioning(str(self.socket)))


@dataclass
class Dockerd:
    """A dockerd of one suite on a Containerd; `cdi`: features.cdi True/False, None: no `features` key."""

    suite: Suite
    containerd: Containerd
    home: Path
    cdi: bool | None
    spec_dir: Path
    helper: Helper | None = None
    version: str = ""
    daemon_json: dict[str, Any] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        return self.home / "d.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def config(self) -> dict[str, Any]:
        namespace = f"cgpu-{self.home.name}"
        doc: dict[str, Any] = {
            "data-root": str(self.home / "data"),
            "exec-root": str(self.home / "exec"),
            "pidfile": str(self.home / "docker.pid"),
            "hosts": [self.host],
            "containerd": str(self.containerd.socket),
            "containerd-namespace": namespace,
            "containerd-plugins-namespace": f"{namespace}-plugins",
            "cdi-spec-dirs": [str(self.spec_dir)],
            "bridge": "none",
            "iptables": False,
            "ip6tables": False,
            "userland-proxy": False,
        }
        if self.cdi is not None:
            doc["features"] = {"cdi": self.cdi}
        return doc

    def start(self, rootfs: Path) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.daemon_json = self.config()
        (self.home / "daemon.json").write_text(json.dumps(self.daemon_json, indent=2))
        self.helper = Helper(
            [
                "env",
                "-i",
                f"PATH={self.suite.path_env}",
                self.suite.binary("dockerd"),
                "--config-file",
                str(self.home / "daemon.json"),
            ],
            stop_grace=15,
        )
        self.helper.start()
        self.helper.wait_for(self._answers, timeout=START_SECONDS, interval=0.1)
        self.version = self._answers() or ""
        done = self.docker("import", str(rootfs), IMAGE)
        if done.returncode != 0:
            raise RuntimeError(f"docker import: {text(done)}")

    def _answers(self) -> str | None:
        if not self.socket.exists():
            return None
        done = self.docker("version", "--format", "{{.Server.Version}}", timeout=10)
        out = done.stdout.decode().strip()
        return out if done.returncode == 0 and out else None

    def docker(self, *args: str, timeout: float = CALL_SECONDS) -> Completed:
        env = {"PATH": self.suite.path_env, "HOME": str(self.home), "DOCKER_CONFIG": str(self.home / "cli")}
        return call([self.suite.binary("docker"), "--host", self.host, *args], timeout=timeout, env=env)

    def info(self) -> dict[str, Any]:
        done = self.docker("info", "--format", "{{json .}}")
        return json.loads(done.stdout) if done.returncode == 0 else {}

    def log(self) -> str:
        return self.helper.output().decode("utf-8", "backslashreplace")[-4000:] if self.helper else ""

    def stop(self) -> None:
        if self.helper is None:
            return
        done = self.docker("ps", "-aq", timeout=30)
        ids = done.stdout.decode().split()
        if ids:
            self.docker("rm", "-f", *ids, timeout=60)
        self.helper.stop()


class Session:
    """Every daemon this test session started, all stopped at its end."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.before = _dirs_before()
        self.containerds: list[Containerd] = []
        self.dockerds: list[Dockerd] = []

    def close(self) -> None:
        for dockerd in self.dockerds:
            with contextlib.suppress(Exception):
                dockerd.stop()
        for containerd in self.containerds:
            with contextlib.suppress(Exception):
                containerd.stop()
        _stop_pids(pids_mentioning(str(self.home)))  # anything else that names this session's dir
        unmount_under(self.home)
        _remove_ours(self.before)


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or below `folder` (a daemon stopped mid-way may leave its sandboxes' shm or a rootfs)."""
    found = []
    prefix = str(folder).rstrip("/") + "/"
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")
            if point.startswith(prefix):
                found.append(point)
    return found


def unmount_under(folder: Path) -> None:
    for point in sorted(mounts_under(folder), key=len, reverse=True):
        with contextlib.suppress(Exception):
            call(["umount", "-l", point], timeout=30)
