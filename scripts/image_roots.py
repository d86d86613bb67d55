#!/usr/bin/env python3
"""Build real container images from Debian's archive, for tests/image/ (`cgpu probe --image`).

    python3 scripts/image_roots.py [--cache DIR] [--deadline SECONDS]

Each image starts as a root made by `mmdebstrap --variant=essential --include=PACKAGES --mode=root` (bookworm), so
its libraries, ICD files and `var/lib/dpkg/status` are Debian's own; the root is `podman import`ed into a private
podman store in the cache (CACHE/storage.conf: point CONTAINERS_STORAGE_CONF at it) and saved as an oci-archive,
a docker-archive and an OCI layout. A musl root is Debian's musl package unpacked (`dpkg-deb -x`) and nothing else.
The CUDA images are `podman build`s FROM the glibc image that add a stand-in CUDA runtime (a small
libcudart.so.X.Y built with gcc, soname libcudart.so.X) and the environment NVIDIA's CUDA images set
(CUDA_VERSION, NVIDIA_REQUIRE_CUDA); one adds the files of NVIDIA's cuda-compat package; another sets a user.

A root is built into NAME.partial and renamed once it is whole; a second run reuses what the first built (no
network). The images are built at the same time, each bounded by what is left of the deadline. The result is
CACHE/images.json, which the tests read: per image its root, store name, archives and package versions, or why it
is absent. Stdlib only. Exit status 0 when at least one image is usable. Needs root, mmdebstrap, podman and gcc.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SUITE = "bookworm"
MANIFEST = "images.json"
STORE_PREFIX = "localhost/cgpu-image-test/"
# the images made by mmdebstrap: their Debian packages beyond the essential set
DEBIAN_IMAGES: dict[str, tuple[str, ...]] = {
    "glibc": (),
    "vulkan-loader": ("libvulkan1",),
    "vulkan-mesa": ("libvulkan1", "mesa-vulkan-drivers"),
    "opencl-loader": ("ocl-icd-libopencl1",),
    "opencl-pocl": ("ocl-icd-libopencl1", "pocl-opencl-icd"),
    "rocm": ("libamdhip64-5",),
}
# the CUDA stand-ins, FROM the glibc image: (CUDA_VERSION, NVIDIA_REQUIRE_CUDA, cuda-compat driver or "", USER)
CUDA_IMAGES: dict[str, tuple[str, str, str, str]] = {
    "cuda-12.4": (
        "12.4.1",
        "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471",
        "",
        "",
    ),
    "cuda-12.8-compat": ("12.8.1", "cuda>=12.8 brand=tesla,driver>=535,driver<536", "570.124.06", ""),
    "cuda-12.4-user": ("12.4.1", "cuda>=12.4", "", "app"),
}
ARCHIVED = ("glibc", "vulkan-loader", "opencl-loader", "musl", "cuda-12.4")  # also saved in every archive form
PACKAGES_OF_INTEREST = ("libc6", "libvulkan1", "mesa-vulkan-drivers", "ocl-icd-libopencl1", "pocl-opencl-icd")


def default_cache() -> Path:
    env = os.environ.get("CGPU_IMAGE_ROOTS")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "cgpu-image-roots"


class Builder:
    """Builds the images into one cache; every command bounded by what is left of the deadline."""

    def __init__(self, cache: Path, deadline: float) -> None:
        self.cache = cache
        self.deadline = deadline
        self.storage_conf = cache / "storage.conf"
        self.env = {**os.environ, "CONTAINERS_STORAGE_CONF": str(self.storage_conf)}

    def run(self, *argv: str, cwd: Path | None = None) -> str:
        left = self.deadline - time.monotonic()
        if left < 5:
            raise RuntimeError(f"no time left for {argv[0]}")
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=left, stdin=subprocess.DEVNULL, env=self.env, cwd=cwd
        )
        if done.returncode != 0:
            tail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise RuntimeError(f"{' '.join(argv[:3])}: exit {done.returncode}: {tail}")
        return done.stdout

    def write_storage_conf(self) -> None:
        store = self.cache / "storage"
        self.storage_conf.write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{store}/graph"\nrunroot = "{store}/run"\n', encoding="utf-8"
        )

    def has_image(self, name: str) -> bool:
        try:
            self.run("podman", "image", "exists", STORE_PREFIX + name)
        except RuntimeError:
            return False
        return True

    def debian_root(self, name: str, packages: tuple[str, ...]) -> Path:
        root = self.cache / "roots" / name
        if (root / "var" / "lib" / "dpkg" / "status").is_file():
            return root
        partial = root.with_name(name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        include = [f"--include={','.join(packages)}"] if packages else []
        self.run("mmdebstrap", "--variant=essential", *include, "--mode=root", SUITE, str(partial))
        os.replace(partial, root)
        return root

    def musl_root(self) -> Path:
        root = self.cache / "roots" / "musl"
        if (root / "usr").is_dir():
            return root
        partial = root.with_name("musl.partial")
        shutil.rmtree(partial, ignore_errors=True)
        with tempfile.TemporaryDirectory() as tmp:
            self.run("apt-get", "download", "musl", cwd=Path(tmp))
            deb = next(Path(tmp).glob("musl_*.deb"))
            self.run("dpkg-deb", "-x", str(deb), str(partial))
        os.replace(partial, root)
        return root

    def import_root(self, name: str, root: Path) -> None:
        if self.has_image(name):
            return
        # a tar of the root as the engine imports it (numeric owners, the root's own paths)
        with tempfile.TemporaryDirectory(dir=self.cache) as tmp:
            tar = Path(tmp) / "root.tar"
            self.run("tar", "--numeric-owner", "-C", str(root), "-cf", str(tar), ".")
            self.run("podman", "import", str(tar), STORE_PREFIX + name)

    def cuda_image(self, name: str, spec: tuple[str, str, str, str]) -> None:
        if self.has_image(name):
            return
        version, require, compat_driver, user = spec
        major_minor = ".".join(version.split(".")[:2])
        major = version.split(".")[0]
        with tempfile.TemporaryDirectory(dir=self.cache) as tmp:
            context = Path(tmp)
            source = context / "stub.c"
            source.write_text("int cudaRuntimeGetVersion(int *v) { *v = 0; return 0; }\n", encoding="utf-8")
            lib = f"libcudart.so.{version}"
            self.run("gcc", "-shared", "-fPIC", f"-Wl,-soname,libcudart.so.{major}", "-o", lib, "stub.c", cwd=context)
            lines = [
                f"FROM {STORE_PREFIX}glibc",
                f"COPY {lib} /usr/local/cuda-{major_minor}/targets/x86_64-linux/lib/{lib}",
                "COPY links/ /",  # no RUN (no runtime needed): links and config are files of the context
            ]
            links = context / "links"
            libdir = links / f"usr/local/cuda-{major_minor}/targets/x86_64-linux/lib"
            libdir.mkdir(parents=True)
            (libdir / f"libcudart.so.{major}").symlink_to(lib)
            (links / "usr/local/cuda").symlink_to(f"cuda-{major_minor}")
            conf = links / "etc/ld.so.conf.d"
            conf.mkdir(parents=True)
            (conf / "000_cuda.conf").write_text("/usr/local/cuda/targets/x86_64-linux/lib\n", encoding="utf-8")
            if compat_driver:
                compat = links / f"usr/local/cuda-{major_minor}/compat"
                compat.mkdir(parents=True)
                self.run(
                    "gcc",
                    "-shared",
                    "-fPIC",
                    "-Wl,-soname,libcuda.so.1",
                    "-o",
                    "libcuda.so.stub",
                    "stub.c",
                    cwd=context,
                )
                shutil.copy(context / "libcuda.so.stub", compat / f"libcuda.so.{compat_driver}")
                (compat / "libcuda.so.1").symlink_to(f"libcuda.so.{compat_driver}")
            if user:
                glibc = self.cache / "roots" / "glibc"
                etc = links / "etc"
                passwd = (glibc / "etc/passwd").read_text(
                    encoding="utf-8"
                ) + f"{user}:x:1000:1000::/home/{user}:/bin/sh\n"
                group = (glibc / "etc/group").read_text(encoding="utf-8") + f"{user}:x:1000:\n"
                group = re.sub(r"(?m)^(video:[^:]*:44:)$", rf"\g<1>{user}", group)  # base-passwd's video group
                (etc / "passwd").write_text(passwd, encoding="utf-8")
                (etc / "group").write_text(group, encoding="utf-8")
                lines.append(f"USER {user}")
            lines += [
                f"ENV CUDA_VERSION={version}",
                f'ENV NVIDIA_REQUIRE_CUDA="{require}"',
                "ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                "ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
            ]
            (context / "Containerfile").write_text("\n".join(lines) + "\n", encoding="utf-8")
            self.run("podman", "build", "-q", "-t", STORE_PREFIX + name, "-f", "Containerfile", ".", cwd=context)

    def archives(self, name: str) -> dict[str, str]:
        """The image saved in each archive form: {transport: path}."""
        out = self.cache / "archives"
        out.mkdir(exist_ok=True)
        forms = {
            "oci-archive": (out / f"{name}.oci.tar", "oci-archive"),
            "docker-archive": (out / f"{name}.docker.tar", "docker-archive"),
            "oci": (out / f"{name}.oci", "oci-dir"),
        }
        for path, form in forms.values():
            if not path.exists():
                partial = path.with_name(path.name + ".partial")
                shutil.rmtree(partial, ignore_errors=True)
                with contextlib.suppress(FileNotFoundError):
                    partial.unlink()
                self.run("podman", "save", "--format", form, "-o", str(partial), STORE_PREFIX + name)
                os.replace(partial, path)
        return {transport: str(path) for transport, (path, _) in forms.items()}

    def build(self, name: str) -> dict[str, Any]:
        started = time.monotonic()
        try:
            if name == "musl":
                root = self.musl_root()
                self.import_root(name, root)
            elif name in DEBIAN_IMAGES:
                root = self.debian_root(name, DEBIAN_IMAGES[name])
                self.import_root(name, root)
            else:
                root = None
                self.cuda_image(name, CUDA_IMAGES[name])
            entry: dict[str, Any] = {"store": STORE_PREFIX + name, "built": f"{time.monotonic() - started:.0f} s"}
            if root is not None:
                entry["root"] = str(root)
                entry["versions"] = dpkg_versions(root)
            if name in ARCHIVED:
                entry["archives"] = self.archives(name)
            return entry
        except (RuntimeError, OSError, subprocess.TimeoutExpired, StopIteration) as exc:
            return {"absent": f"{name}: {exc}"}


def dpkg_versions(root: Path) -> dict[str, str]:
    status = root / "var" / "lib" / "dpkg" / "status"
    if not status.is_file():
        return {}
    found: dict[str, str] = {}
    for stanza in status.read_text(encoding="utf-8", errors="replace").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " ")
        if fields.get("Status", "").endswith(" installed") and (
            fields.get("Package") in PACKAGES_OF_INTEREST or fields.get("Package", "").startswith("libamdhip64")
        ):
            found[fields["Package"]] = fields.get("Version", "")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=None, help="where the images are kept")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds for the whole run")
    args = parser.parse_args(argv)
    cache: Path = args.cache or default_cache()
    (cache / "roots").mkdir(parents=True, exist_ok=True)
    builder = Builder(cache, time.monotonic() + args.deadline)
    names = [*DEBIAN_IMAGES, "musl", *CUDA_IMAGES]
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once build each image once
        missing = [tool for tool in ("mmdebstrap", "podman", "gcc", "dpkg-deb") if shutil.which(tool) is None]
        if os.geteuid() != 0:
            entries = {name: {"absent": "mmdebstrap's root mode and podman import need root"} for name in names}
        elif missing:
            entries = {name: {"absent": f"{', '.join(missing)} not installed"} for name in names}
        else:
            builder.write_storage_conf()
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(DEBIAN_IMAGES) + 1) as pool:
                first = {name: pool.submit(builder.build, name) for name in [*DEBIAN_IMAGES, "musl"]}
                entries = {name: future.result() for name, future in first.items()}
                # the CUDA images are built FROM the glibc one
                later = {name: pool.submit(builder.build, name) for name in CUDA_IMAGES}
                entries.update({name: future.result() for name, future in later.items()})
        (cache / MANIFEST).write_text(
            json.dumps({"storage_conf": str(builder.storage_conf), "images": entries}, indent=2, sort_keys=True) + "\n",
            encoding="utf-8",
        )
    for name, entry in entries.items():
        print(f"{name}: {entry.get('absent') or entry.get('versions', '')} ({entry.get('built', '')})", file=sys.stderr)
    return 0 if any("store" in entry for entry in entries.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
