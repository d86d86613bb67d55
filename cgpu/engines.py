"""Container engines on this host: which one, which version, and a client that runs one
container at a time with a timeout and always removes it.

podman is reached through podman-py, Docker through docker-py; both are imported lazily
(each costs ~100 ms), only by the code that talks to an engine.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cgpu.errors import CgpuError
from cgpu.run import CommandError, CommandTimeoutError, Completed, Helper, HelperExitedError, decode, run

# Every container cgpu starts carries the label cgpu.verify=VALUE, so a user (and the tests) can
# find one that outlived its run: `podman ps -a --filter label=cgpu.verify=1`. VALUE is "1" unless
# CGPU_VERIFY_LABEL says otherwise: agents (and test runs) sharing a host tell their containers apart.
LABEL_KEY = "cgpu.verify"
LABEL_ENV = "CGPU_VERIFY_LABEL"
_LABEL_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def labels() -> dict[str, str]:
    """The labels of a container cgpu starts, with this run's value (read when it starts one)."""
    value = os.environ.get(LABEL_ENV) or "1"
    if not _LABEL_VALUE.fullmatch(value):
        raise EngineError(
            f"{LABEL_ENV}={value!r} is not a usable label value: use up to 63 letters, digits, '.', '_' or '-'"
        )
    return {LABEL_KEY: value}


# Largest probe output read back from a container; anything longer is not a probe answer.
MAX_LOG_BYTES = 4 * 1024 * 1024
# Removing a container after its time is up: about 0.3 s when the engine answers; the bound
# when it does not (then the CLI is tried).
CLEANUP_S = 5.0


@dataclass(frozen=True)
class EngineVersion:
    name: str  # "podman" or "docker"
    version: str  # "4.3.1"
    # Docker: the daemon's `CDISpecDirs` (`docker info`, API 1.44+): [] when CDI is off; None: not told
    cdi_spec_dirs: tuple[str, ...] | None = None


def detect_engines(*, timeout: float = 10) -> tuple[list[EngineVersion], list[str]]:
    """The engines installed here with their versions, podman first; and why any failed.

    Docker counts only when its daemon answers: a docker CLI alone runs no container."""
    found: list[EngineVersion] = []
    failures: list[str] = []
    for name, argv in (
        ("podman", ["podman", "version", "--format", "{{.Client.Version}}"]),
        ("docker", ["docker", "version", "--format", "{{.Server.Version}}"]),
    ):
        exe = shutil.which(name)
        if exe is None:
            continue
        try:
            done = run([exe, *argv[1:]], timeout=timeout)
        except CommandError as exc:
            failures.append(str(exc))
            continue
        match = re.search(r"\d+\.\d+(\.\d+)?", decode(done.stdout))
        if done.returncode != 0 or match is None:
            failures.append(f"{name} version: exit {done.returncode}: {decode(done.stderr).strip()[:300]}")
            continue
        found.append(EngineVersion(name, match.group(0), _docker_spec_dirs(exe, timeout) if name == "docker" else None))
    return found, failures


def _docker_spec_dirs(exe: str, timeout: float) -> tuple[str, ...] | None:
    """The Docker daemon's CDI spec dirs as it reports them (empty: CDI off); None when it does not say."""
    try:
        done = run([exe, "info", "--format", "{{json .CDISpecDirs}}"], timeout=timeout)
        if done.returncode != 0:
            return None  # a CLI older than the field, or no answer: not told
        value = json.loads(decode(done.stdout))
    except (CommandError, ValueError, RecursionError):
        return None
    if value is None:
        return ()  # a daemon with CDI off leaves the list out
    if isinstance(value, list) and all(isinstance(d, str) for d in value):
        return tuple(value)
    return None


class EngineError(CgpuError):
    """The engine could not be reached or refused a request; str() is the user's message,
    with the engine's own words where it gave any."""


class ContainerTimeout(EngineError):
    pass


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


class Engine:
    """One engine's API. `run_container` is the whole life of one container: create, copy
    files in, start, wait (with a timeout), read the logs, and remove it on every path."""

    name = ""

    def __init__(self, client: Any, version: str, where: str) -> None:
        self.client = client  # the podman-py or docker-py client
        self.version = version
        self.where = where  # the API address, for messages
        self.notes: list[str] = []  # what was passed over on the way (another user's socket), for the report

    def describe(self) -> str:
        return f"{self.name} {self.version}"

    def image_exists(self, ref: str) -> bool:
        raise NotImplementedError

    def import_image(self, tar_path: str, ref: str, changes: list[str]) -> None:
        raise NotImplementedError

    def run_container(
        self, image: str, command: list[str], *, devices: list[str], files: dict[str, bytes], timeout: float
    ) -> Completed:
        """Run `command` in a new container and return its exit status and output. The whole
        life, from create to exit, has `timeout` seconds: every API call gets what is left of
        it. A container that is still running or starting then (a hung probe, or a CDI hook the
        runtime waits on) is killed, its processes included, and removed within CLEANUP_S."""
        deadline = time.monotonic() + timeout
        name = f"cgpu-verify-{uuid.uuid4().hex[:12]}"
        try:
            with self._until(deadline):
                container = self._create(image, command, devices, name)
        except BaseException as exc:
            late = time.monotonic() >= deadline
            if late or not isinstance(exc, EngineError):  # Ctrl-C, or no answer: it may be created all the same
                self._remove_named(name)
            if late and isinstance(exc, EngineError):
                raise ContainerTimeout(f"{self.name} did not create the container within {timeout:.3g} s") from None
            raise
        exited = False
        doing = "start"
        try:
            with self._until(deadline):
                self._put_files(container, files)
                container.start()
            doing = "finish"
            exit_code = self._wait(container, max(0.001, deadline - time.monotonic()))
            exited = True
            with self._until(time.monotonic() + CLEANUP_S):  # it has exited: reading its logs is quick
                stdout = _joined(container.logs(stdout=True, stderr=False))
                stderr = _joined(container.logs(stdout=False, stderr=True))
        except self._errors() as exc:
            if not exited and time.monotonic() >= deadline - 0.1 * timeout:
                if doing == "start":
                    raise ContainerTimeout(
                        f"the container did not start within {timeout:.3g} s (the engine was still setting it up: "
                        "a CDI hook or the OCI runtime hung); it was killed and removed"
                    ) from None
                raise ContainerTimeout(
                    f"the probe did not finish within {timeout:.3g} s; its container was killed and removed"
                ) from None
            raise EngineError(self._message(exc)) from None
        finally:
            self._remove(container, kill=not exited)
        return Completed(command, exit_code, stdout, stderr)

    def close(self) -> None:
        pass

    # engine specifics
    def _create(self, image: str, command: list[str], devices: list[str], name: str) -> Any:
        raise NotImplementedError

    def _wait(self, container: Any, timeout: float) -> int:
        raise NotImplementedError

    def _errors(self) -> tuple[type[BaseException], ...]:
        raise NotImplementedError

    def _message(self, exc: BaseException) -> str:
        raise NotImplementedError

    @contextmanager
    def _until(self, deadline: float) -> Iterator[None]:
        """API calls inside wait at most until `deadline` (podman-py and docker-py take one
        timeout per client, read at each call)."""
        api = self.client.api
        default = api.timeout
        api.timeout = max(0.001, deadline - time.monotonic())
        try:
            yield
        finally:
            api.timeout = default

    def _put_files(self, container: Any, files: dict[str, bytes]) -> None:
        if not files:
            return
        import io
        import tarfile

        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path, data in files.items():
                info = tarfile.TarInfo(path.lstrip("/"))
                info.size = len(data)
                info.mode = 0o644
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(data))
        if not container.put_archive("/", buffer.getvalue()):
            raise EngineError(f"{self.name} refused to copy {', '.join(files)} into the container")

    def _remove(self, container: Any, *, kill: bool) -> None:
        """Remove the container within CLEANUP_S. One that may still run or be starting is
        killed first: its processes on this host (while the runtime waits on a hung CDI hook the
        engine holds the container's lock, so no API call would get through, and a forced remove
        left conmon and `runc init` behind), then through the API (a forced remove would give it
        the engine's stop timeout, 10 s, to end on its own)."""
        deadline = time.monotonic() + CLEANUP_S
        if kill:
            kill_container_processes(container.id)
        try:
            with self._until(deadline):
                if kill:
                    try:
                        container.kill(signal="SIGKILL")
                    except self._errors():
                        pass  # not running (any more)
                container.remove(force=True)
        except self._errors():
            if kill:
                kill_container_processes(container.id)  # one the engine started since
            self._remove_with_cli(container.id, deadline)

    def _remove_named(self, name: str) -> None:
        deadline = time.monotonic() + CLEANUP_S
        try:
            with self._until(deadline):
                self.client.containers.get(name).remove(force=True)
        except self._errors():
            self._remove_with_cli(name, deadline)

    def _remove_with_cli(self, container: str, deadline: float) -> None:
        """The API is gone (service stopped, Ctrl-C twice) or stuck: the CLI can still remove it."""
        exe = shutil.which(self.name)
        if exe:
            # podman's --force stops a container with its 10 s timeout first; docker's kills it at once
            now = ["--time", "0"] if self.name == "podman" else []
            try:
                run([exe, "rm", "--force", *now, container], timeout=max(1.0, deadline - time.monotonic()))
            except CommandError:
                pass


def kill_container_processes(container_id: str) -> None:
    """SIGKILL what runs in a container or is setting it up, on this host: the OCI runtime
    processes whose command line names its full ID (`runc create`, `runc start`), the processes
    in its cgroup, and their descendants (`runc init`, a CDI hook it runs). The monitor (conmon,
    a containerd shim) is spared: it sees its child end and tells the engine, so the engine's
    state stays true and the container can be removed. Engine clients (`podman logs ID`) are
    spared too. Linux only (/proc); elsewhere, for another user's processes or a remote engine
    it finds nothing, and the API's kill is all there is."""
    if not container_id or not os.path.isdir("/proc"):
        return
    wanted = container_id.encode()
    spared = (b"podman", b"docker", b"conmon")
    children: dict[int, list[int]] = {}
    roots = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                parent = int(stat.read().rpartition(b")")[2].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
            with open(f"/proc/{entry}/cgroup", "rb") as cgroup:
                in_container = wanted in cgroup.read()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        pid = int(entry)
        children.setdefault(parent, []).append(pid)
        program = os.path.basename(argv[0])
        if program in spared or program.startswith(b"containerd-shim") or pid == os.getpid():
            continue
        if in_container or wanted in argv:
            roots.append(pid)
    doomed = set()
    while roots:
        pid = roots.pop()
        if pid not in doomed:
            doomed.add(pid)
            roots.extend(children.get(pid, []))
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # gone, or not ours to kill
            pass


def _joined(output: bytes | Iterator[bytes] | None) -> bytes:
    """Logs as bytes, capped: podman-py returns a generator of frames, docker-py bytes."""
    if output is None:
        return b""
    if isinstance(output, (bytes, bytearray)):
        return bytes(output[:MAX_LOG_BYTES])
    data = bytearray()
    for chunk in output:
        data += chunk if isinstance(chunk, (bytes, bytearray)) else str(chunk).encode()
        if len(data) >= MAX_LOG_BYTES:
            break
    return bytes(data[:MAX_LOG_BYTES])


class PodmanEngine(Engine):
    name = "podman"

    def __init__(self, client: Any, version: str, where: str, service: PodmanService | None) -> None:
        super().__init__(client, version, where)
        self._service = service

    def image_exists(self, ref: str) -> bool:
        try:
            return bool(self.client.images.exists(ref))
        except self._errors() as exc:
            raise EngineError(self._message(exc)) from None

    def import_image(self, tar_path: str, ref: str, changes: list[str]) -> None:
        try:
            with open(tar_path, "rb") as tar:
                response = self.client.api.post(
                    "/images/import",
                    params={"reference": ref, "changes": changes},
                    data=tar,
                    headers={"Content-Type": "application/x-tar"},
                    timeout=600,
                )
            response.raise_for_status()
        except self._errors() as exc:
            raise EngineError(f"podman could not import the probe image {ref}: {self._message(exc)}") from None

    def _create(self, image: str, command: list[str], devices: list[str], name: str) -> Any:
        try:
            return self.client.containers.create(  # command[0] replaces the image's own entry point
                image,
                command[1:],
                entrypoint=command[:1],
                name=name,
                devices=devices,
                labels=labels(),
                network_mode="none",
            )
        except self._errors() as exc:
            raise EngineError(self._message(exc)) from None

    def _wait(self, container: Any, timeout: float) -> int:
        return int(container.wait(condition=["exited", "stopped"], timeout=timeout))

    def _errors(self) -> tuple[type[BaseException], ...]:
        import podman.errors
        import requests

        return (podman.errors.APIError, podman.errors.PodmanError, requests.RequestException)

    def _message(self, exc: BaseException) -> str:
        explanation = getattr(exc, "explanation", None)
        if explanation and "operation failed" not in str(explanation):
            return str(explanation).strip()
        cause = exc.__cause__ or exc
        return f"no answer from the podman API at {self.where}: {cause}"

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self._service is not None:
                self._service.stop()


class DockerEngine(Engine):
    name = "docker"

    def __init__(self, client: Any, version: str, where: str, podman_version: str | None) -> None:
        super().__init__(client, version, where)
        # Set when the "Docker" API is podman's Docker-compatible one.
        self.podman_version = podman_version

    def describe(self) -> str:
        if self.podman_version:
            return f"podman {self.podman_version} (through its Docker-compatible API)"
        return super().describe()

    def cdi_refusal(self) -> str | None:
        """Why this daemon would not inject CDI devices, or None when it would."""
        if self.podman_version:
            if version_tuple(self.podman_version) < (5, 4):
                return (
                    f"this Docker API is podman {self.podman_version}'s Docker-compatible one, which silently "
                    "ignores CDI device requests before podman 5.4: a container started through it would get "
                    "no device at all; use --engine podman instead"
                )
            return None
        try:
            info = self.client.info()
        except self._errors() as exc:
            raise EngineError(self._message(exc)) from None
        dirs = info.get("CDISpecDirs")
        if dirs is None:
            return (
                f"Docker {self.version} has no CDI support (it came in Docker Engine 25, on by default "
                "from 28.2): upgrade Docker, or use --engine podman"
            )
        if not dirs:
            return (
                f'CDI is disabled in this Docker daemon ({self.version}): set "features": {{"cdi": true}} '
                "in /etc/docker/daemon.json and restart dockerd"
            )
        return None

    def image_exists(self, ref: str) -> bool:
        import docker.errors

        try:
            self.client.images.get(ref)
            return True
        except docker.errors.ImageNotFound:
            return False
        except self._errors() as exc:
            raise EngineError(self._message(exc)) from None

    def import_image(self, tar_path: str, ref: str, changes: list[str]) -> None:
        repository, _, tag = ref.rpartition(":")
        try:
            self.client.api.import_image(src=tar_path, repository=repository, tag=tag, changes=changes)
        except self._errors() as exc:
            raise EngineError(f"docker could not import the probe image {ref}: {self._message(exc)}") from None

    def _create(self, image: str, command: list[str], devices: list[str], name: str) -> Any:
        try:
            return self.client.containers.create(  # command[0] replaces the image's own entry point
                image, command[1:], entrypoint=command[:1], name=name, **docker_create_options(devices)
            )
        except self._errors() as exc:
            raise EngineError(self._message(exc)) from None

    def _wait(self, container: Any, timeout: float) -> int:
        result = container.wait(timeout=timeout)
        return int(result.get("StatusCode", -1))

    def _errors(self) -> tuple[type[BaseException], ...]:
        import docker.errors
        import requests

        return (docker.errors.DockerException, requests.RequestException)

    def _message(self, exc: BaseException) -> str:
        explanation = getattr(exc, "explanation", None)
        if explanation:
            return str(explanation).strip()
        return f"no answer from the Docker API at {self.where}: {exc}"

    def close(self) -> None:
        self.client.close()


def docker_create_options(devices: list[str]) -> dict[str, Any]:
    """docker-py `containers.create` keywords for a probe container with these CDI devices.

    CDI names go in a DeviceRequest with driver "cdi", exactly as `docker run --device`
    sends them; in `devices=` Docker would take them for host paths."""
    from docker.types import DeviceRequest

    options: dict[str, Any] = {"labels": labels(), "network_mode": "none"}
    if devices:
        options["device_requests"] = [DeviceRequest(driver="cdi", device_ids=list(devices))]
    return options


# --- finding and opening an engine ---------------------------------------------------------


@contextmanager
def open_engine(
    choice: str | None,
    *,
    timeout: float,
    progress: Callable[[str], None] = lambda _m: None,
    deadline: float | None = None,
) -> Iterator[Engine]:
    """Connect to podman or Docker; a podman service started for the run is stopped after,
    on every path. Each call while connecting waits at most `timeout` seconds, and never past
    `deadline` (a time.monotonic() value: the whole run's limit) when one is given."""
    budget = _Budget(timeout, deadline)
    if choice == "docker":
        engine: Engine = _open_docker(budget)
    elif choice == "podman":
        engine = _open_podman(budget, progress)
    else:
        engine = _open_auto(budget, progress)
    try:
        yield engine
    finally:
        engine.close()


class _Budget:
    """The time one call while connecting may wait: `timeout`, or what is left before the run's
    deadline when that is less; EngineError when nothing is left."""

    def __init__(self, timeout: float, deadline: float | None) -> None:
        self.timeout = timeout
        self.deadline = deadline

    def __call__(self, doing: str) -> float:
        if self.deadline is None:
            return self.timeout
        left = self.deadline - time.monotonic()
        if left < 0.05:
            raise EngineError(f"the run's time limit was used up before {doing}")
        return self.timeout if left >= self.timeout else max(0.1, round(left, 1))

    def imported(self, name: str, what: str) -> Any:
        """`import name` (the client library `what`) within this budget: on a busy host importing
        podman-py or docker-py (requests, idna, urllib3) takes seconds. Past the deadline it goes
        on in a daemon thread, harmlessly, and this raises EngineError; ImportError as it came."""
        if self.deadline is None:
            return importlib.import_module(name)
        seconds = self(f"importing {what}")
        outcome: list[Any] = []

        def load() -> None:
            try:
                outcome.append(importlib.import_module(name))
            except BaseException as exc:  # handed to the waiting thread
                outcome.append(exc)

        worker = threading.Thread(target=load, name=f"cgpu-import-{name}", daemon=True)
        worker.start()
        worker.join(seconds)
        if worker.is_alive():
            raise EngineError(f"the run's time limit was used up while importing {what} (slow on a busy host)")
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]


def _open_auto(budget: _Budget, progress: Callable[[str], None]) -> Engine:
    _refuse_ssh("CONTAINER_HOST")  # it names the engine to use: no falling back to another one
    reasons = []
    if shutil.which("podman") or os.environ.get("CONTAINER_HOST"):
        try:
            return _open_podman(budget, progress)
        except EngineError as exc:
            reasons.append(str(exc))
    try:
        return _open_docker(budget)
    except EngineError as exc:
        reasons.append(str(exc))
    raise EngineError("no container engine answered: " + "; ".join(reasons))


def _open_docker(budget: _Budget) -> DockerEngine:
    _refuse_ssh("DOCKER_HOST")
    try:
        docker = budget.imported("docker", "docker-py")
        requests = budget.imported("requests", "requests")
    except ImportError as exc:  # pragma: no cover - a dependency of cgpu
        raise EngineError(f"docker-py is not installed: {exc}") from None
    where = os.environ.get("DOCKER_HOST") or "the default Docker context"
    try:
        client = docker.from_env(timeout=budget(f"asking the Docker daemon at {where}"))
        version = client.version()
        client.api.timeout = budget.timeout  # the per-call limit from here on (run_container sets its own)
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise EngineError(f"the Docker daemon did not answer at {where}: {exc}") from None
    podman_version = next(
        (c.get("Version") for c in version.get("Components") or [] if "podman" in str(c.get("Name", "")).lower()),
        None,
    )
    return DockerEngine(client, str(version.get("Version", "unknown")), client.api.base_url, podman_version)


def _open_podman(budget: _Budget, progress: Callable[[str], None]) -> PodmanEngine:
    _refuse_ssh("CONTAINER_HOST")
    try:
        podman = budget.imported("podman", "podman-py")
    except ImportError as exc:  # pragma: no cover - a dependency of cgpu
        raise EngineError(f"podman-py is not installed: {exc}") from None
    url = os.environ.get("CONTAINER_HOST")
    service = None
    notes: list[str] = []
    if not url:
        path = None
        for candidate in podman_socket_candidates(budget("asking podman where its API socket is")):
            refusal = socket_refusal(candidate)
            if refusal is not None:
                notes.append(refusal)
                progress(refusal)
            elif _listening(candidate):
                path = candidate
                break
        if path is not None:
            url = f"unix://{path}"
        else:
            progress("no podman API socket is listening; starting `podman system service` for this run")
            service = PodmanService.start(timeout=budget("starting `podman system service`"))
            url = service.url
    try:
        client = podman.PodmanClient(base_url=url, timeout=budget(f"asking the podman API at {url}"))
        version = str(client.version().get("Version", "unknown"))
        client.api.timeout = budget.timeout  # the per-call limit from here on (run_container sets its own)
    except BaseException as exc:  # podman-py: APIError, requests errors, ValueError for bad URLs; Ctrl-C
        if service is not None:
            service.stop()
        if not isinstance(exc, Exception):
            raise
        explanation = getattr(exc, "explanation", None) or exc
        raise EngineError(f"the podman API did not answer at {url}: {explanation}") from None
    engine = PodmanEngine(client, version, url, service)
    engine.notes = notes
    return engine


def socket_refusal(path: str) -> str | None:
    """Why an engine socket found by looking (not one the user named) is not used: it or its
    directory belongs to another user, whose fake or own engine would answer for this host (as
    root after `sudo -E`, which keeps the user's XDG_RUNTIME_DIR). None: ours or root's."""
    if not hasattr(os, "geteuid"):
        return None
    me = os.geteuid()
    for where in (path, os.path.dirname(path)):
        try:
            owner = os.lstat(where).st_uid
        except OSError:
            continue
        if owner not in (me, 0):
            return (
                f"not using the podman socket {path}: {where} belongs to uid {owner}, not to this user "
                f"(uid {me}); an engine another user runs does not answer for this one (set CONTAINER_HOST "
                "to choose a socket)"
            )
    return None


def _refuse_ssh(variable: str) -> None:
    """Engines are reached over a local socket or TCP only: the ssh transports of podman-py and
    docker-py cannot be bounded by --timeout."""
    url = os.environ.get(variable, "")
    if url.split("://", 1)[0].strip().lower() not in ("ssh", "http+ssh"):
        return
    if variable == "CONTAINER_HOST":
        why = (
            "podman-py waits a fixed 300 s for its ssh tunnel whatever --timeout says, and runs ssh with "
            "StrictHostKeyChecking=no (host keys unchecked)"
        )
    else:
        why = "docker-py's ssh transport (paramiko, not installed with cgpu, or the ssh client) ignores --timeout"
    raise EngineError(
        f"{variable} is an ssh URL ({url}), which cgpu does not use: {why}; forward the engine's socket yourself "
        f"(ssh -NL /tmp/engine.sock:/run/podman/podman.sock HOST) and set {variable}=unix:///tmp/engine.sock"
    )


def podman_socket_candidates(timeout: float) -> list[str]:
    """Where a podman API socket may listen, most specific first: what `podman info` says,
    then the rootful and rootless defaults."""
    candidates = []
    exe = shutil.which("podman")
    if exe:
        try:
            done = run([exe, "info", "--format", "json"], timeout=timeout)
            info = json.loads(decode(done.stdout)) if done.returncode == 0 else {}
            path = ((info.get("host") or {}).get("remoteSocket") or {}).get("path", "")
            candidates.append(path.removeprefix("unix://"))
        except (CommandError, ValueError, AttributeError):
            pass
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        candidates.append("/run/podman/podman.sock")
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        candidates.append(os.path.join(runtime_dir, "podman", "podman.sock"))
    return [c for i, c in enumerate(candidates) if c and c not in candidates[:i]]


def _listening(path: str) -> bool:
    import socket

    if not hasattr(socket, "AF_UNIX"):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        try:
            sock.connect(path)
            return True
        except OSError:
            return False


class PodmanService:
    """`podman system service` on a private socket, for one run (a run.Helper: in its own
    session, so Ctrl-C reaches only cgpu, which then removes its containers and stops it)."""

    # podman finishes its API calls on SIGTERM; one that takes longer is killed.
    STOP_GRACE_S = 10.0

    def __init__(self, helper: Helper, directory: str) -> None:
        self.helper = helper
        self.directory = directory
        self.url = f"unix://{os.path.join(directory, 'podman.sock')}"

    @classmethod
    def start(cls, *, timeout: float) -> PodmanService:
        import tempfile

        exe = shutil.which("podman")
        if exe is None:
            raise EngineError("podman is not installed (no `podman` on PATH) and no podman API socket is listening")
        directory = tempfile.mkdtemp(prefix="cgpu-podman-")
        sock = os.path.join(directory, "podman.sock")
        service = cls(
            Helper([exe, "system", "service", "--time=0", f"unix://{sock}"], stop_grace=cls.STOP_GRACE_S), directory
        )
        try:
            service.helper.start()
            service.helper.wait_for(lambda: _listening(sock) or None, timeout=timeout)
        except CommandError as exc:
            service.stop()
            said = decode(service.helper.output()[-500:]).strip()
            if isinstance(exc, CommandTimeoutError):
                why = said or f"no socket after {timeout:g} s"
            elif isinstance(exc, HelperExitedError):
                why = said or f"exit status {exc.returncode}"
            else:
                why = exc.reason
            raise EngineError(f"`podman system service` did not start: {why}") from None
        except BaseException:  # Ctrl-C included
            service.stop()
            raise
        return service

    def stop(self) -> None:
        self.helper.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
