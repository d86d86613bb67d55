"""Where an image comes from: a local engine's storage, an archive, an OCI layout or a rootfs.

REF forms (the transport names follow skopeo's):
  NAME[:TAG]                 a local podman image, else a local Docker image (never pulled)
  containers-storage:NAME    podman only;  docker-daemon:NAME  Docker only
  oci-archive:PATH           `podman save --format oci-archive`, `skopeo copy ... oci-archive:`
  docker-archive:PATH        `docker save`, `podman save` (the default format)
  oci:PATH                   an OCI image layout directory
  dir:PATH                   a root filesystem tree on disk (e.g. `podman image mount`'s output)

A local image is exported by its engine (`cgpu.engines.client`, `Engine.save_image`): podman's with
`podman save` (podman-py would need an API service, which a rootful host without systemd does
not run), Docker's with docker-py, which talks to the daemon's socket and needs no docker CLI.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import io
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from cgpu.errors import CgpuValueError
from cgpu.image.fs import (
    Deadline,
    DeadlineExceeded,
    DirTree,
    ImageReadError,
    Layer,
    LayerTree,
    Limits,
    Tree,
    normalize_member,
)
from cgpu.image.tarstream import READ_ERRORS, Member, TarReader, decompressed
from cgpu.node.files import NotRegularFileError, open_regular
from cgpu.problem import Note

_DIGEST = re.compile(r"^([a-z0-9]+(?:[+._-][a-z0-9]+)*):([a-zA-Z0-9=_-]{32,})$")
_BLOB_PATH = re.compile(r"^blobs/(sha256|sha512)/([0-9a-f]{64}|[0-9a-f]{128})$")
_INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
_META_LIMIT = 16 * 1024**2  # manifest, index and config JSON
_ARCHIVE_MEMBERS = 10_000  # an image archive holds a few files per layer
_CHUNK = 1024**2


@dataclass
class OpenedImage:
    tree: Tree
    source: str  # what was read, in words
    config: dict[str, Any] = field(default_factory=dict)  # the OCI image config, when there is one
    notes: list[Note] = field(default_factory=list)  # (severity, message)

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


# The image reference grammar of distribution/reference (what podman and Docker accept): an
# optional registry host[:port], lower-case path components, an optional :tag and @digest; an
# image ID (hex) is a name too.
_REFERENCE = re.compile(
    r"(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:.]+\])"
    r"(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
_PATH_TRANSPORTS = ("dir", "oci-archive", "docker-archive", "oci")
_ENGINE_TRANSPORTS = ("containers-storage", "docker-daemon")


def check_reference(ref: str) -> None:
    """CgpuValueError when REF is not an image reference at all (bad usage, not an unreadable image):
    a path transport without its path, or an engine image name outside the reference grammar."""
    transport, _, rest = ref.partition(":")
    if transport in _PATH_TRANSPORTS:
        if not rest:
            raise CgpuValueError(f"{ref!r}: give a path after '{transport}:'")
        return
    name = rest if transport in _ENGINE_TRANSPORTS else ref
    if not _REFERENCE.fullmatch(name) and not re.fullmatch(r"sha256:[0-9a-f]{64}", name):
        raise CgpuValueError(
            f"{ref!r} is not an image reference: give NAME[:TAG] (lower-case NAME, e.g. localhost/my-app:latest), "
            "or a transport such as oci-archive:PATH or dir:PATH"
        )


@contextmanager
def open_image(
    ref: str,
    *,
    deadline: Deadline | None = None,
    limits: Limits | None = None,
    progress: Callable[[str], None] | None = None,
) -> Iterator[OpenedImage]:
    """Read REF into an OpenedImage within the deadline and limits; ImageReadError when it
    cannot be read. Temp files go on exit."""
    say = progress or (lambda message: None)
    deadline = deadline or Deadline(None)
    limits = limits or Limits()
    transport, _, rest = ref.partition(":")
    if transport in ("dir", "oci-archive", "docker-archive", "oci") and not rest:
        raise ImageReadError(f"{ref!r}: give a path after '{transport}:'")
    if transport == "dir":
        yield OpenedImage(DirTree(rest, deadline), f"root filesystem {rest}")
    elif transport == "oci":
        yield _read_layout(_DirBlobs(rest, deadline), f"OCI layout {rest}", limits, say)
    elif transport in ("oci-archive", "docker-archive"):
        with _TarBlobs(rest, deadline) as blobs:
            reader = _read_layout if transport == "oci-archive" else _read_docker_archive
            yield reader(blobs, f"{transport} {rest}", limits, say)
    else:
        engines = {"containers-storage": ("podman",), "docker-daemon": ("docker",)}.get(transport)
        name = rest if engines else ref
        if "podman" in (engines or ("podman",)):
            with _mounted_podman_image(name, deadline) as mounted:
                if mounted is not None:
                    yield mounted
                    return
        with tempfile.TemporaryDirectory(prefix="cgpu-image-") as tmp:
            archive, source = _export(name, engines or ("podman", "docker"), tmp, deadline, limits, say)
            with _TarBlobs(archive, deadline) as blobs:
                yield _read_docker_archive(blobs, source, limits, say)


# --- exporting from an engine -------------------------------------------------------------


@contextmanager
def _mounted_podman_image(name: str, deadline: Deadline) -> Iterator[OpenedImage | None]:
    """A local podman image read in place (`Engine.mounted_image`), or None where it cannot be: the
    caller exports it instead. Reading in place costs a few tenths of a second; exporting a large
    image, minutes."""
    from cgpu.engines.client import DeadlinePassed, local_engine

    try:
        with local_engine("podman").mounted_image(name, deadline=deadline) as mounted:
            if mounted is None:
                yield None
                return
            root, config = mounted
            yield OpenedImage(DirTree(root, deadline), f"podman image {name}", config)
    except DeadlinePassed as exc:
        raise ImageReadError(f"image {name!r} could not be read: {exc}") from None


def _export(
    name: str, engines: tuple[str, ...], tmp: str, deadline: Deadline, limits: Limits, say: Callable[[str], None]
) -> tuple[str, str]:
    """Save a local image to a docker-archive in tmp; returns (path, what was read)."""
    from cgpu.engines.client import DeadlinePassed, EngineError, ExportTooLarge, ImageNotFound, local_engine

    archive = os.path.join(tmp, "image.tar")
    tried: list[str] = []
    missing = False
    for engine in map(local_engine, engines):
        try:
            engine.save_image(name, archive, deadline=deadline, cap=limits.max_total_bytes, say=say)
        except DeadlinePassed as exc:
            deadline.check("exporting the image")  # DeadlineExceeded, as everywhere in an image check
            tried.append(str(exc))
        except ExportTooLarge as exc:
            raise ImageReadError(str(exc)) from None
        except ImageNotFound as exc:
            missing = True
            tried.append(str(exc))
        except EngineError as exc:
            tried.append(str(exc))
        else:
            return archive, f"{engine.name} image {name}"
    hint = ""
    if missing:
        hint = f". cgpu never pulls: `podman pull {name}` (or `docker pull`) first, or give an archive"
    raise ImageReadError(f"image {name!r} could not be read: {'; '.join(tried)}{hint}")


# --- blob stores: a tar archive or a directory ----------------------------------------------


class _Blob(io.RawIOBase):
    """One blob's bytes, read forward: the deadline asked on every read; where the blob is named
    by its digest (`blobs/sha256/HEX`), what was read must hash to it (checked by finish())."""

    def __init__(
        self, file: IO[bytes], offset: int, size: int, name: str, deadline: Deadline, *, owned: bool = False
    ) -> None:
        super().__init__()
        self._file, self._offset, self._size, self._done = file, offset, size, 0
        self._owned = owned  # a file of its own (a layout's), not the archive every blob is read from
        self.name = name
        self._deadline = deadline
        match = _BLOB_PATH.match(name)
        self._expected = match.group(2) if match else None
        self._hash = hashlib.new(match.group(1)) if match else None

    @property
    def size(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if self._owned:
            self._file.close()
        super().close()

    def readinto(self, buffer: Any) -> int:
        self._deadline.check()
        want = min(len(buffer), self._size - self._done)
        if want <= 0:
            return 0
        self._file.seek(self._offset + self._done)
        data = self._file.read(want)
        if not data:
            raise ImageReadError(f"{self.name}: the file ends before its {self._size} bytes")
        buffer[: len(data)] = data
        self._done += len(data)
        if self._hash is not None:
            self._hash.update(data)
        return len(data)

    def finish(self) -> None:
        """Read what is left, and check the digest."""
        while self.readinto(bytearray(min(_CHUNK, self._size - self._done) or 1)):
            pass
        if self._hash is not None and self._hash.hexdigest() != self._expected:
            raise ImageReadError(
                f"{self.name}: its content does not match its digest ({self._hash.name} "
                f"{self._hash.hexdigest()[:16]}...); "
                "the blob is damaged or was replaced"
            )


class _TarBlobs:
    """The files of an outer archive by name; nothing is extracted, each is read in place."""

    def __init__(self, path: str, deadline: Deadline) -> None:
        self.path = path
        self.deadline = deadline
        self._file: IO[bytes] | None = None
        self._stream: IO[bytes] | None = None
        self._members: dict[str, Member] = {}

    def __enter__(self) -> _TarBlobs:
        try:
            self._file = _open_regular(self.path)
            self._stream = decompressed(self._file)
            reader = TarReader(self._stream, max_size=2**63, tick=self.deadline.check, seekable=True)
            for member in reader:
                name, _ = normalize_member(member.name)
                if name and member.kind in ("file", "symlink", "hardlink"):
                    self._members[name] = member
                if len(self._members) > _ARCHIVE_MEMBERS:
                    raise ImageReadError(f"{self.path}: more than {_ARCHIVE_MEMBERS} files; not an image archive")
        except READ_ERRORS as exc:
            self.__exit__()
            raise ImageReadError(f"{self.path}: not a readable tar archive ({_why(exc)})") from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self._stream, self._file):
            if stream is not None:
                stream.close()

    def open(self, name: str) -> _Blob:
        assert self._stream is not None
        member = self._find(name)
        return _Blob(self._stream, member.offset, member.size, name, self.deadline)

    def identity(self, name: str) -> object:
        """The same for names that lead to the same bytes (`docker save` links repeated layers)."""
        return self._find(name).offset

    def _find(self, name: str) -> Member:
        path, _ = normalize_member(name)
        member = self._members.get(path) if path else None
        for _ in range(8):  # `docker save` links a repeated layer to its first copy
            if member is None or member.kind == "file":
                break
            target = (
                os.path.join(os.path.dirname(path or ""), member.linkname)
                if member.kind == "symlink"
                else member.linkname
            )
            path = os.path.normpath(target).replace(os.sep, "/")
            member = None if path.startswith("../") else self._members.get(path)
        if member is None or member.kind != "file":
            raise ImageReadError(f"{self.path}: no file {name!r} in the archive")
        return member


class _DirBlobs:
    """The files of an OCI layout directory; no symlink is followed, inside or out of it."""

    def __init__(self, path: str, deadline: Deadline) -> None:
        self.path = path
        self.deadline = deadline
        if not os.path.isdir(path):
            raise ImageReadError(f"{path} is not a directory")

    def open(self, name: str) -> _Blob:
        path, _ = normalize_member(name)
        if not path:
            raise ImageReadError(f"{self.path}: bad blob name {name!r}")
        try:
            file = _open_inside(self.path, path)
        except NotRegularFileError:
            raise ImageReadError(
                f"{self.path}/{path}: not a regular file (a directory, FIFO, socket or device); cgpu does not read it"
            ) from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) or _has_link(self.path, path):
                raise ImageReadError(
                    f"{self.path}/{path} is a symlink (or lies under one); cgpu reads no blob from outside the layout"
                ) from None
            raise ImageReadError(f"{self.path}: cannot open {name!r} ({exc.strerror or exc})") from None
        return _Blob(file, 0, os.fstat(file.fileno()).st_size, path, self.deadline, owned=True)

    def identity(self, name: str) -> object:
        return normalize_member(name)[0]


def _open_inside(root: str, path: str) -> IO[bytes]:
    """Open root/path, refusing a symlink at any step below root and anything not a regular file."""
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    if not nofollow or os.open not in os.supports_dir_fd:  # Windows: look at each step first
        if _has_link(root, path):
            raise OSError(errno.ELOOP, "a symlink", path)
        return open_regular(os.path.join(root, *path.split("/")))
    parts = path.split("/")
    folder = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=folder)
            os.close(folder)
            folder = inner
        fd = os.open(parts[-1], os.O_RDONLY | nofollow | os.O_NONBLOCK, dir_fd=folder)
    finally:
        os.close(folder)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFileError(path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _has_link(root: str, path: str) -> bool:
    here = root
    for part in path.split("/"):
        here = os.path.join(here, part)
        try:
            if stat.S_ISLNK(os.lstat(here).st_mode):
                return True
        except OSError:
            return False
    return False


def _open_regular(path: str) -> IO[bytes]:
    try:
        return open_regular(path)
    except NotRegularFileError:
        raise ImageReadError(
            f"{path}: not a regular file (a directory, FIFO, socket or device); cgpu does not read it"
        ) from None


def _json(blobs: _TarBlobs | _DirBlobs, name: str, what: str) -> Any:
    with blobs.open(name) as blob:
        if blob.size > _META_LIMIT:
            raise ImageReadError(f"{what} {name} is larger than {_META_LIMIT} bytes")
        raw = blob.read(blob.size)
        blob.finish()
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ImageReadError(f"{what} {name} is not valid JSON ({exc})") from None


def _blob_name(digest: Any) -> str:
    match = _DIGEST.match(digest) if isinstance(digest, str) else None
    if match is None:
        raise ImageReadError(f"bad digest {digest!r}")
    return f"blobs/{match.group(1)}/{match.group(2)}"


def _why(exc: BaseException) -> str:
    why = str(exc).strip() or type(exc).__name__
    if "\n" in why:
        why = why.splitlines()[0]
    return why


# --- the two archive layouts ---------------------------------------------------------------


def _read_docker_archive(
    blobs: _TarBlobs | _DirBlobs, source: str, limits: Limits, say: Callable[[str], None]
) -> OpenedImage:
    manifest = _json(blobs, "manifest.json", "docker-archive manifest")
    if not isinstance(manifest, list) or not manifest or not isinstance(manifest[0], dict):
        raise ImageReadError(f"{source}: manifest.json is not a list of images")
    notes: list[Note] = []
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
    return OpenedImage(tree, source, config if isinstance(config, dict) else {}, notes + tree.notes)


def _read_layout(blobs: _TarBlobs | _DirBlobs, source: str, limits: Limits, say: Callable[[str], None]) -> OpenedImage:
    index = _json(blobs, "index.json", "OCI index")
    notes: list[Note] = []
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
    return OpenedImage(tree, source, config if isinstance(config, dict) else {}, notes + tree.notes)


def _pick_manifest(blobs: _TarBlobs | _DirBlobs, index: Any, notes: list[Note], depth: int) -> dict[str, Any]:
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
    blobs: _TarBlobs | _DirBlobs, layers: list[tuple[str, str]], limits: Limits, say: Callable[[str], None]
) -> LayerTree:
    """Each distinct blob read once (a manifest may list one layer many times), then applied in order."""
    if len(layers) > limits.max_layers:
        raise ImageReadError(f"the manifest lists {len(layers)} layers, more than {limits.max_layers}; not read")
    tree = LayerTree(limits, blobs.deadline)
    uses = collections.Counter(blobs.identity(name) for name, _ in layers)
    read: dict[object, Layer] = {}  # only the layers listed again further on
    if len({name for name, _ in layers}) > 8:
        say(f"reading {len(layers)} layers")
    previous = None
    for number, (name, media_type) in enumerate(layers, 1):
        label = f"{number}/{len(layers)} ({name})"
        if "zstd" in media_type:
            raise ImageReadError(
                f"layer {label} is zstd-compressed, which this Python cannot read; "
                "re-save the image with gzip layers or uncompressed"
            )
        identity = blobs.identity(name)
        uses[identity] -= 1
        layer = read.pop(identity, None) if not uses[identity] else read.get(identity)
        if layer is None:
            try:
                with blobs.open(name) as blob:
                    layer = tree.read_layer(io.BufferedReader(blob, _CHUNK), label)
                    blob.finish()
            except DeadlineExceeded as exc:
                raise DeadlineExceeded(f"reading layer {label}: {exc}") from None
            if uses[identity]:
                read[identity] = layer
        if layer is not previous:  # the same layer twice in a row changes nothing
            tree.apply(layer)
        previous = layer
    return tree
