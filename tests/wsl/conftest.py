"""Fixtures for the wsl backend: fabricated WSL distros (real busybox, entered with chroot)
behind the wsl.exe stand-in in fake_wsl.py, put first on PATH."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
BUSYBOX = Path("/bin/busybox")
WSL2_KERNEL = "6.6.87.2-microsoft-standard-WSL2"
MS_LIBS = ("libd3d12.so", "libd3d12core.so", "libdxcore.so")
NVIDIA_LIBS = ("libcuda.so", "libcuda.so.1", "libcuda.so.1.1", "libnvidia-ml.so.1", "libnvwgf2umx.so")
NVIDIA_SMI_OK = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 575.64.01              Driver Version: 576.88         CUDA Version: 12.9     |
|-----------------------------------------+------------------------+----------------------+
|   0  NVIDIA GeForce RTX 4070 ...    On  |   00000000:01:00.0  On |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""
NVIDIA_SMI_TCC = "Failed to initialize NVML: GPU access blocked by the operating system\n"


def _can_chroot() -> str | None:
    if not BUSYBOX.is_file():
        return "busybox is not installed (/bin/busybox; apt-get install busybox-static)"
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "the wsl.exe stand-in enters distro trees with chroot, which needs root"
    return None


@pytest.fixture(scope="session")
def busybox_root(tmp_path_factory) -> Path:
    """A minimal distro tree: static busybox with its applets in /bin, /proc files of a WSL 2 kernel."""
    reason = _can_chroot()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("busybox-root")
    for folder in ("bin", "dev", "etc", "lib", "tmp", "usr/bin", "usr/lib", "proc/sys/kernel", "root"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, root / "bin/busybox")
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        if applet != "busybox":
            (root / "bin" / applet).symlink_to("busybox")
    os.mknod(root / "dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (root / "dev/null").chmod(0o666)
    (root / "proc/sys/kernel/osrelease").write_text(WSL2_KERNEL + "\n")
    (root / "proc/version").write_text(f"Linux version {WSL2_KERNEL} (root@1234) #1 SMP PREEMPT_DYNAMIC\n")
    return root


class Distro:
    """One fabricated distro tree; methods add what WSL and the GPU drivers put there."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def file(self, path: str, content: str | bytes = b"", mode: int = 0o644) -> Path:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
        target.chmod(mode)
        return target

    def script(self, path: str, body: str) -> Path:
        target = self.root / path.lstrip("/")
        if target.is_symlink():
            target.unlink()
        return self.file(path, "#!/bin/busybox sh\n" + body, 0o755)

    def glibc(self, pretty: str = "Ubuntu 24.04.1 LTS") -> Distro:
        self.file("lib64/ld-linux-x86-64.so.2")
        self.file("lib/x86_64-linux-gnu/libc.so.6")
        self.file("etc/os-release", f'PRETTY_NAME="{pretty}"\nNAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\n')
        return self

    def musl(self) -> Distro:
        self.file("lib/ld-musl-x86_64.so.1")
        self.file("etc/alpine-release", "3.22.1\n")
        self.file(
            "etc/os-release", 'NAME="Alpine Linux"\nID=alpine\nVERSION_ID=3.22.1\nPRETTY_NAME="Alpine Linux v3.22"\n'
        )
        return self

    def dxg(self) -> Distro:
        node = self.root / "dev/dxg"
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        node.chmod(0o666)
        return self

    def dri(self) -> Distro:  # VGEM on WSL
        folder = self.folder("dev/dri")
        for name in ("card0", "renderD128"):
            os.mknod(folder / name, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        return self

    def folder(self, path: str) -> Path:
        target = self.root / path
        target.mkdir(parents=True, exist_ok=True)
        return target

    def wsl_libs(self, *names: str) -> Distro:
        self.folder("usr/lib/wsl/lib")
        for name in names or MS_LIBS:
            self.file(f"usr/lib/wsl/lib/{name}", b"\x7fELF", 0o555)
        return self

    def driver_store(self, folder: str, *files: str) -> Distro:
        self.folder(f"usr/lib/wsl/drivers/{folder}")
        for name in files:
            self.file(f"usr/lib/wsl/drivers/{folder}/{name}", b"\x7fELF", 0o555)
        return self

    def nvidia(self, smi_output: str = NVIDIA_SMI_OK, smi_exit: int = 0) -> Distro:
        self.wsl_libs(*NVIDIA_LIBS)
        self.driver_store(
            "nv_dispsi.inf_amd64_4d2b5d1cf5f3a1c2",
            "libcuda.so.1.1",
            "libcuda_loader.so",
            "libnvidia-ml.so.1",
            "libnvwgf2umx.so",
            "nvcubins.bin",
        )
        self.driver_store("ntprint.inf_amd64_83a2a0a1f1f3c3a0", "unidrv.dll")
        self.script("usr/lib/wsl/lib/nvidia-smi", f"cat <<'EOF'\n{smi_output}EOF\nexit {smi_exit}\n")
        return self

    def intel(self) -> Distro:
        self.driver_store("iigd_dch.inf_amd64_55f589032bab5285", "libigd12umd64.so", "igd12umd64.dll")
        return self

    def amd(self) -> Distro:
        self.driver_store("u0420529.inf_amd64_88c3b2e16fb0a4b5", "amdxc64.dll", "amdkmdag.sys")
        return self

    def python(self, **answers: dict | str) -> Distro:
        """A python3 that answers `python3 -I -S -c <probe.py> --child API` as the local probe would,
        and keeps its arguments in /tmp/python-args."""
        cases = "".join(
            f"{api}) cat <<'EOF'\n{a if isinstance(a, str) else json.dumps(a)}\nEOF\n;;\n" for api, a in answers.items()
        )
        self.script(
            "usr/bin/python3",
            'printf "%s\\n" "$@" > /tmp/python-args\n'
            f'eval "api=\\${{$#}}"\ncase "$api" in\n{cases}*) exit 1 ;;\nesac\n',
        )
        return self


def _copy_keeping_devices(source: str, target: str) -> None:
    info = os.lstat(source)
    if stat.S_ISCHR(info.st_mode):
        os.mknod(target, info.st_mode, info.st_rdev)
    else:
        shutil.copy2(source, target)


class FakeWsl:
    """The wsl.exe stand-in on PATH, and its registry of distros."""

    def __init__(self, home: Path, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.home = home
        self.base = base
        self.state: dict = {"installed": True, "default": None, "distros": {}}
        bindir = home / "bin"
        bindir.mkdir()
        self.exe = bindir / "wsl.exe"
        self.exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "fake_wsl.py"}" "$@"\n')
        self.exe.chmod(0o755)
        self.state_file = home / "wsl-state.json"
        monkeypatch.setenv("FAKE_WSL_STATE", str(self.state_file))
        monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
        monkeypatch.delenv("CGPU_WSL_EXE", raising=False)
        monkeypatch.delenv("CGPU_WSL_DISTRO", raising=False)
        monkeypatch.delenv("USERPROFILE", raising=False)
        self.save()

    def distro(self, name: str, *, default: bool = False, version: int = 2) -> Distro:
        root = self.home / "distros" / name
        shutil.copytree(self.base, root, symlinks=True, copy_function=_copy_keeping_devices)
        self.state["distros"][name] = {"root": str(root), "version": version}
        if default:
            self.state["default"] = name
        self.save()
        return Distro(root)

    def save(self) -> None:
        self.state_file.write_text(json.dumps(self.state))


@pytest.fixture
def fake_wsl(tmp_path, busybox_root, monkeypatch) -> FakeWsl:
    return FakeWsl(tmp_path, busybox_root, monkeypatch)
