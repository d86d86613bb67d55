"""The wsl backend (Windows): what a container started in the agent's WSL session gets.

One `wsl.exe -d DISTRO -e sh -c <wsl/probe.sh> ...` call runs the in-session probe (POSIX
sh, busybox is enough); the local probe goes along on stdin for the session's python3. The
probe's answer is in-band (hex-valued `key=value` lines), so wsl.exe's own failures (exit
-1, UTF-16LE text with a `Wsl/...` code) are never mistaken for it.

On WSL the GPU is `/dev/dxg` (dxgkrnl) plus the libraries in `/usr/lib/wsl`: Microsoft's
D3D12/DXCore for every vendor, NVIDIA's `libcuda.so.1` for CUDA; ROCm (AMD's librocdxg) and
Vulkan (Mesa's Dozen) ride on the same path with their user space in the image. `/dev/dri` there
is VGEM, never a GPU.

The code lives in named modules: `backend` (the entry, `probe`), `output` (reading what came
back) and `judging` (what a container gets).
"""

from cgpu.backends.wsl.backend import DEFAULT_TIMEOUT, probe
from cgpu.backends.wsl.output import ProbeOutputError

__all__ = ["DEFAULT_TIMEOUT", "ProbeOutputError", "probe"]
