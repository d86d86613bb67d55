"""The CLI half of each `Engine` (what krunkit and `image check` ask of an engine), podman's and
Docker's, against one real engine: podman, and its Docker-compatible API for the docker CLI and
docker-py."""

from __future__ import annotations

import tarfile
import uuid

import pytest

from cgpu.engines.client import DockerEngine, Engine, EngineError, ImageNotFound, PodmanEngine
from cgpu.image.fs import Deadline

from .conftest import podman

API_TIMEOUT = 120  # as in test_engines.py: a busy host's storage lock can hold a call that long


@pytest.fixture(params=["podman", "docker"])
def engine(request, podman_service) -> Engine:
    """Each engine's CLI pointed at the same podman service (`podman --url`, `docker --host`)."""
    chosen: Engine = (PodmanEngine if request.param == "podman" else DockerEngine)(url=podman_service.url)
    if chosen.executable() is None:
        pytest.skip(f"the {chosen.name} CLI is not installed")
    return chosen


@pytest.mark.podman
def test_an_image_id_and_a_missing_image(engine, stand_in_image):
    expected = podman("image", "inspect", "--format", "{{.Id}}", stand_in_image).stdout.strip()
    assert engine.image_id(stand_in_image, timeout=API_TIMEOUT).removeprefix("sha256:") == expected
    with pytest.raises(ImageNotFound):
        engine.image_id(f"localhost/cgpu-test-absent:{uuid.uuid4().hex[:8]}", timeout=API_TIMEOUT)
    with pytest.raises(ImageNotFound):  # a name, never a flag (`--help` would print the help, exit 0)
        engine.image_id("--help", timeout=API_TIMEOUT)


@pytest.mark.podman
def test_a_container_attached_to_a_pipe(engine, stand_in_image, no_leftover_containers):
    done = engine.run_attached(
        stand_in_image, ["cat"], devices=[], input=b"from stdin", timeout=API_TIMEOUT, cleanup_timeout=30
    )
    assert (done.returncode, done.stdout) == (0, b"from stdin")


@pytest.mark.podman
def test_a_hung_attached_container_is_removed_at_its_timeout(engine, stand_in_image, no_leftover_containers):
    """Killing the CLI leaves the container running in the engine: it is removed by name (the
    fixture fails the test for a labelled container left behind)."""
    with pytest.raises(EngineError, match="no answer within 3 s"):
        engine.run_attached(stand_in_image, ["sleep", "600"], devices=[], input=b"", timeout=3, cleanup_timeout=60)


@pytest.mark.podman
def test_a_local_image_is_saved_as_a_docker_archive(engine, stand_in_image, tmp_path):
    said: list[str] = []
    archive = tmp_path / "image.tar"
    limits = {"deadline": Deadline(API_TIMEOUT), "cap": 1 << 30, "say": said.append}
    engine.save_image(stand_in_image, str(archive), **limits)
    with tarfile.open(archive) as tar:
        assert "manifest.json" in tar.getnames()
    assert said and stand_in_image in said[0]
    with pytest.raises(ImageNotFound):
        engine.save_image("localhost/cgpu-test-absent:none", str(archive), **limits)
