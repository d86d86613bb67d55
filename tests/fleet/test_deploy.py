"""The deployment files: Kubernetes manifests valid offline (against the bundled Kubernetes
schemas, strictly), their cgpu arguments accepted by cgpu itself, and nothing of the host
writable but the NFD features dir."""

from __future__ import annotations

import configparser
import shlex
import subprocess

import pytest
import yaml

from cgpu.cli import _parser
from cgpu.fleet.nfd import NAMESPACE
from tests.conftest import REPO

DEPLOY = REPO / "deploy"
MANIFESTS = sorted(p for p in (DEPLOY / "kubernetes").glob("*.yaml") if p.name != "kustomization.yaml")


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifests_validate_strictly(path):
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is a dev dependency")
    for document in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)


def _daemonset() -> dict:
    return yaml.safe_load((DEPLOY / "kubernetes" / "daemonset.yaml").read_text())


def test_the_daemonset_and_the_unit_run_watch_on_glibcs_allocator():
    # CPython's own returns memory only by whole 1 MiB arenas: a watch over 20,000 claim specs kept
    # 35 MiB between probes with it, 26 with glibc's (docs/kubernetes.md)
    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "PYTHONMALLOC", "value": "malloc"} in container["env"]
    unit = (DEPLOY / "systemd" / "cgpu-watch.service").read_text()
    assert "\nEnvironment=PYTHONMALLOC=malloc\n" in unit


def test_the_daemonset_runs_a_watch_cgpu_accepts_judged_by_the_nodes_runtime():
    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    args = _parser().parse_args(container["args"])
    assert args.command == "watch" and args.nfd_file.startswith("/etc/kubernetes/node-feature-discovery/features.d/")
    assert args.root == "/host"
    # the node's runtime judges, reading its own spec dirs under the root: neither is pinned here
    assert args.spec_dirs is None and args.engine is None
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = container[probe]["exec"]["command"]
        assert command[0] == "cgpu"
        checked = _parser().parse_args(command[1:])
        assert checked.check_age is not None and checked.answer_file == args.answer_file
        assert checked.check_age >= 3 * args.interval  # rewritten at least once an interval


def test_every_host_path_a_spec_may_name_is_visible_read_only():
    pod = _daemonset()["spec"]["template"]["spec"]
    container = pod["containers"][0]
    host_volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    root = mounts["/host"]
    assert host_volumes[root["name"]] == "/" and root["readOnly"] is True
    assert root["mountPropagation"] == "HostToContainer"  # a driver container's root, mounted later
    for path in ("/host/dev", "/host/sys", "/host/proc/driver"):  # submounts: read-only on their own
        assert mounts[path]["readOnly"] is True and host_volumes[mounts[path]["name"]] == path.removeprefix("/host")
    assert "hostPath" not in next(v for v in pod["volumes"] if v["name"] == mounts["/host/proc"]["name"])


def test_the_daemonset_writes_only_the_features_dir_and_keeps_no_privilege():
    pod = _daemonset()["spec"]["template"]["spec"]
    container = pod["containers"][0]
    host_volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    writable = [m["name"] for m in container["volumeMounts"] if m["name"] in host_volumes and not m.get("readOnly")]
    assert writable == ["features"]
    security = container["securityContext"]
    assert security["capabilities"]["drop"] == ["ALL"] and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True and not security.get("privileged")
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # not root: root's own files on the node stay closed to it (owner bits need no capability)
    assert security["runAsUser"] != 0 and security["runAsGroup"] != 0 and security["runAsNonRoot"] is True
    # only the init container is root, for its chown of the hidden dir in features.d, and keeps nothing else
    [init] = pod["initContainers"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    assert [m["name"] for m in init["volumeMounts"]] == ["features"]
    assert f"chown {security['runAsUser']}:{security['runAsGroup']}" in " ".join(init["command"])


def test_the_kustomize_base_renders_and_validates(tmp_path):
    import shutil
    import subprocess

    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is a dev dependency")
    kubectl = shutil.which("kubectl")
    kustomize = shutil.which("kustomize")
    if kubectl is None and kustomize is None:
        pytest.skip("neither kubectl (kubectl kustomize) nor kustomize is installed")
    argv = [kubectl, "kustomize"] if kubectl else [str(kustomize), "build"]
    rendered = subprocess.run(
        [*argv, str(DEPLOY / "kubernetes")], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    documents = list(yaml.safe_load_all(rendered))
    assert [d["kind"] for d in documents] == ["DaemonSet"]
    for document in documents:
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)
    assert documents[0]["metadata"]["namespace"] == "node-feature-discovery"
    assert documents[0]["spec"]["template"]["spec"]["containers"][0]["image"] == "localhost/cgpu:0.1.0"


def test_the_image_is_built_from_the_lock_without_git_or_venv():
    text = (DEPLOY / "Containerfile").read_text()
    assert "uv.lock" in text and "--frozen" in text and "--require-hashes" in text
    copied = [line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY ") and "--from" not in line]
    assert sorted(p for group in copied for p in group) == ["LICENSE", "README.md", "cgpu", "pyproject.toml", "uv.lock"]
    for name in (".containerignore", ".dockerignore"):
        ignored = (REPO / name).read_text().splitlines()
        assert {".git", ".venv", "tests"} <= set(ignored)


def test_the_example_pod_selects_a_label_cgpu_writes():
    pod = yaml.safe_load((DEPLOY / "kubernetes" / "example-pod.yaml").read_text())
    ((key, value),) = pod["spec"]["nodeSelector"].items()
    assert key == f"{NAMESPACE}/vulkan" and value == "true"


UNIT = DEPLOY / "systemd" / "cgpu-watch.service"


def _unit() -> configparser.ConfigParser:
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(UNIT)
    return unit


def test_the_systemd_unit_runs_a_watch_cgpu_accepts_from_a_path_it_can_reach():
    service = _unit()["Service"]
    argv = shlex.split(service["ExecStart"])
    args = _parser().parse_args(argv[1:])
    assert args.command == "watch" and args.answer_file.startswith("/run/cgpu/")
    assert "143" in service["SuccessExitStatus"]
    # a venv under /opt: Debian 12's pip refuses a system-wide install, and ProtectHome hides ~/.local
    assert argv[0] == "/opt/cgpu/bin/cgpu" and service["ProtectHome"] == "yes"
    assert "-HUP" in service["ExecReload"]
    text = UNIT.read_text()
    assert "python3 -m venv /opt/cgpu" in text  # the install the comment tells, for the path it runs
    comment = text.split("[Unit]")[0]  # it writes no NFD file unless told how: the comment says so
    assert "--nfd-file" in service["ExecStart"] or "add --nfd-file" in comment


def test_the_units_reload_sends_sighup_with_only_what_a_minimal_debian_has():
    """`systemctl reload` runs ExecReload: with /bin/kill (procps, not in a minimal Debian 12) it
    failed with 203/EXEC. systemd turns `$$` into `$` and sets MAINPID; /bin/sh's own kill sends."""
    import os
    import signal
    import subprocess
    import sys

    argv = shlex.split(_unit()["Service"]["ExecReload"].replace("$$", "$"))
    assert argv[0] == "/bin/sh"
    if not os.path.exists("/bin/sh") or sys.platform == "win32":
        pytest.skip("no /bin/sh here")
    waiter = subprocess.Popen(
        [sys.executable, "-c", "import signal,sys; signal.sigwait({signal.SIGHUP}); print('HUP')"],
        stdout=subprocess.PIPE, text=True, preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP}),
    )  # fmt: skip
    try:
        subprocess.run(argv, env={"MAINPID": str(waiter.pid)}, check=True, timeout=30)
        out, _ = waiter.communicate(timeout=30)
    finally:
        waiter.kill()
        waiter.wait()
    assert out.strip() == "HUP"


def test_the_units_runtime_dir_outlives_a_restart_but_not_the_service():
    service = _unit()["Service"]
    # the comment says no answer outlives the watch; a crash-restart keeps the last one meanwhile
    assert service["RuntimeDirectory"] == "cgpu" and service["RuntimeDirectoryPreserve"] == "restart"


def test_systemd_analyze_security_rates_the_unit_safe(tmp_path):
    import re
    import shutil
    import subprocess

    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    done = subprocess.run(
        [analyze, "security", "--offline=yes", "--no-pager", str(UNIT)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if "--offline" in done.stderr and done.returncode != 0:
        pytest.skip(f"this systemd-analyze has no offline mode: {done.stderr.strip()}")
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout)
    assert match, done.stdout + done.stderr
    assert float(match.group(1)) <= 3.0, done.stdout


# --- the DaemonSet's view of a node: the host's / at /host, judged by the node's runtime ---------


def _daemonset_watch(host, out, *, rounds_env=None) -> tuple[dict, dict[str, str]]:
    """Run the DaemonSet's own `cgpu watch` arguments against `host` (its /host) until the first
    answer; the report and the labels nfd-worker would publish."""
    import json
    import os
    import subprocess
    import sys
    import time

    from tests.fleet.test_nfd import read_features_dir

    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    features = out / "features.d"
    (features / ".cgpu").mkdir(parents=True)  # as the init container makes them (as root, then chown)
    (features / "cgpu").symlink_to(".cgpu/cgpu")
    rewrite = {
        "/host": str(host),
        "/etc/kubernetes/node-feature-discovery/features.d": str(features),
        "/run/cgpu": str(out),
    }
    args = []
    for arg in container["args"]:
        for old, new in rewrite.items():
            arg = arg.replace(f"={old}", f"={new}")
        args.append(arg)
    env = {**os.environ, "CGPU_CACHE_DIR": str(out / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu", *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    answer = out / "answer.json"
    try:
        deadline = time.monotonic() + 120
        while not (answer.exists() and (features / "cgpu").exists()):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    return json.loads(answer.read_text()), read_features_dir(features)


def _nvidia_node(tmp_path, files: dict[str, bytes | str]):
    import shutil

    from tests.cdi_backend import engine_files as ef

    host = tmp_path / "host"
    shutil.copytree(REPO / "cdi-samples" / "hosts" / "nvidia-580", host, symlinks=True)
    spec = (REPO / "cdi-samples" / "nvidia-current" / "spec" / "nvidia.yaml").read_text()  # cdiVersion 0.7.0
    return ef.node(host, {"/etc/cdi/nvidia.yaml": spec, **files})


def test_the_daemonset_sees_cuda_vulkan_opencl_where_the_nodes_runtime_reads_the_spec(tmp_path):
    from tests.cdi_backend import engine_files as ef

    host = _nvidia_node(tmp_path, {"/usr/bin/containerd": ef.upstream_containerd("v2.1.4", "v1.0.1")})
    (tmp_path / "out").mkdir()
    report, labels = _daemonset_watch(host, tmp_path / "out")
    assert report["containers"] == ["cuda", "vulkan", "opencl"]
    assert labels[f"{NAMESPACE}/cuda"] == labels[f"{NAMESPACE}/vulkan"] == labels[f"{NAMESPACE}/opencl"] == "true"
    assert labels[f"{NAMESPACE}/engine"] == "containerd" and labels[f"{NAMESPACE}/engine-version"] == "2.1.4"
    assert labels[f"{NAMESPACE}/devices"] == "1" and f"{NAMESPACE}/problem" not in labels


@pytest.mark.parametrize(
    ("binary", "config", "problem", "reason"),
    [
        # containerd 1.7.15 vendors CDI v0.6.2: cdiVersion 0.7.0 is above what it reads
        (("v1.7.15", "v0.6.2"), 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n',
         "spec-too-new", "ignores its spec"),
        # containerd 1.7 with CDI switched off in its config: no CDI device at all
        (("v1.7.24", "v0.8.1"), 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = false\n', "cdi-off",
         "CDI switched off"),
    ],
)  # fmt: skip
def test_the_daemonset_sees_nothing_with_the_reason_where_the_runtime_does_not_read_it(
    tmp_path, binary, config, problem, reason
):
    from tests.cdi_backend import engine_files as ef

    host = _nvidia_node(
        tmp_path, {"/usr/bin/containerd": ef.upstream_containerd(*binary), "/etc/containerd/config.toml": config}
    )
    (tmp_path / "out").mkdir()
    report, labels = _daemonset_watch(host, tmp_path / "out")
    assert report["containers"] == []
    texts = [d.get("reason", "") for d in report["devices"]] + [p["message"] for p in report["problems"]]
    assert any(reason in text for text in texts), texts
    assert not [k for k, v in labels.items() if v == "true" and k.split("/")[1] in ("cuda", "vulkan", "opencl")]
    assert labels[f"{NAMESPACE}/problem"] == problem and labels[f"{NAMESPACE}/engine"] == "containerd"


# --- the pod's view, as the manifest lays it out: what its user can and cannot read -------------------


class PodView:
    """The DaemonSet's mounts laid out on this machine: each hostPath volume is the same path under
    a fabricated node root, each emptyDir a fresh dir (0777, as the kubelet makes it), and a path
    the container names is rewritten through its mounts (the longest mountPath first, subPath
    followed). Its processes run as the manifest's user and group (this needs root)."""

    def __init__(self, node, scratch) -> None:
        self.node = node
        self.scratch = scratch
        self.pod = _daemonset()["spec"]["template"]["spec"]

    def mounts(self, container: dict) -> list[tuple[str, str]]:
        import os

        volumes = {v["name"]: v for v in self.pod["volumes"]}
        found = []
        for mount in container["volumeMounts"]:
            volume = volumes[mount["name"]]
            if "hostPath" in volume:
                source = self.node / volume["hostPath"]["path"].lstrip("/")
                if volume["hostPath"].get("type") == "DirectoryOrCreate":
                    source.mkdir(parents=True, exist_ok=True)
            else:
                source = self.scratch / mount["name"]
                source.mkdir(exist_ok=True)
                os.chmod(source, 0o777)
            found.append((mount["mountPath"], str(source / mount.get("subPath", ""))))
        return sorted(found, key=lambda pair: -len(pair[0]))

    def path(self, container: dict, text: str) -> str:
        """`text` with every container path in it made the path on this machine."""
        import re

        mounts = self.mounts(container)

        def local(match: re.Match) -> str:
            for inside, outside in mounts:
                if match.group() == inside or match.group().startswith(inside + "/"):
                    return outside.rstrip("/") + match.group()[len(inside) :]
            return match.group()

        return re.sub(r"/[\w./-]*", local, text)

    def run(self, container: dict, argv: list[str], **popen) -> subprocess.Popen:
        import os

        security = container["securityContext"]
        user, group = security["runAsUser"], security.get("runAsGroup", 0)

        def become() -> None:
            os.setgroups([])
            os.setgid(group)
            os.setuid(user)

        env = {e["name"]: self.path(container, e["value"]) for e in container.get("env", [])}
        env = {**os.environ, **env, "HOME": "/nonexistent", **self.python_env}
        return subprocess.Popen(argv, env=env, preexec_fn=become, cwd="/", **popen)

    python_env: dict[str, str] = {}
    python = ""

    def find_python(self, container: dict) -> str:
        """An interpreter the pod's user may run that imports cgpu: this one, or where it lies under
        a dir that user cannot enter (a pyenv in root's home), the system's of the same version, given
        this checkout and its site-packages."""
        import subprocess
        import sys
        import sysconfig

        self.python_env = {"PYTHONPATH": str(REPO)}
        self.python = sys.executable
        try:
            if self.run(container, [sys.executable, "-c", "import cgpu.cli"], stderr=subprocess.DEVNULL).wait(60) == 0:
                return self.python
        except PermissionError:
            pass
        paths = dict.fromkeys([str(REPO), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
        self.python_env = {"PYTHONPATH": ":".join(paths)}
        self.python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
        if self.run(container, [self.python, "-c", "import cgpu.cli"], stderr=subprocess.DEVNULL).wait(60) != 0:
            pytest.skip("no Python here that the pod's user may run with cgpu's dependencies")
        return self.python


def test_the_daemonsets_user_reads_no_root_only_file_and_judges_every_spec_as_root_would(tmp_path):
    """A node with root's secrets (0600, 0640 root:shadow) beside the NVIDIA spec: the pod, laid out
    from the manifest's mounts and run as its users, cannot open them, yet its answer (every
    device, every host path a spec names, the engine) is the one a root run gives, and
    nfd-worker's view of features.d (through the link the init container makes) has its labels."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    import time
    from pathlib import Path

    from tests.cdi_backend import engine_files as ef
    from tests.fleet.test_nfd import read_features_dir

    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("runs the pod's processes as the manifest's users, which needs root")
    # the tests' own tmp dirs are root's 0700: the pod's user could not reach into them at all
    scratch = Path(tempfile.mkdtemp(prefix="cgpu-pod-"))
    try:
        os.chmod(scratch, 0o755)
        node = _nvidia_node(scratch, {"/usr/bin/containerd": ef.upstream_containerd("v2.1.4", "v1.0.1")})
        secrets = {"etc/kubernetes/admin.conf": 0o600, "var/lib/kubelet/pki/kubelet.key": 0o600, "etc/shadow": 0o640}
        for path, mode in secrets.items():
            (node / path).parent.mkdir(parents=True, exist_ok=True)
            (node / path).write_text("secret\n")
            os.chmod(node / path, mode)
        view = PodView(node, scratch)
        [container] = view.pod["containers"]
        for init in view.pod.get("initContainers", []):
            assert view.run(init, [view.path(init, arg) for arg in init["command"]]).wait(timeout=60) == 0
        features = node / "etc/kubernetes/node-feature-discovery/features.d"

        python = view.find_python(container)
        for path in secrets:  # the pod's user, through the pod's own /host
            reader = [python, "-c", "import sys; open(sys.argv[1]).read()", view.path(container, "/host/" + path)]
            done = view.run(container, reader, stderr=subprocess.PIPE, text=True)
            assert done.wait(timeout=60) != 0 and "Permission denied" in done.communicate()[1], path

        args = [view.path(container, arg) for arg in container["args"]]
        answer = Path(view.path(container, "/run/cgpu/answer.json"))
        watch = view.run(container, [python, "-m", "cgpu", *args], stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while not (answer.exists() and (features / "cgpu").exists()):
                assert watch.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            watch.terminate()
            watch.wait(timeout=30)
        report = json.loads(answer.read_text())

        as_root = subprocess.run(
            [sys.executable, "-m", "cgpu", "probe", "--backend", "cdi", "--json", "--root", str(node)],
            capture_output=True, text=True, timeout=120, cwd=REPO,
            env={**os.environ, "CGPU_CACHE_DIR": str(scratch / "root-cache")},
        )  # fmt: skip
        expected = json.loads(as_root.stdout)
        assert report["containers"] == expected["containers"] == ["cuda", "vulkan", "opencl"]
        assert report["devices"] == expected["devices"]
        assert [e for e in report["engines"] if e["judged"]] == [e for e in expected["engines"] if e["judged"]]
        labels = read_features_dir(features)
        assert labels[f"{NAMESPACE}/cuda"] == labels[f"{NAMESPACE}/opencl"] == "true"
        # all it wrote on the node: its own hidden dir and the init container's link to its file
        assert sorted(os.listdir(features)) == [".cgpu", "cgpu"] and os.readlink(features / "cgpu") == ".cgpu/cgpu"
        assert (features / ".cgpu").stat().st_uid == container["securityContext"]["runAsUser"] != 0
    finally:
        shutil.rmtree(scratch)


def test_the_unit_hides_the_nodes_secret_stores_and_nothing_cgpu_reads():
    """The unit runs as root (it asks rootful podman and the Docker daemon), so root's own files
    are hidden from it by path: never one an engine, the kubelet or a CDI spec needs."""
    service = _unit()["Service"]
    hidden = [p.lstrip("-") for line in UNIT.read_text().splitlines() if line.startswith("InaccessiblePaths=")
              for p in line.partition("=")[2].split()]  # fmt: skip
    assert {
        "/etc/shadow",
        "/etc/ssh",
        "/etc/kubernetes/pki",
        "/etc/kubernetes/admin.conf",
        "/var/lib/kubelet/pki",
    } <= set(hidden)
    assert service["ProtectHome"] == "yes"  # the home dirs, root's included
    read = [
        "/etc/cdi", "/var/run/cdi", "/etc/containers", "/etc/containerd", "/etc/crio", "/etc/docker/daemon.json",
        "/etc/OpenCL/vendors", "/etc/vulkan", "/usr", "/run/nvidia", "/dev", "/proc/driver",
        "/etc/kubernetes/node-feature-discovery/features.d", "/var/lib/kubelet/config.yaml",
        "/var/lib/kubelet/kubeadm-flags.env", "/etc/systemd/system/kubelet.service.d",
        "/var/lib/rancher/k3s/agent/etc/containerd", "/var/lib/dpkg/status",
    ]  # fmt: skip
    for path in read:
        assert not [h for h in hidden if path == h or path.startswith(h + "/")], path
