"""Where an image comes from: a local engine's storage, an archive, an OCI layout or a rootfs.

REF forms (the transport names follow skopeo's):
  NAME[:TAG]                 a local podman image, else a local Docker image (never pulled)
  containers-storage:NAME    podman only;  docker-daemon:NAME  Docker only
  oci-archive:PATH           `podman save --format oci-archive`, `skopeo copy ... oci-archive:`
  docker-archive:PATH        `docker save`, `podman save` (the default format)
  oci:PATH                   an OCI image layout directory
  dir:PATH                   a root filesystem tree on disk (e.g. `podman image mount`'s output)

A local podman image is exported with `podman save` (the CLI is present wherever podman is;
podman-py would need an API service, which a rootful host without systemd does not run, and as
root podman-py does not even look for /run/podman/podman.sock). A Docker image is exported with
docker-py, which talks to the daemon's socket and needs no docker CLI.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from cgpu.files import NotRegularFileError, open_regular
from cgpu.image.fs import DirTree, ImageReadError, LayerTree, Limits, Tree, normalize_member
from cgpu.run import CommandError, decode, run

DEFAULT_TIMEOUT = 300.0  # exporting a multi-GB image from engine storage takes a while
_DIGEST = re.compile(r"^([a-z0-9]+(?:[+._-][a-z0-9]+)*):([a-zA-Z0-9=_-]{32,})$")
_INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_META_LIMIT = 16 * 1024**2  # manifest, index and config JSON
_NOT_HERE = "has no such local image"


@dataclass
class OpenedImage:
    tree: Tree
    source: str  # what was read, in words
    config: dict[str, Any] = field(default_factory=dict)  # the OCI image config, when there is one
    notes: list[tuple[str, str]] = field(default_factory=list)  # (severity, message)

    @property
    def architecture(self) -> str | None:
        arch = self.config.get("architecture")
        return arch if isinstance(arch, str) and arch else None

    @property
    def env(self) -> dict[str, str]:
        settings = self.config.get("config")
        values = settings.get("Env") if isinstance(settings, dict) else None
        env: dict[str, str] = {}
        for item in values if isinstance(values, list) else []:
            if isinstance(item, str) and "=" in item:
                key, _, value = item.partition("=")
                env[key] = value
        return env


@contextmanager
def open_image(
    ref: str,
    *,
    timeout: float | None = None,
    limits: Limits | None = None,
    progress: Callable[[str], None] | None = None,
) -> Iterator[OpenedImage]:
    """Read REF into an OpenedImage; ImageReadError when it cannot be read. Temp files go on exit."""
    say = progress or (lambda message: None)
    transport, _, rest = ref.partition(":")
    if transport in ("dir", "oci-archive", "docker-archive", "oci") and not rest:
        raise ImageReadError(f"{ref!r}: give a path after '{transport}:'")
    if transport == "dir":
        yield OpenedImage(DirTree(rest), f"root filesystem {rest}")
    elif transport == "oci":
        yield _read_layout(_DirBlobs(rest), f"OCI layout {rest}", limits, say)
    elif transport in ("oci-archive", "docker-archive"):
        with _TarBlobs(rest) as blobs:
            reader = _read_layout if transport == "oci-archive" else _read_docker_archive
            yield reader(blobs, f"{transport} {rest}", limits, say)
    else:
        engines = {"containers-storage": ("podman",), "docker-daemon": ("docker",)}.get(transport)
        name = rest if engines else ref
        with tempfile.TemporaryDirectory(prefix="cgpu-image-") as tmp:
            archive, source = _export(name, engines or ("podman", "docker"), tmp, timeout or DEFAULT_TIMEOUT, say)
            with _TarBlobs(archive) as blobs:
                yield _read_docker_archive(blobs, source, limits, say)


# --- exporting from an engine -------------------------------------------------------------


def _export(
    name: str, engines: tuple[str, ...], tmp: str, timeout: float, say: Callable[[str], None]
) -> tuple[str, str]:
    """Save a local image to a docker-archive in tmp; returns (path, what was read)."""
    archive = os.path.join(tmp, "image.tar")
    tried: list[str] = []
    for engine in engines:
        exporter = _podman_save if engine == "podman" else _docker_save
        found = exporter(name, archive, timeout, say, tried)
        if found:
            return archive, f"{engine} image {name}"
    hint = ""
    if any(_NOT_HERE in attempt for attempt in tried):
        hint = f". cgpu never pulls: `podman pull {name}` (or `docker pull`) first, or give an archive"
    raise ImageReadError(f"image {name!r} could not be read: {'; '.join(tried)}{hint}")


def _podman_save(name: str, archive: str, timeout: float, say: Callable[[str], None], tried: list[str]) -> bool:
    podman = shutil.which("podman")
    if podman is None:
        tried.append("podman is not installed")
        return False
    try:
        exists = run([podman, "image", "exists", "--", name], timeout=min(timeout, 60))
        if exists.returncode == 1:
            tried.append(f"podman {_NOT_HERE}")
            return False
        say(f"exporting {name} with podman save")
        done = run([podman, "save", "--format", "docker-archive", "-o", archive, "--", name], timeout=timeout)
    except CommandError as exc:
        tried.append(str(exc))
        return False
    if exists.returncode != 0 or done.returncode != 0:
        failed = exists if exists.returncode != 0 else done
        tried.append(
            f"`podman {failed.argv[1]}` exited {failed.returncode}: "
            f"{(decode(failed.stderr).strip().splitlines() or [''])[-1][:300]}"
        )
        return False
    return True


def _docker_save(name: str, archive: str, timeout: float, say: Callable[[str], None], tried: list[str]) -> bool:
    host = os.environ.get("DOCKER_HOST")
    if not host and not os.path.exists("/var/run/docker.sock"):
        tried.append("no Docker daemon (DOCKER_HOST unset, no /var/run/docker.sock)")
        return False
    try:
        import docker
        import requests
    except ImportError:
        tried.append("the docker Python package is not installed")
        return False
    try:
        client = docker.from_env(timeout=int(timeout))
        try:
            image = client.images.get(name)
            say(f"exporting {name} from Docker")
            with open(archive, "wb") as out:
                for chunk in image.save(named=True):
                    out.write(chunk)
        finally:
            client.close()
    except docker.errors.ImageNotFound:
        tried.append(f"Docker {_NOT_HERE}")
        return False
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        tried.append(f"Docker: {exc}")
        return False
    return True


# --- blob stores: a tar archive or a directory ----------------------------------------------


class _TarBlobs:
    """The files of an outer archive by name; nothing is extracted."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: IO[bytes] | None = None
        self._tar: tarfile.TarFile | None = None
        self._members: dict[str, tarfile.TarInfo] = {}

    def __enter__(self) -> _TarBlobs:
        try:
            self._file = _open_regular(self.path)
            self._tar = tarfile.open(fileobj=self._file, mode="r:*")
            for member in self._tar:
                name, _ = normalize_member(member.name)
                if name and (member.isfile() or member.issym() or member.islnk()):
                    self._members[name] = member
        except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
            self.__exit__()
            why = str(exc).strip() or type(exc).__name__
            if "\n" in why:  # tarfile lists every compression it tried, one per line
                why = "neither a tar archive nor a gzip, bzip2 or xz compressed one"
            raise ImageReadError(f"{self.path}: not a readable tar archive ({why})") from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tar is not None:
            self._tar.close()
        if self._file is not None:
            self._file.close()

    def open(self, name: str) -> IO[bytes]:
        assert self._tar is not None
        path, _ = normalize_member(name)
        member = self._members.get(path) if path else None
        for _ in range(8):  # `docker save` links a repeated layer to its first copy
            if member is None or member.isfile():
                break
            target = (
                posixpath.join(posixpath.dirname(path or ""), member.linkname) if member.issym() else member.linkname
            )
            path = posixpath.normpath(target)
            member = None if path.startswith("../") else self._members.get(path)
        stream = self._tar.extractfile(member) if member is not None and member.isfile() else None
        if stream is None:
            raise ImageReadError(f"{self.path}: no file {name!r} in the archive")
        return stream

    def size(self, name: str) -> int:
        path, _ = normalize_member(name)
        member = self._members.get(path or "")
        return member.size if member is not None else 0


class _DirBlobs:
    def __init__(self, path: str) -> None:
        self.path = path
        if not os.path.isdir(path):
            raise ImageReadError(f"{path} is not a directory")

    def open(self, name: str) -> IO[bytes]:
        path, _ = normalize_member(name)
        if not path:
            raise ImageReadError(f"{self.path}: bad blob name {name!r}")
        try:
            return _open_regular(os.path.join(self.path, path))
        except OSError as exc:
            raise ImageReadError(f"{self.path}: cannot open {name!r} ({exc.strerror or exc})") from None

    def size(self, name: str) -> int:
        try:
            return os.path.getsize(os.path.join(self.path, name))
        except OSError:
            return 0


def _open_regular(path: str) -> IO[bytes]:
    try:
        return open_regular(path)
    except NotRegularFileError:
        raise ImageReadError(
            f"{path}: not a regular file (a directory, FIFO, socket or device); cgpu does not read it"
        ) from None


def _json(blobs: _TarBlobs | _DirBlobs, name: str, what: str) -> Any:
    with blobs.open(name) as f:
        raw = f.read(_META_LIMIT + 1)
    if len(raw) > _META_LIMIT:
        raise ImageReadError(f"{what} {name} is larger than {_META_LIMIT} bytes")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ImageReadError(f"{what} {name} is not valid JSON ({exc})") from None


def _blob_name(digest: Any) -> str:
    match = _DIGEST.match(digest) if isinstance(digest, str) else None
    if match is None:
        raise ImageReadError(f"bad digest {digest!r}")
    return f"blobs/{match.group(1)}/{match.group(2)}"


# --- the two archive layouts ---------------------------------------------------------------


def _read_docker_archive(
    blobs: _TarBlobs | _DirBlobs, source: str, limits: Limits | None, say: Callable[[str], None]
) -> OpenedImage:
    manifest = _json(blobs, "manifest.json", "docker-archive manifest")
    if not isinstance(manifest, list) or not manifest or not isinstance(manifest[0], dict):
        raise ImageReadError(f"{source}: manifest.json is not a list of images")
    notes = []
    if len(manifest) > 1:
        notes.append(("info", f"{source} holds {len(manifest)} images; checked the first"))
    entry = manifest[0]
    layers = entry.get("Layers")
    if (
        not isinstance(entry.get("Config"), str)
        or not isinstance(layers, list)
        or not all(isinstance(layer, str) for layer in layers)
    ):
        raise ImageReadError(f"{source}: manifest.json lacks Config or Layers")
    config = _json(blobs, entry["Config"], "image config")
    tree = _apply_layers(blobs, [(layer, "") for layer in layers], limits, say)
    tags = entry.get("RepoTags")
    if isinstance(tags, list) and tags and isinstance(tags[0], str) and tags[0] not in source:
        source = f"{source} ({tags[0]})"
    return OpenedImage(tree, source, config if isinstance(config, dict) else {}, notes + tree.problems)


def _read_layout(
    blobs: _TarBlobs | _DirBlobs, source: str, limits: Limits | None, say: Callable[[str], None]
) -> OpenedImage:
    index = _json(blobs, "index.json", "OCI index")
    notes: list[tuple[str, str]] = []
    manifest = _pick_manifest(blobs, index, notes, depth=0)
    config_desc = manifest.get("config")
    layers = manifest.get("layers")
    if (
        not isinstance(config_desc, dict)
        or not isinstance(layers, list)
        or not all(isinstance(layer, dict) for layer in layers)
    ):
        raise ImageReadError(f"{source}: the image manifest lacks config or layers")
    config = _json(blobs, _blob_name(config_desc.get("digest")), "image config")
    names = [(_blob_name(layer.get("digest")), str(layer.get("mediaType", ""))) for layer in layers]
    tree = _apply_layers(blobs, names, limits, say)
    return OpenedImage(tree, source, config if isinstance(config, dict) else {}, notes + tree.problems)


def _pick_manifest(
    blobs: _TarBlobs | _DirBlobs, index: Any, notes: list[tuple[str, str]], depth: int
) -> dict[str, Any]:
    """The image manifest for linux/arm64 (what a krunkit VM runs), else the first one."""
    descriptors = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(descriptors, list) or not descriptors or depth > 4:
        raise ImageReadError("the OCI index lists no image manifest")
    descriptors = [d for d in descriptors if isinstance(d, dict)]
    chosen = next(
        (
            d
            for d in descriptors
            if isinstance(d.get("platform"), dict)
            and d["platform"].get("os") == "linux"
            and d["platform"].get("architecture") == "arm64"
        ),
        descriptors[0] if descriptors else None,
    )
    if chosen is None:
        raise ImageReadError("the OCI index lists no image manifest")
    if len(descriptors) > 1:
        platform = chosen.get("platform") or {}
        notes.append(
            (
                "info",
                f"the index lists {len(descriptors)} manifests; checked "
                f"{platform.get('os', '?')}/{platform.get('architecture', '?')}",
            )
        )
    document = _json(blobs, _blob_name(chosen.get("digest")), "manifest")
    if not isinstance(document, dict):
        raise ImageReadError("an OCI manifest is not a JSON object")
    if chosen.get("mediaType") in _INDEX_TYPES or document.get("mediaType") in _INDEX_TYPES:
        return _pick_manifest(blobs, document, notes, depth + 1)
    return document


def _apply_layers(
    blobs: _TarBlobs | _DirBlobs, layers: list[tuple[str, str]], limits: Limits | None, say: Callable[[str], None]
) -> LayerTree:
    tree = LayerTree(limits)
    if sum(blobs.size(name) for name, _ in layers) > 256 * 1024**2:
        say(f"reading {len(layers)} layers")
    for number, (name, media_type) in enumerate(layers, 1):
        label = f"{number}/{len(layers)} ({name})"
        if "zstd" in media_type:
            raise ImageReadError(
                f"layer {label} is zstd-compressed, which this Python cannot read; "
                "re-save the image with gzip layers or uncompressed"
            )
        with blobs.open(name) as stream:
            if stream.read(4) == _ZSTD_MAGIC:
                raise ImageReadError(f"layer {label} is zstd-compressed, which this Python cannot read")
            stream.seek(0)
            tree.add_layer(stream, label)
    return tree
