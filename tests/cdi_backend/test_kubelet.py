"""Who runs the containers, as the kubelet decides it: flags over its config file, the unit and drop-ins as
systemd assembles them, its default where nothing names a runtime, and no answer where no kubelet is installed."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from cgpu.engines import kubelet
from cgpu.engines.installed import Files

# kubeadm's drop-in as the kubelet's deb and rpm packages install it (kubernetes/release,
# cmd/krel/templates/latest/kubeadm/10-kubeadm.conf)
KUBEADM_DROP_IN = "\n".join(
    [
        "# Note: This dropin only works with kubeadm and kubelet v1.11+",
        "[Service]",
        'Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf'
        ' --kubeconfig=/etc/kubernetes/kubelet.conf"',
        'Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"',
        "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env",
        "EnvironmentFile=-/etc/default/kubelet",
        "ExecStart=",
        "ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS"
        " $KUBELET_EXTRA_ARGS",
        "",
    ]
)
KUBELET_UNIT = "[Unit]\nDescription=kubelet\n[Service]\nExecStart=/usr/bin/kubelet\nRestart=always\n"
CRIO = "unix:///var/run/crio/crio.sock"
CRI_DOCKERD = "unix:///run/cri-dockerd.sock"


def _node(root: Path, files: dict[str, str]) -> Files:
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return Files(str(root))


def _kubeadm_node(root: Path, **files: str) -> Files:
    return _node(
        root,
        {
            "/usr/lib/systemd/system/kubelet.service": KUBELET_UNIT,
            "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": KUBEADM_DROP_IN,
            **files,
        },
    )


def test_the_flag_overrides_the_config_file(tmp_path):
    files = _kubeadm_node(
        tmp_path,
        **{
            "/var/lib/kubelet/kubeadm-flags.env": f'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint={CRIO}"\n',
            "/var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n",
        },
    )
    found = kubelet.kubelet_runtime(files)
    assert found == {"engine": "crio", "endpoint": CRIO, "source": str(tmp_path / "var/lib/kubelet/kubeadm-flags.env")}


def test_extra_args_come_last_on_the_command_line_and_win(tmp_path):
    files = _kubeadm_node(
        tmp_path,
        **{
            "/var/lib/kubelet/kubeadm-flags.env": f'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint={CRIO}"\n',
            "/etc/default/kubelet": f"KUBELET_EXTRA_ARGS=--container-runtime-endpoint {CRI_DOCKERD}\n",
        },
    )
    found = kubelet.kubelet_runtime(files)
    assert found is not None and found["engine"] == "cri-dockerd" and found["endpoint"] == CRI_DOCKERD
    assert found["source"].endswith("etc/default/kubelet")


def test_the_config_file_decides_where_no_flag_names_a_runtime(tmp_path):
    files = _kubeadm_node(
        tmp_path,
        **{
            "/var/lib/kubelet/kubeadm-flags.env": 'KUBELET_KUBEADM_ARGS="--pod-infra-container-image=pause:3.9"\n',
            "/var/lib/kubelet/config.yaml": f"kind: KubeletConfiguration\ncontainerRuntimeEndpoint: {CRIO}\n",
        },
    )
    assert kubelet.kubelet_runtime(files)["engine"] == "crio"


def test_the_config_file_is_the_one_config_names(tmp_path):
    drop_in = KUBEADM_DROP_IN.replace("--config=/var/lib/kubelet/config.yaml", "--config=/etc/kubernetes/kubelet.json")
    files = _node(
        tmp_path,
        {
            "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf": drop_in,
            "/etc/kubernetes/kubelet.json": f'{{"kind": "KubeletConfiguration", "containerRuntimeEndpoint": "{CRIO}"}}',
            "/var/lib/kubelet/config.yaml": "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n",
        },
    )
    assert kubelet.kubelet_runtime(files)["engine"] == "crio"


def test_a_kubelet_that_names_no_runtime_uses_containerds_socket(tmp_path):
    files = _kubeadm_node(tmp_path, **{"/var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\n"})
    found = kubelet.kubelet_runtime(files)
    assert found == {
        "engine": "containerd",
        "endpoint": "unix:///run/containerd/containerd.sock",
        "source": "the kubelet's default (no flag or config file names a runtime)",
    }


def test_a_kubelet_binary_alone_is_a_kubelet(tmp_path):
    files = _node(tmp_path, {"/usr/bin/kubelet": "\x7fELF"})
    assert kubelet.kubelet_runtime(files)["engine"] == "containerd"


def test_no_kubelet_no_answer(tmp_path):
    assert kubelet.kubelet_runtime(_node(tmp_path, {"/usr/bin/containerd": "\x7fELF"})) is None


def test_a_drop_in_in_etc_masks_the_packages_one_of_the_same_name(tmp_path):
    masked = KUBEADM_DROP_IN + f"Environment=KUBELET_EXTRA_ARGS=--container-runtime-endpoint={CRIO}\n"
    files = _kubeadm_node(
        tmp_path,
        **{
            "/usr/lib/systemd/system/kubelet.service.d/20-runtime.conf": masked,
            "/etc/systemd/system/kubelet.service.d/20-runtime.conf": "[Service]\n",
        },
    )
    assert kubelet.kubelet_runtime(files)["engine"] == "containerd"  # the default: the /usr/lib one is masked


def test_an_unknown_socket_names_no_engine(tmp_path):
    files = _node(tmp_path, {"/var/lib/kubelet/config.yaml": "containerRuntimeEndpoint: unix:///run/other.sock\n"})
    assert kubelet.kubelet_runtime(files) == {
        "engine": "",
        "endpoint": "unix:///run/other.sock",
        "source": str(tmp_path / "var/lib/kubelet/config.yaml"),
    }


@given(st.text(max_size=400))
def test_any_unit_text_or_command_line_reads_without_raising(text):
    kubelet._unit_settings(text)
    kubelet._assignments(text)
    kubelet._environment_file(text)
    flags = kubelet._flags(text)
    assert all(name.startswith("--") for name in flags)


def test_k3s_gives_its_own_kubelet_its_own_containerd_unless_its_config_says_otherwise(tmp_path):
    files = _node(tmp_path, {"/usr/local/bin/k3s": "\x7fELF"})
    assert kubelet.kubelet_runtime(files) == {
        "engine": "containerd",
        "endpoint": "unix:///run/k3s/containerd/containerd.sock",
        "source": "k3s's own containerd (its default)",
    }
    (tmp_path / "etc/rancher/k3s/config.yaml.d").mkdir(parents=True)
    (tmp_path / "etc/rancher/k3s/config.yaml").write_text("write-kubeconfig-mode: '0644'\ndocker: true\n")
    assert kubelet.kubelet_runtime(Files(str(tmp_path)))["engine"] == "cri-dockerd"  # k3s's embedded cri-dockerd
    (tmp_path / "etc/rancher/k3s/config.yaml.d/50-crio.yaml").write_text(
        f'container-runtime-endpoint: "{CRIO.removeprefix("unix://")}"\n'
    )
    # docker mode wins over an endpoint (pkg/agent/config/config.go: if Docker {...} else if endpoint != "")
    assert kubelet.kubelet_runtime(Files(str(tmp_path)))["engine"] == "cri-dockerd"
    (tmp_path / "etc/rancher/k3s/config.yaml.d/40-no-docker.yaml").write_text("docker: false\n")
    found = kubelet.kubelet_runtime(Files(str(tmp_path)))
    assert found["engine"] == "crio" and found["source"].endswith("50-crio.yaml")  # a later file wins


def test_a_kubelet_unit_is_read_before_an_embedding_distribution(tmp_path):
    files = _kubeadm_node(
        tmp_path,
        **{
            "/usr/local/bin/k3s": "\x7fELF",
            "/var/lib/kubelet/kubeadm-flags.env": f'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint={CRIO}"\n',
        },
    )
    assert kubelet.kubelet_runtime(files)["engine"] == "crio"
