"""`cgpu image check` faults at the CLI: archives that are FIFOs or devices (reading one would
block or never end), a FIFO blob inside an OCI layout, an engine that hangs, and Ctrl-C while
the engine exports the image. Exit 1 (could not read) or 130, and no export left in TMPDIR."""

from __future__ import annotations

import json
import os
import tarfile

import pytest

from tests.faults.conftest import STOPS, hung, stand_in
from tests.image.trees import fedora_tree, layer_tar, oci_archive


@pytest.fixture
def fifo(tmp_path) -> str:
    path = tmp_path / "image.tar"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize(
    "ref", ["oci-archive:{fifo}", "docker-archive:{fifo}", "oci-archive:/dev/zero", "docker-archive:{tmp}"]
)
def test_an_archive_that_is_not_a_file_is_refused_without_reading(cli, fifo, tmp_path, ref):
    ref = ref.format(fifo=fifo, tmp=tmp_path)
    code, out, _ = cli("image", "check", ref, "--json", timeout=30)
    result = json.loads(out)
    assert code == 1 and result["verdict"] == "unknown"
    [error] = result["problems"]
    assert error["source"] == ref and "not a regular file" in error["message"]


def test_a_fifo_blob_in_an_oci_layout_is_refused(cli, tmp_path):
    archive = oci_archive(tmp_path / "o.tar", [layer_tar(fedora_tree(tmp_path / "root"))])
    layout = tmp_path / "layout"
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    blob = max((layout / "blobs" / "sha256").iterdir(), key=lambda p: p.stat().st_size)  # the layer
    blob.unlink()
    os.mkfifo(blob)
    code, out, _ = cli("image", "check", f"oci:{layout}", "--json", timeout=30)
    result = json.loads(out)
    assert code == 1, result
    assert "not a regular file" in json.dumps(result["problems"])


def test_a_hung_engine_is_stopped_at_the_timeout(cli, bin_dir):
    hung(bin_dir, "podman")
    code, out, _ = cli(
        "image", "check", "localhost/cgpu-faults:none", "--json", "--timeout", "1", env={"DOCKER_HOST": ""}, timeout=30
    )
    result = json.loads(out)
    assert code == 1 and "no answer within 1 s; it was stopped" in result["reason"]


@pytest.mark.parametrize("signum, status, said", STOPS)
def test_ctrl_c_while_the_engine_exports_leaves_no_partial_archive(cli, bin_dir, signum, status, said):
    """`podman save` has written half an archive into cgpu's temp folder when Ctrl-C comes."""
    stand_in(
        bin_dir,
        "podman",
        'case "$1 $2" in\n'
        '  "image exists") exit 0;;\n'
        '  "save --format") head -c 100000 /dev/urandom > "$5"; exec sleep 600;;\n'
        "esac\nexit 125\n",
    )
    code, out, err = cli.interrupt_when(
        lambda: cli.running("sleep 600"), "image", "check", "localhost/x:1", signum=signum
    )
    assert code == status and out == "" and said in err
