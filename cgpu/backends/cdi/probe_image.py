"""The probe image, built without a registry from this host's own Debian packages.

It carries what an ordinary GPU image carries in user space: Python 3 (to run the probe),
the Vulkan loader and the OpenCL ICD loader, plus Mesa's Vulkan drivers (lavapipe, and
radv/anv for AMD and Intel render nodes) and PoCL. The software drivers are there on
purpose: the probe must see them and refuse to count them. GPU vendor libraries (NVIDIA's)
come from the CDI spec, as they would for any image.

The files are the packages' own (`dpkg-query -L`) plus every library they link
(`ldd`), packed into one layer and imported (`podman import` / `docker import`). The tag
is a hash of the package versions, so an unchanged host reuses the image.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from cgpu.engines.client import Engine, EngineError
from cgpu.node.files import default_cache_dir
from cgpu.run import CommandError, decode, run

REPOSITORY = "localhost/cgpu-probe"
# Bump when the image's layout changes, so images built by an older cgpu are not reused.
LAYOUT_VERSION = "2"

# Packages the image cannot do without (glibc with ldconfig and its configuration, which CDI
# hooks such as NVIDIA's update-ldcache run in the container; the two loaders), and those
# that make it a realistic GPU image.
REQUIRED = ("libc6", "libc-bin", "libvulkan1", "ocl-icd-libopencl1")
OPTIONAL = ("mesa-vulkan-drivers", "pocl-opencl-icd", "libpocl2")
# Not needed to run anything: docs, and PoCL's kernel sources (only needed to build kernels).
SKIPPED_PREFIXES = ("/usr/share/doc/", "/usr/share/man/", "/usr/share/lintian/", "/usr/share/bug/", "/usr/share/pocl/")
IMAGE_CHANGES = ["ENV PATH=/usr/local/bin:/usr/bin:/bin", 'CMD ["/usr/bin/python3"]']


class ImageBuildError(EngineError):
    pass


def python_packages() -> tuple[str, ...]:
    """The Debian packages of the host's /usr/bin/python3 (python3.11 -> its -minimal and -stdlib)."""
    target = os.path.basename(os.path.realpath("/usr/bin/python3"))
    match = re.fullmatch(r"python(3\.\d+)", target)
    if match is None:
        raise ImageBuildError(
            "cannot build the probe image: this host has no Debian python3 (/usr/bin/python3); "
            "give --probe-image REF with an image that has python3"
        )
    v = match.group(1)
    return ("python3-minimal", f"python{v}-minimal", f"libpython{v}-minimal", f"libpython{v}-stdlib")


def installed_versions(packages: tuple[str, ...], *, timeout: float) -> dict[str, str]:
    """package -> version for those of `packages` that are installed."""
    if shutil.which("dpkg-query") is None:
        raise ImageBuildError(
            "cannot build the probe image: it is built from this host's Debian/Ubuntu packages and there is "
            "no dpkg-query here; give --probe-image REF with an image that has python3 and the GPU loaders"
        )
    done = run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Status}\n", *packages], timeout=timeout)
    versions = {}
    for line in decode(done.stdout).splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[2] == "installed":
            versions[fields[0].split(":")[0]] = fields[1]
    return versions


def image_inputs(*, timeout: float) -> dict[str, str]:
    """The installed packages the image is built from; raises when a required one is missing."""
    wanted = python_packages() + REQUIRED
    versions = installed_versions(wanted + OPTIONAL, timeout=timeout)
    missing = [p for p in wanted if p not in versions]
    if missing:
        raise ImageBuildError(
            f"cannot build the probe image: {', '.join(missing)} not installed here "
            f"(apt-get install {' '.join(missing)}), or give --probe-image REF"
        )
    return versions


def image_ref(versions: dict[str, str]) -> str:
    text = "\n".join([LAYOUT_VERSION, platform.machine(), *(f"{p}={v}" for p, v in sorted(versions.items()))])
    return f"{REPOSITORY}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def ensure_probe_image(engine: Engine, *, timeout: float, progress: Callable[[str], None]) -> tuple[str, float | None]:
    """The probe image's ref, built when missing; and the build time in seconds (None: reused)."""
    try:
        versions = image_inputs(timeout=timeout)
    except CommandError as exc:
        raise ImageBuildError(f"cannot build the probe image: {exc}") from None
    ref = image_ref(versions)
    if engine.image_exists(ref):
        return ref, None
    # Runs that build at once would each import an image under the same tag, leaving all but
    # the last one untagged (342 MB each): one builds, the others wait and reuse its image.
    with _build_lock(ref, timeout=timeout, progress=progress):
        if engine.image_exists(ref):
            return ref, None
        started = time.monotonic()
        progress(f"building the probe image {ref} from this host's packages ({', '.join(sorted(versions))})")
        with tempfile.TemporaryDirectory(prefix="cgpu-probe-image-") as work:
            tar_path = os.path.join(work, "rootfs.tar")
            try:
                size = write_rootfs(tar_path, list(versions), timeout=timeout)
            except CommandError as exc:
                raise ImageBuildError(f"cannot build the probe image: {exc}") from None
            except OSError as exc:
                where = f"{exc.filename}: " if exc.filename else ""
                raise ImageBuildError(f"cannot build the probe image: {where}{exc.strerror or exc}") from None
            progress(f"importing the probe image ({size / 1e6:.0f} MB) into {engine.name}")
            engine.import_image(tar_path, ref, IMAGE_CHANGES)
        return ref, time.monotonic() - started


@contextmanager
def _build_lock(ref: str, *, timeout: float, progress: Callable[[str], None]) -> Iterator[None]:
    """Hold the host's probe-image build lock (a file lock in cgpu's cache dir, released by the
    kernel when the holder exits, however it exits), waiting at most `timeout` seconds for it.
    Where the lock file cannot be made, the build goes ahead without it."""
    import fcntl  # the image is built from Debian packages: only ever on Linux

    path = default_cache_dir() / "probe-image.lock"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        progress(f"cannot create {path} ({exc.strerror or exc}): building the probe image without the lock")
        yield
        return
    try:
        deadline = time.monotonic() + timeout
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ImageBuildError(
                        f"another cgpu run is building the probe image {ref} and did not finish within "
                        f"{timeout:g} s (the lock {path}); run again when it has, or with a longer --timeout"
                    ) from None
                if not said:
                    progress(f"another cgpu run is building the probe image {ref}; waiting for it")
                    said = True
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_rootfs(tar_path: str, packages: list[str], *, timeout: float) -> int:
    """Pack the packages' files and every library they link into `tar_path`; returns its size."""
    done = run(["dpkg-query", "-L", *packages], timeout=timeout)
    listed = [line for line in decode(done.stdout).splitlines() if line.startswith("/")]
    if done.returncode != 0 or not listed:  # an image without them would be kept under their versions' name
        raise ImageBuildError(
            f"cannot build the probe image: `dpkg-query -L` failed (exit {done.returncode}): "
            f"{decode(done.stderr).strip()[-300:] or 'it listed no files'}"
        )
    wanted = [p for p in listed if not (p + "/").startswith(SKIPPED_PREFIXES) and p != "/."]
    wanted += _compiled_bytecode(wanted)
    wanted += linked_libraries([p for p in wanted if _is_elf(p)], timeout=timeout)

    entries: dict[str, None] = {}
    for path in wanted:
        _add_with_parents(path, entries)
    with tarfile.open(tar_path, "w") as tar:
        tmp = tarfile.TarInfo("tmp")
        tmp.type, tmp.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(tmp)
        for path in entries:
            tar.add(path, arcname=path.lstrip("/"), recursive=False, filter=_as_root)
    return os.path.getsize(tar_path)


def linked_libraries(elf_files: list[str], *, timeout: float) -> list[str]:
    """Every shared library (and the dynamic loader) the given ELF files link, per `ldd`."""
    if not elf_files:
        return []
    done = run(["ldd", *elf_files], timeout=timeout)  # exit 1 when one file is static: still parsed
    return sorted(set(re.findall(r"(?:=>\s*|^\s*)(/\S+)\s+\(0x", decode(done.stdout), re.MULTILINE)))


def _compiled_bytecode(paths: list[str]) -> list[str]:
    """The host's `__pycache__` files for the stdlib (made at install time, not listed by dpkg):
    without them every probe run compiles the modules it imports."""
    found = []
    for path in paths:
        if path.endswith(".py") and path.startswith("/usr/lib/python3"):
            directory, name = os.path.split(path)
            cache = os.path.join(directory, "__pycache__")
            stem = name[:-3] + "."
            try:
                found += [
                    os.path.join(cache, f) for f in os.listdir(cache) if f.startswith(stem) and f.endswith(".pyc")
                ]
            except OSError:
                pass
    return found


def _is_elf(path: str) -> bool:
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def _add_with_parents(path: str, entries: dict[str, None], depth: int = 0) -> None:
    """Add `path` and each folder above it; a symlink on the way is added as a link and its
    target followed, so merged-/usr links (/lib -> usr/lib) survive as they are on the host."""
    if depth > 40:
        return
    parts = [p for p in path.split("/") if p]
    current = ""
    for index, part in enumerate(parts):
        current += "/" + part
        if not os.path.lexists(current):
            return
        if os.path.islink(current):
            entries[current] = None
            rest = "/".join(parts[index + 1 :])
            target = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current), rest))
            _add_with_parents(target, entries, depth + 1)
            return
        entries[current] = None


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info
