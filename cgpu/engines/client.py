"""Container engines on this host: which one, which version, and every call cgpu makes to one.

This module is the one door to podman and Docker: no other module imports podman-py or
docker-py or runs the `podman` or `docker` CLI (tests/test_engine_door.py checks). `Engine` is
what cgpu asks of an engine; `PodmanEngine` and `DockerEngine` answer it, each the way that
engine is best asked:
- through its CLI, which needs nothing opened (`local_engine(name)`, or an engine at a given
  address: `PodmanEngine(url=...)`): an image's ID, exporting a local image, running one
  container attached to a pipe, building an image, a podman machine's facts;
- through its API client (`open_engine` connects it and closes it after): the containers
  `--verify` runs, created, fed and removed within a timeout.

Docker's image export talks to the daemon through docker-py (no docker CLI needed). podman-py
and docker-py are imported lazily (each costs ~100 ms, seconds on a busy host), only by the
code that talks to an engine's API.
"""

from __future__ import annotations

import abc
import contextlib
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
from typing import IO, Any, ClassVar, Protocol

from cgpu.errors import CgpuError, CgpuTypeError, CgpuValueError
from cgpu.run import (
    CommandError,
    CommandTimeoutError,
    Completed,
    Helper,
    HelperExitedError,
    decode,
    format_argv,
    run,
)

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
    with the engine's own words where it gave any. `source` names what was asked (for a
    report's problem), `said` is the engine's own words alone."""

    def __init__(self, message: str, *, source: str = "", said: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.said = said


class ContainerTimeout(EngineError):
    pass


class ImageNotFound(EngineError):
    """The engine has no such local image (cgpu never pulls)."""


class EngineUnreachable(EngineError):
    """The engine's CLI could not reach its API (a stopped machine, a dead socket)."""


class ExportTooLarge(EngineError):
    """An image export went past the size cap; it was stopped."""


class DeadlinePassed(EngineError):
    """The run's time limit was used up before the engine was asked."""


class Limit(Protocol):
    """One time limit over a whole command (`cgpu.image.fs.Deadline` is one)."""

    seconds: float | None

    def left(self) -> float | None: ...

    def expired(self) -> bool: ...


NO_SUCH_IMAGE = "has no such local image"
_EXPORT_CHUNK = 1024**2


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


class Engine(abc.ABC):
    """What cgpu asks of one container engine (podman or Docker), whichever it is: callers
    dispatch on these methods, never on the engine's type.

    The CLI half needs nothing opened; the API half (`image_exists`, `import_image`,
    `run_container`, `cdi_refusal`) needs the client `open_engine` connects.
    `run_container` is the whole life of one container: create, copy files in, start, wait
    (with a timeout), read the logs, and remove it on every path."""

    name: ClassVar[str]

    def __init__(self, *, url: str | None = None) -> None:
        self.url = url  # where the CLI is pointed (podman --url, docker --host); None: its default
        self.version = ""
        self.where = url or ""  # the API address, for messages
        self.notes: list[str] = []  # what was passed over on the way (another user's socket), for the report
        self._client: Any = None  # the podman-py or docker-py client, once connected

    @property
    def client(self) -> Any:
        if self._client is None:
            raise EngineError(f"{self.name}'s API is not connected (open_engine connects it)")
        return self._client

    def _connected(self, client: Any, version: str, where: str) -> None:
        self._client = client
        self.version = version
        self.where = where

    def describe(self) -> str:
        return f"{self.name} {self.version}".strip()

    def cdi_refusal(self) -> str | None:
        """Why this engine would not inject CDI devices into a container, or None when it would."""
        return None

    # --- through the CLI ------------------------------------------------------------------

    def executable(self) -> str | None:
        """The engine's CLI on PATH, or None."""
        return shutil.which(self.name)

    def _cli(self, *args: str) -> list[str]:
        # a CLI not on PATH is left to run(), which says "not found" as a CommandError
        return [self.executable() or self.name, *self._address(), *args]

    @abc.abstractmethod
    def _address(self) -> list[str]:
        """The CLI's flags that point it at self.url."""

    @abc.abstractmethod
    def _remove_argv(self, container: str) -> list[str]:
        """The CLI's arguments that remove a container at once, whatever its state."""

    def image_id(self, ref: str, *, timeout: float) -> str:
        """The ID of the local image `ref`: ImageNotFound when there is none, EngineUnreachable
        when the CLI cannot reach the engine, EngineError when it could not be asked."""
        argv = self._cli("image", "inspect", "--format", "{{.Id}}", "--", ref)
        try:
            done = run(argv, timeout=timeout)
        except CommandError as exc:
            raise EngineError(str(exc), source=f"{self.name} image inspect") from None
        stderr = decode(done.stderr).strip()
        if done.returncode != 0 and ("connect" in stderr.lower() or "socket" in stderr.lower()):
            raise EngineUnreachable(f"{self.name} could not reach its API: {stderr[-300:]}", said=stderr[-300:])
        if done.returncode != 0:
            raise ImageNotFound(f"{self.name} {NO_SUCH_IMAGE} {ref}: {stderr[-200:]}", said=stderr[-200:])
        return decode(done.stdout).strip()

    def run_attached(
        self,
        image: str,
        command: list[str],
        *,
        devices: list[str],
        input: bytes,
        timeout: float,
        cleanup_timeout: float,
        name_prefix: str = "cgpu-probe",
    ) -> Completed:
        """`run --rm --interactive` of `command` (its first word replaces the image's entry
        point) with `input` on its stdin, no network, never pulling, these devices. Past
        `timeout`, or on Ctrl-C, the container is removed by name (killing the CLI does not stop
        a container the engine runs, in a VM maybe). EngineError when it could not run."""
        # Named, so that it can be removed when the CLI is killed.
        container = f"{name_prefix}-{uuid.uuid4().hex[:12]}"
        argv = self._cli(
            "run",
            "--rm",
            "--interactive",
            "--name",
            container,
            "--label",
            f"{LABEL_KEY}={labels()[LABEL_KEY]}",
            "--pull=never",
            "--network=none",
            *(arg for device in devices for arg in ("--device", device)),
            "--entrypoint",
            command[0],
            "--",  # an image name is never taken for a flag
            image,
            *command[1:],
        )
        try:
            return run(argv, timeout=timeout, input=input)
        except CommandError as exc:
            self.remove_container(container, timeout=cleanup_timeout)
            raise EngineError(str(exc), source=f"{self.name} run") from None
        except BaseException:  # Ctrl-C
            self.remove_container(container, timeout=cleanup_timeout)
            raise

    def remove_container(self, container: str, *, timeout: float) -> None:
        """Best effort: remove a container (by name or ID) that may still run."""
        try:
            run(self._cli(*self._remove_argv(container)), timeout=timeout)
        except CommandError:
            pass

    def build_image(self, folder: str, tag: str, *, timeout: float, tee: Callable[[bytes], None]) -> Completed:
        """`build -t TAG FOLDER`, its output handed to `tee` as it comes; raises CommandError
        (not found, timed out) as run() does."""
        return run(self._cli("build", "-t", tag, folder), timeout=timeout, tee=tee)

    @abc.abstractmethod
    def save_image(self, ref: str, archive: str, *, deadline: Limit, cap: int, say: Callable[[str], None]) -> None:
        """Export the local image `ref` to a docker-archive at `archive` within `deadline`
        and at most `cap` bytes. Raises ImageNotFound (cgpu never pulls), ExportTooLarge,
        DeadlinePassed (no time left to ask), or EngineError with why it could not be read."""

    @contextmanager
    def mounted_image(self, ref: str, *, deadline: Limit) -> Iterator[tuple[str, dict[str, Any]] | None]:
        """The local image `ref` mounted read-only in place, as (its root folder, its config:
        architecture, os, config), unmounted on exit; None where this engine cannot (the caller
        exports it with `save_image` instead). DeadlinePassed when the limit ran out asking."""
        yield None

    # --- through the API ------------------------------------------------------------------

    @abc.abstractmethod
    def image_exists(self, ref: str) -> bool: ...

    @abc.abstractmethod
    def import_image(self, tar_path: str, ref: str, changes: list[str]) -> None: ...

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
        if self._client is not None:
            self._client.close()

    # engine specifics
    @abc.abstractmethod
    def _create(self, image: str, command: list[str], devices: list[str], name: str) -> Any: ...

    @abc.abstractmethod
    def _wait(self, container: Any, timeout: float) -> int: ...

    @abc.abstractmethod
    def _errors(self) -> tuple[type[BaseException], ...]: ...

    @abc.abstractmethod
    def _message(self, exc: BaseException) -> str: ...

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
        if files:
            self._put_archive(container, tar_archive(files), ", ".join(files))

    def _put_archive(self, container: Any, archive: bytes, names: str) -> None:
        # docker-py raises APIError, with the engine's reason, for a copy the engine refuses
        if not container.put_archive("/", archive):
            raise EngineError(f"{self.name} refused to copy {names} into the container")

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
        if self.executable():
            self.remove_container(container, timeout=max(1.0, deadline - time.monotonic()))


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


@dataclass(frozen=True)
class Machine:
    """A podman machine (`podman machine list`)."""

    name: str
    vm_type: str  # "libkrun", "applehv", ...
    running: bool
    default: bool


class PodmanEngine(Engine):
    name = "podman"

    def __init__(self, *, url: str | None = None, connection: str | None = None) -> None:
        """`url`: a podman API socket for the CLI (`--url`); `connection`: a system connection
        (`--connection`, a podman machine's name)."""
        super().__init__(url=url)
        self.connection = connection
        self._service: PodmanService | None = None  # started for this run by open_engine

    def _address(self) -> list[str]:
        if self.url:
            return ["--url", self.url]
        return ["--connection", self.connection] if self.connection else []

    def _remove_argv(self, container: str) -> list[str]:
        # podman's --force stops a container with its 10 s timeout first; --time 0 kills it at once
        return ["rm", "--force", "--time", "0", "--ignore", container]

    def save_image(self, ref: str, archive: str, *, deadline: Limit, cap: int, say: Callable[[str], None]) -> None:
        """`podman save` (the CLI is present wherever podman is; podman-py would need an API
        service, which a rootful host without systemd does not run)."""
        if self.executable() is None:
            raise EngineError("podman is not installed")
        try:
            exists = run(self._cli("image", "exists", "--", ref), timeout=min(_time_left(deadline), 60))
            if exists.returncode == 1:
                raise ImageNotFound(f"podman {NO_SUCH_IMAGE}")
            say(f"exporting {ref} with podman save")
            done = run(
                self._cli("save", "--format", "docker-archive", "-o", archive, "--", ref),
                timeout=_time_left(deadline),
            )
        except CommandTimeoutError as exc:  # the time left, said as the --timeout it comes from
            seconds = deadline.seconds if deadline.expired() and deadline.seconds is not None else exc.timeout
            raise EngineError(f"{format_argv(exc.argv)}: no answer within {seconds:g} s; it was stopped") from None
        except CommandError as exc:
            raise EngineError(str(exc)) from None
        if exists.returncode != 0 or done.returncode != 0:
            failed = exists if exists.returncode != 0 else done
            verb = failed.argv[len(self._cli())]
            raise EngineError(
                f"`podman {verb}` exited {failed.returncode}: "
                f"{(decode(failed.stderr).strip().splitlines() or [''])[-1][:300]}"
            )

    _MOUNT_TIMEOUT = 30.0  # one command of the mount path; a slower store takes the export path

    @contextmanager
    def mounted_image(self, ref: str, *, deadline: Limit) -> Iterator[tuple[str, dict[str, Any]] | None]:
        """`podman image inspect` for the config and `podman image mount` for the root (root only:
        rootless podman mounts inside `podman unshare` alone), then `podman image unmount`. A few
        tenths of a second where `podman save` of a large image takes minutes."""
        if self.executable() is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
            yield None
            return

        def says(*args: str) -> bytes | None:
            left = deadline.left()
            try:
                done = run(
                    self._cli(*args), timeout=min(self._MOUNT_TIMEOUT, self._MOUNT_TIMEOUT if left is None else left)
                )
            except CommandTimeoutError as exc:
                if deadline.expired():  # the whole read's limit, said as the --timeout it comes from
                    seconds = deadline.seconds if deadline.seconds is not None else exc.timeout
                    raise DeadlinePassed(
                        f"{format_argv(exc.argv)}: no answer within {seconds:g} s; it was stopped"
                    ) from None
                return None
            except CommandError:
                return None
            return done.stdout if done.returncode == 0 else None

        try:
            found = json.loads(says("image", "inspect", "--", ref) or b"null")
        except ValueError:
            found = None
        if not isinstance(found, list) or not found or not isinstance(found[0], dict):
            yield None
            return
        details = found[0]
        settings = details.get("Config")
        config = {
            "architecture": details.get("Architecture") or "",
            "os": details.get("Os") or "",
            "config": settings if isinstance(settings, dict) else {},
        }
        where = decode(says("image", "mount", "--", ref) or b"").strip()
        if not where or not os.path.isdir(where):
            yield None
            return
        try:
            yield where, config
        finally:  # even past the limit: a mount must not outlive the read
            with contextlib.suppress(CommandError):
                run(self._cli("image", "unmount", "--", ref), timeout=self._MOUNT_TIMEOUT)

    # --- podman machines (macOS, Windows: the VM a podman CLI talks to) ---------------------

    def machines(self, *, timeout: float) -> list[Machine]:
        """`podman machine list --format json` (every provider where podman knows the flag)."""
        args = ["machine", "list", "--format", "json", "--all-providers"]
        source = "podman machine list"
        done = self._machine_cli(args, source, timeout=timeout)
        if done.returncode != 0 and "--all-providers" in decode(done.stderr):  # podman < 5.3
            args = args[:-1]
            done = self._machine_cli(args, source, timeout=timeout)
        if done.returncode != 0:
            raise EngineError(f"exited {done.returncode}: {_tail(decode(done.stderr), 5)}", source=source)
        try:
            data = json.loads(done.stdout or b"[]")
            if not isinstance(data, list):
                raise CgpuValueError("not a list")
            return [
                Machine(
                    name=_str(entry["Name"]),
                    vm_type=_str(entry.get("VMType", "")),
                    running=entry.get("Running") is True,
                    default=entry.get("Default") is True,
                )
                for entry in data
            ]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise EngineError(
                f"unreadable output ({type(exc).__name__}: {exc}): {decode(done.stdout)[:200]!r}", source=source
            ) from None

    def machine_socket(self, machine: str, *, timeout: float) -> str:
        """The host-side path of the machine's podman API socket (`podman machine inspect`)."""
        source = f"podman machine inspect {machine}"
        done = self._machine_cli(["machine", "inspect", machine], source, timeout=timeout)
        if done.returncode != 0:
            raise EngineError(f"exited {done.returncode}: {_tail(decode(done.stderr), 5)}", source=source)
        try:
            data = json.loads(done.stdout)
            path = data[0]["ConnectionInfo"]["PodmanSocket"]["Path"]
            if not isinstance(path, str) or not path:
                raise CgpuValueError("no socket path")
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise EngineError(f"no API socket in its output ({type(exc).__name__}: {exc})", source=source) from None
        return path

    def _machine_cli(self, args: list[str], source: str, *, timeout: float) -> Completed:
        try:
            return run(self._cli(*args), timeout=timeout)
        except CommandError as exc:
            raise EngineError(str(exc), source=source) from None

    # --- through the API ------------------------------------------------------------------

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

    def _put_archive(self, container: Any, archive: bytes, names: str) -> None:
        # podman-py's put_archive answers True or False alone: the request keeps podman's reason
        response = container.client.put(f"/containers/{container.id}/archive", params={"path": "/"}, data=archive)
        if not response.ok:
            raise EngineError(f"podman refused to copy {names} into the container: {_copy_refusal(response)}")

    def _message(self, exc: BaseException) -> str:
        explanation = getattr(exc, "explanation", None)
        if explanation and "operation failed" not in str(explanation):
            return str(explanation).strip()
        cause = exc.__cause__ or exc
        return f"no answer from the podman API at {self.where}: {cause}"

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._service is not None:
                self._service.stop()


class DockerEngine(Engine):
    name = "docker"

    def __init__(self, *, url: str | None = None) -> None:
        super().__init__(url=url)
        # Set when the "Docker" API is podman's Docker-compatible one.
        self.podman_version: str | None = None

    def _address(self) -> list[str]:
        return ["--host", self.url] if self.url else []

    def _remove_argv(self, container: str) -> list[str]:
        return ["rm", "--force", container]  # docker's --force kills it at once

    def save_image(self, ref: str, archive: str, *, deadline: Limit, cap: int, say: Callable[[str], None]) -> None:
        """docker-py's export, in a worker thread so that the deadline holds even while the daemon
        sends nothing (its socket timeout applies per read, not to the whole export) and while
        `import docker` itself takes seconds (a busy host): the worker imports it too. Past the
        deadline the worker writes nothing more."""
        host = self.url or os.environ.get("DOCKER_HOST")
        if not host and not os.path.exists("/var/run/docker.sock"):
            raise EngineError("no Docker daemon (DOCKER_HOST unset, no /var/run/docker.sock)")
        stop = threading.Event()
        outcome: list[str | BaseException | bool] = []  # a reason the image was not read, an error, or True

        def export(out: IO[bytes]) -> None:
            try:
                outcome.append(_docker_export(ref, out, deadline, cap, stop, say, host=self.url))
            except BaseException as exc:  # handed to the waiting thread
                outcome.append(exc)

        # opened here, not by the worker: a worker still waiting on the daemon creates nothing in the
        # folder being removed; it can only write into this file, already unlinked by then
        with open(archive, "wb") as out:
            worker = threading.Thread(target=export, args=(out,), name="cgpu-docker-save", daemon=True)
            worker.start()
            try:
                worker.join(deadline.left())
            finally:
                stop.set()  # also on Ctrl-C
        if worker.is_alive() or (outcome and outcome[0] is False):
            raise EngineError(f"Docker: no complete export within --timeout {deadline.seconds:g} s; stopped")
        result = outcome[0] if outcome else None
        if isinstance(result, str):
            raise (ImageNotFound if NO_SUCH_IMAGE in result else EngineError)(result)
        if isinstance(result, BaseException):
            raise result

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


def _docker_export(
    name: str,
    out: IO[bytes],
    deadline: Limit,
    cap: int,
    stop: threading.Event,
    say: Callable[[str], None],
    *,
    host: str | None = None,
) -> str | bool:
    """The export worker's part: True when the whole export is in `out`, False when stopped at
    the deadline, or why the image could not be read from Docker."""
    try:
        import docker
        import requests
    except ImportError:
        return "the docker Python package is not installed"
    try:
        left = deadline.left()
        # the seconds as given, 0.5 stays 0.5 (docker-py's own default without a deadline)
        options: dict[str, Any] = {"timeout": max(left, 0.01)} if left is not None else {}
        client = docker.DockerClient(base_url=host, **options) if host else docker.from_env(**options)
        try:
            image = client.images.get(name)
            say(f"exporting {name} from Docker")
            written = 0
            for chunk in image.save(chunk_size=_EXPORT_CHUNK, named=True):
                written += len(chunk)
                if stop.is_set() or deadline.expired():
                    return False
                if written > cap:
                    raise ExportTooLarge(f"Docker's export of {name} is larger than {cap} bytes; stopped")
                out.write(chunk)
        finally:
            client.close()
    except docker.errors.ImageNotFound:
        return f"Docker {NO_SUCH_IMAGE}"
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        return f"Docker: {exc}"
    return True


def _time_left(deadline: Limit) -> float:
    left = deadline.left()
    if left is None:
        return 24 * 3600.0
    if left <= 0:
        raise DeadlinePassed("the run's time limit was used up before exporting the image")
    return left


def _tail(text: str, lines: int) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise CgpuTypeError(f"expected a string, got {type(value).__name__}")
    return value


def local_engine(name: str) -> Engine:
    """The engine `name` ("podman" or "docker") on this host, reached through its CLI (and, for
    Docker's export, docker-py); nothing is opened until a method asks."""
    engines: dict[str, type[PodmanEngine] | type[DockerEngine]] = {"podman": PodmanEngine, "docker": DockerEngine}
    return engines[name]()


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
    engine = DockerEngine()
    engine._connected(client, str(version.get("Version", "unknown")), client.api.base_url)
    engine.podman_version = podman_version
    return engine


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
    engine = PodmanEngine()
    engine._connected(client, version, url)
    engine._service = service
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


def tar_archive(files: dict[str, bytes]) -> bytes:
    """`files` (container path -> content) as a tar archive that ends with its two end-of-archive
    blocks. tarfile pads an archive to 10 KiB records; podman's archive endpoint pipes the body to
    a tar reader that stops at those blocks, and the padding still being written then fails the
    copy with "broken pipe", most often on a busy host (containers/buildah#6573; the fix other
    clients made: testcontainers-dotnet#1684)."""
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
        end = buffer.tell() + 2 * tarfile.BLOCKSIZE  # what closing adds before the record padding
    return buffer.getvalue()[:end]


def _copy_refusal(response: Any) -> str:
    """podman's reason for a refused archive copy, without the copier request it dumps before it
    ("error during bulk transfer for copier.request{...}: reading tar stream: ...")."""
    try:
        message = str(response.json().get("message") or "")
    except (ValueError, AttributeError):
        message = ""
    if "copier.request{" in message:
        message = message.rpartition("}: ")[2]
    return message.strip()[:300] or f"HTTP {response.status_code}"
