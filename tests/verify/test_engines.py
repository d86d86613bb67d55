"""Engine access: podman through podman-py, Docker through docker-py (against podman's
Docker-compatible API where that works, and a stand-in dockerd for CDI states podman can't show)."""

from __future__ import annotations

import json
import os
import socketserver
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler

import pytest

from cgpu.engines.client import (
    CLEANUP_S,
    ContainerTimeout,
    DockerEngine,
    EngineError,
    PodmanEngine,
    docker_create_options,
    labels,
    open_engine,
)
from cgpu.engines.option import parse_engine
from tests.conftest import VERIFY_LABEL
from tests.timing import assert_within, interpreter_run, timed

from .conftest import podman, service_processes

# Where a limit is not what a test checks: generous, as podman answers slowly while other runs on
# the host hold its storage lock (image imports, container creation).
API_TIMEOUT = 120


@pytest.mark.parametrize(
    ("given", "chosen"),
    [
        ("podman@4.3.1", "podman"),
        ("docker@28.2.0", "docker"),
        ("Docker", "docker"),
        ("auto", None),
        ("none", None),
        (None, None),
    ],
)
def test_engine_choice(given, chosen):
    assert parse_engine(given).live_engine == chosen


def test_docker_request_is_a_cdi_device_request_not_a_host_device():
    """What `docker run --device vendor/class=name` sends; in `devices=` Docker would stat a path."""
    from docker.models.containers import _create_container_args

    options = docker_create_options(["example.com/gpu=0", "example.com/gpu=1"])
    args = _create_container_args(
        {"image": "img", "command": ["python3", "/cgpu-probe.py"], "version": "1.45", **options}
    )
    host_config = args["host_config"]
    assert host_config["DeviceRequests"] == [
        {
            "Driver": "cdi",
            "DeviceIDs": ["example.com/gpu=0", "example.com/gpu=1"],
            "Count": 0,
            "Capabilities": [],
            "Options": {},
        }
    ]
    assert "Devices" not in host_config
    assert host_config["NetworkMode"] == "none"
    assert args["labels"] == {"cgpu.verify": VERIFY_LABEL}  # this run's value, from CGPU_VERIFY_LABEL


def test_the_label_value_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("CGPU_VERIFY_LABEL")
    assert labels() == {"cgpu.verify": "1"}
    monkeypatch.setenv("CGPU_VERIFY_LABEL", "agent-7.node_a")
    assert labels() == {"cgpu.verify": "agent-7.node_a"}
    for bad in ("a b", "x,y=z", "-lead", "é", "x" * 64):
        monkeypatch.setenv("CGPU_VERIFY_LABEL", bad)
        with pytest.raises(EngineError, match="CGPU_VERIFY_LABEL"):
            labels()


@pytest.mark.podman
def test_podman_container_gets_the_cdi_device_and_is_removed(
    stand_in_image, cdi_spec, tmp_path, no_leftover_containers
):
    host_file = tmp_path / "host.txt"
    host_file.write_text("hello-from-cdi\n")
    kind = cdi_spec(
        "containerEdits:\n  env: [CGPU_TEST_GLOBAL=1]\n"
        "devices:\n  - name: dev0\n    containerEdits:\n      env: [CGPU_TEST_DEVICE=dev0]\n"
        f"      mounts:\n        - {{hostPath: {host_file}, containerPath: /mounted/file, options: [ro, bind]}}\n"
    )
    with open_engine("podman", timeout=API_TIMEOUT) as engine:
        assert isinstance(engine, PodmanEngine) and engine.version
        result = engine.run_container(
            stand_in_image,
            ["sh", "-c", "cat /mounted/file /in/note; env; echo oops >&2; exit 3"],
            devices=[f"{kind}=dev0"],
            files={"/in/note": b"copied-in\n"},
            timeout=API_TIMEOUT,
        )
    assert result.returncode == 3
    out = result.stdout.decode()
    assert "hello-from-cdi" in out and "copied-in" in out
    assert "CGPU_TEST_GLOBAL=1" in out and "CGPU_TEST_DEVICE=dev0" in out
    assert result.stderr == b"oops\n"


@pytest.mark.podman
def test_podman_service_started_for_the_run_is_stopped(stand_in_image):
    with open_engine("podman", timeout=API_TIMEOUT) as engine:
        started_here = engine._service is not None
        running = service_processes()
    if not started_here:
        pytest.skip("a podman API socket was already listening; cgpu started no service")
    assert running, "the service should run while the engine is open"
    assert service_processes() == []


@pytest.mark.podman
def test_hung_container_is_killed_at_the_timeout(stand_in_image, no_leftover_containers):
    """Bounded against a container that exits at once, run the same way on this host now."""
    with open_engine("podman", timeout=API_TIMEOUT) as engine:
        started = time.monotonic()
        with pytest.raises(ContainerTimeout, match="did not finish within 2 s"):
            engine.run_container(stand_in_image, ["sleep", "600"], devices=[], files={}, timeout=2)
        seconds = time.monotonic() - started

        def quick() -> float:
            return timed(lambda: engine.run_container(stand_in_image, ["true"], devices=[], files={}, timeout=60))[1]

        assert_within(seconds, 2 + CLEANUP_S, quick, "a hung container with timeout 2")


@pytest.mark.podman
@pytest.mark.parametrize("engine_name", ["podman", "docker"])
def test_the_images_own_entry_point_never_runs(
    engine_name, stand_in_image, podman_service, tmp_path, monkeypatch, no_leftover_containers
):
    """--probe-image is any image with python3: cgpu's command replaces the image's entry point
    (which here would print a forged answer), through podman-py and docker-py alike."""
    monkeypatch.setenv("DOCKER_HOST", podman_service.url)
    (tmp_path / "Containerfile").write_text(f'FROM {stand_in_image}\nENTRYPOINT ["echo", "forged answer"]\n')
    ref = f"localhost/cgpu-test-entry-point:{uuid.uuid4().hex[:8]}"
    done = podman("build", "--pull=never", "-t", ref, str(tmp_path))
    assert done.returncode == 0, done.stderr
    try:
        with open_engine(engine_name, timeout=30) as engine:
            result = engine.run_container(
                ref, ["cat", "/in/note"], devices=[], files={"/in/note": b"cgpu's own\n"}, timeout=30
            )
        assert (result.returncode, result.stdout) == (0, b"cgpu's own\n")
    finally:
        podman("rmi", "-f", ref)


@pytest.mark.podman
def test_docker_py_against_podmans_compat_api(stand_in_image, podman_service, monkeypatch, no_leftover_containers):
    """docker-py's whole container life works on podman's Docker API, but podman before 5.4
    drops CDI device requests there: cgpu must say so instead of running a deviceless container."""
    monkeypatch.setenv("DOCKER_HOST", podman_service.url)
    with open_engine("docker", timeout=API_TIMEOUT) as engine:
        assert isinstance(engine, DockerEngine)
        assert engine.podman_version
        result = engine.run_container(
            stand_in_image,
            ["sh", "-c", "cat /in/note; exit 4"],
            devices=[],
            files={"/in/note": b"via-docker-py\n"},
            timeout=API_TIMEOUT,
        )
        assert (result.returncode, result.stdout) == (4, b"via-docker-py\n")
        refusal = engine.cdi_refusal()
    major_minor = tuple(int(p) for p in engine.podman_version.split(".")[:2])
    if major_minor < (5, 4):
        assert "silently ignores CDI device requests" in refusal and "--engine podman" in refusal
    else:
        assert refusal is None


@pytest.mark.podman
def test_docker_timeout_kills_the_container(stand_in_image, podman_service, monkeypatch, no_leftover_containers):
    monkeypatch.setenv("DOCKER_HOST", podman_service.url)
    with open_engine("docker", timeout=API_TIMEOUT) as engine, pytest.raises(ContainerTimeout):
        engine.run_container(stand_in_image, ["sleep", "600"], devices=[], files={}, timeout=2)


class _Dockerd(BaseHTTPRequestHandler):
    """Answers /version and /info as a Docker daemon of a given version and CDI state."""

    answers: dict[str, dict] = {}

    def do_GET(self):
        key = "version" if self.path.endswith("/version") else "info" if self.path.endswith("/info") else None
        body = json.dumps(self.answers[key]).encode() if key else b"{}"
        self.send_response(200 if key else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def dockerd(tmp_path, monkeypatch):
    sock = str(tmp_path / "docker.sock")
    server = socketserver.ThreadingUnixStreamServer(sock, _Dockerd)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")

    def answer(version: str, api: str, info: dict) -> None:
        _Dockerd.answers = {
            "version": {
                "Version": version,
                "ApiVersion": api,
                "MinAPIVersion": "1.24",
                "Components": [{"Name": "Engine", "Version": version}],
            },
            "info": info,
        }

    yield answer
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("version", "api", "info", "expected"),
    [
        ("24.0.7", "1.43", {}, "has no CDI support"),
        ("27.5.1", "1.47", {"CDISpecDirs": []}, "CDI is disabled"),
        ("28.2.0", "1.50", {"CDISpecDirs": ["/etc/cdi", "/var/run/cdi"]}, None),
    ],
)
def test_docker_cdi_state_from_info(dockerd, version, api, info, expected):
    dockerd(version, api, info)
    with open_engine("docker", timeout=5) as engine:
        assert engine.version == version
        refusal = engine.cdi_refusal()
    if expected is None:
        assert refusal is None
    else:
        assert expected in refusal


def test_no_docker_daemon_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    with pytest.raises(EngineError, match="the Docker daemon did not answer"), open_engine("docker", timeout=5):
        pass


@pytest.mark.podman
def test_a_listening_podman_socket_is_used_as_it_is(stand_in_image, podman_service, monkeypatch):
    monkeypatch.setenv("CONTAINER_HOST", podman_service.url)
    with open_engine(None, timeout=API_TIMEOUT) as engine:
        assert isinstance(engine, PodmanEngine)
        assert engine._service is None and engine.where == podman_service.url
    assert podman_service.helper.returncode is None  # not ours to stop


def test_no_podman_api_at_container_host_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{tmp_path}/absent.sock")
    with pytest.raises(EngineError, match="the podman API did not answer at unix://"):
        with open_engine("podman", timeout=5):
            pass


@pytest.mark.parametrize("choice", ["podman", "docker", None])
def test_a_deadline_already_past_connects_to_nothing(tmp_path, monkeypatch, choice):
    """The whole run's limit is used up (a busy host's start, a hung static phase): no engine is
    asked, no service started, and the error says why."""
    monkeypatch.setenv("PATH", str(tmp_path))  # a podman that ran would be found here: none is
    (tmp_path / "podman").write_text(f"#!/bin/sh\ntouch {tmp_path}/podman-ran\n")
    (tmp_path / "podman").chmod(0o755)
    with pytest.raises(EngineError, match="the run.s time limit was used up before importing (podman|docker)-py"):
        with open_engine(choice, timeout=30, deadline=time.monotonic() - 1):
            pass
    assert not (tmp_path / "podman-ran").exists()


def test_each_call_gets_what_is_left_of_the_deadline(tmp_path, monkeypatch):
    """A podman whose `info` never answers, 1 s left of the run's limit: it is stopped then, not
    after the 30 s each call may take."""
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CONTAINER_HOST", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # no rootless socket listens there
    (tmp_path / "podman").write_text("#!/bin/sh\nexec sleep 600\n")
    (tmp_path / "podman").chmod(0o755)
    started = time.monotonic()
    with pytest.raises(EngineError), open_engine("podman", timeout=30, deadline=started + 1):
        pass
    assert_within(time.monotonic() - started, 1, interpreter_run, "connecting to a hung podman with 1 s left")


def test_an_engine_library_slow_to_import_is_given_what_is_left(tmp_path, monkeypatch):
    """On a busy host `import podman` took 4-6 s: the import gets what is left of the run's limit,
    then the run goes on without it (the import finishes in the background)."""
    from cgpu.engines.client import _Budget

    name = f"cgpu_test_slow_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text("import time\ntime.sleep(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    started = time.monotonic()
    with pytest.raises(EngineError, match="the run's time limit was used up while importing the slow library"):
        _Budget(30, started + 0.5).imported(name, "the slow library")
    assert_within(time.monotonic() - started, 0.5, interpreter_run, "a slow import with 0.5 s left")
    assert _Budget(30, None).imported("json", "json").dumps([]) == "[]"  # no deadline: a plain import


def test_the_files_copied_into_a_container_end_with_the_archives_end_blocks():
    """No record padding after the two end-of-archive blocks: podman's tar reader stops at them
    and the padding still being sent failed the copy ("broken pipe") on a busy host."""
    import io
    import tarfile

    from cgpu.engines.client import tar_archive

    files = {"/cgpu-probe.py": b"print('probe')\n" * 100, "/etc/cgpu/empty": b""}
    data = tar_archive(files)
    assert data.endswith(bytes(2 * tarfile.BLOCKSIZE))
    assert not data[: -2 * tarfile.BLOCKSIZE].endswith(bytes(tarfile.BLOCKSIZE))  # no third zero block
    assert len(data) % tarfile.BLOCKSIZE == 0 and len(data) < tarfile.RECORDSIZE
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert {m.name: (m.mode, tar.extractfile(m).read()) for m in tar.getmembers()} == {
            "cgpu-probe.py": (0o644, files["/cgpu-probe.py"]),
            "etc/cgpu/empty": (0o644, b""),
        }


@pytest.mark.podman
def test_a_copy_podman_refuses_says_podmans_reason(stand_in_image, monkeypatch, no_leftover_containers):
    """podman-py's put_archive answers only False; the error names the files and podman's own
    reason, without the copier request podman dumps before it."""
    import cgpu.engines.client

    monkeypatch.setattr(cgpu.engines.client, "tar_archive", lambda files: b"not a tar archive" * 64)
    with open_engine("podman", timeout=API_TIMEOUT) as engine:
        with pytest.raises(EngineError) as raised:
            engine.run_container(stand_in_image, ["true"], devices=[], files={"/in/note": b"x"}, timeout=API_TIMEOUT)
    message = str(raised.value)
    assert message.startswith("podman refused to copy /in/note into the container: ")
    assert "tar" in message.partition(": ")[2] and "copier.request" not in message and len(message) < 400
