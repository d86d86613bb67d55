"""The in-container GPU probe: which GPU compute APIs really work *here*, counting only real GPUs.

Standard library only, one file, Python 3.8+: copy it into any glibc image and run
`python3 probe.py` (options: `--timeout SECONDS` per API, `--api NAME` repeatable). It prints
one JSON object (shape in `docs/probe.md`, versioned by `probe_version`), on a terminal too:
whatever runs it (cgpu, a script behind `podman run -t`) reads JSON. `--human` prints the same
answer for a person instead, wrapped to the terminal, every value from a driver escaped.

Each API is probed in its own child process (this file re-run with `--child API`), never by
forking after a driver is loaded: drivers crash, hang, and CUDA poisons `fork()`. A child that
crashes or hangs costs that API only. Counting rules and ctypes layouts follow the Khronos,
CUDA, HSA and DXCore headers; software drivers (lavapipe/llvmpipe, SwiftShader, PoCL CPU,
WARP) are reported but never counted.

This file is the one part of cgpu that imports nothing of cgpu (not `cgpu.problem`'s `Problem`,
not the report's types): it is copied into containers and VMs and runs alone there. What it
finds travels in its own JSON wire format, which `cgpu.gpu_probe.answer` checks and turns into
cgpu's types on the host.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

PROBE_VERSION = 1
APIS = ("cuda", "rocm", "vulkan", "opencl", "directml", "metal")
DEFAULT_TIMEOUT = 30.0

# Environment variables that change what the loaders find (reported when set).
DISCOVERY_ENV = (
    "VK_DRIVER_FILES",
    "VK_ICD_FILENAMES",
    "VK_ADD_DRIVER_FILES",
    "VK_LOADER_DRIVERS_SELECT",
    "VK_LOADER_DRIVERS_DISABLE",
    "VK_LOADER_LAYERS_DISABLE",
    "XDG_DATA_DIRS",
    "XDG_CONFIG_DIRS",
    "OCL_ICD_FILENAMES",
    "OCL_ICD_VENDORS",
    "OPENCL_VENDOR_PATH",
    "RUSTICL_ENABLE",
    "RUSTICL_DEVICE_TYPE",
    "POCL_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "ROCM_PATH",
    "GGML_VK_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
)
DEVICE_NODE_GLOBS = (
    "/dev/dri/renderD*",
    "/dev/dri/card*",
    "/dev/nvidia*",
    "/dev/nvidia-caps/*",
    "/dev/kfd",
    "/dev/dxg",
)
METAL_SUMMARY = (
    "Metal is an Apple host API: a Linux container or VM never gets it (the Mac's GPU reaches Linux "
    "only as Vulkan through Venus)"
)
MAX_TEXT = 400  # cap on strings taken from drivers
STDERR_TAIL = 2000


# --------------------------------------------------------------------------------------------
# Parent: environment facts, one child per API, one JSON object.


def run_probe(apis=None, timeout=DEFAULT_TIMEOUT, work_on_software=False):
    """Probe the given APIs (default: all) in child processes; returns the probe's JSON object.
    `work_on_software`: also run the check work on software devices (they still never count)."""
    wanted = [api for api in APIS if apis is None or api in apis]
    results = {
        api: _result(False, "not probed (only %s was asked for)" % ", ".join(wanted), error="not_probed")
        for api in APIS
    }
    if "metal" in wanted:
        results["metal"] = _result(False, METAL_SUMMARY, error=None)
    results.update(_run_children([api for api in wanted if api != "metal"], timeout, work_on_software))
    return {
        "probe_version": PROBE_VERSION,
        "platform": _platform(),
        "python": "%d.%d.%d" % sys.version_info[:3],
        "libc": _libc(),
        "env": {name: os.environ[name] for name in DISCOVERY_ENV if name in os.environ},
        "device_nodes": _device_nodes(),
        "apis": results,
    }


def _run_children(apis, timeout, work_on_software=False):
    """Start every child at once, wait until `timeout` for each, kill the process group of any late one.
    Each child announces the driver call it is about to make on its progress file, so a hung one is
    reported with the call it hung in."""
    children = {}
    results = {}
    try:
        for api in apis:
            out, err, progress = _capture_file(), _capture_file(), _capture_file()
            argv = [sys.executable, "-I", "-S", os.path.abspath(__file__), "--child", api]
            argv += ["--progress-fd", str(progress.fileno())] + (["--work-on-software"] if work_on_software else [])
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    pass_fds=(progress.fileno(),),
                )
            except OSError as exc:
                results[api] = _result(False, "the %s probe could not start: %s" % (api, exc), error="probe_failed")
                for file in (out, err, progress):
                    file.close()
                continue
            children[api] = (proc, out, err, progress)
        deadline = time.monotonic() + timeout
        for api, (proc, out, err, progress) in children.items():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                step = _last_step(progress)
                results[api] = _result(
                    False,
                    "the %s probe timed out after %g s%s: a driver call hung"
                    % (api, timeout, " in %s" % step if step else ""),
                    error="timeout",
                    stderr=_tail(err),
                    stopped_at=step,
                )
                continue
            results[api] = _child_result(api, proc.returncode, out, err, progress)
    finally:
        for proc, out, err, progress in children.values():
            _kill_group(proc)  # also whatever a driver started and left behind
            for file in (out, err, progress):
                file.close()
    return results


def _last_step(progress):
    """The last call a child announced before it was killed, or None."""
    progress.seek(0)
    lines = progress.read(1 << 20).decode("utf-8", "replace").strip().splitlines()
    return lines[-1][:MAX_TEXT] if lines else None


def _capture_file():
    """A file for a child's output; memfd needs no writable directory (read-only containers)."""
    if hasattr(os, "memfd_create"):
        try:
            return os.fdopen(os.memfd_create("cgpu-probe", os.MFD_CLOEXEC), "w+b")
        except OSError:
            pass
    return tempfile.TemporaryFile()


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass  # stuck in the kernel (uninterruptible driver call); nothing more can be done


def _child_result(api, returncode, out, err, progress):
    stderr = _tail(err)
    if returncode < 0:
        signum = -returncode
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = "signal %d" % signum
        step = _last_step(progress)
        return _result(
            False,
            "the %s probe crashed with signal %d (%s) inside the driver or loader%s"
            % (api, signum, name, " in %s" % step if step else ""),
            error="crashed",
            stderr=stderr,
            stopped_at=step,
        )
    out.seek(0)
    raw = out.read(1 << 20)
    try:
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except ValueError:
        last = stderr.strip().splitlines()[-1:] or ["no output"]
        return _result(
            False,
            "the %s probe exited with status %d without an answer: %s" % (api, returncode, last[0][:MAX_TEXT]),
            error="probe_failed",
            stderr=stderr,
        )
    data["stderr"] = stderr
    return data


def _tail(file):
    file.seek(0, os.SEEK_END)
    size = file.tell()
    file.seek(max(0, size - STDERR_TAIL))
    return file.read().decode("utf-8", "replace")


def _result(available, summary, library=None, error=None, devices=None, stderr="", **extra):
    result = {
        "available": available,
        "summary": summary,
        "library": library,
        "error": error,
        "devices": devices or [],
        "stderr": stderr,
    }
    result.update(extra)
    return result


def _platform():
    system = sys.platform.rstrip("0123456789")
    return "%s-%s" % (system, os.uname().machine.lower() if hasattr(os, "uname") else "unknown")


def _libc():
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"
        if version:
            return version
    except (ValueError, OSError, AttributeError):
        pass
    if glob.glob("/lib/ld-musl-*.so.1"):
        return "musl"
    return "unknown"


def _device_nodes():
    nodes = set()
    for pattern in DEVICE_NODE_GLOBS:
        nodes.update(path for path in glob.glob(pattern) if not os.path.isdir(path))
    return sorted(nodes)


# --------------------------------------------------------------------------------------------
# Child helpers (run only in a child process).


def _text(raw):
    """A C string from a driver: bytes up to NUL, decoded leniently, capped."""
    if raw is None:
        return ""
    if not isinstance(raw, bytes):
        raw = bytes(raw)
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace").strip()[:MAX_TEXT]


def _mapped_libraries():
    """Paths of the shared objects mapped into this process, from /proc/self/maps."""
    paths = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/") and ".so" in parts[5]:
                    paths.add(parts[5].strip())
    except OSError:
        pass
    return paths


def _path_of(address):
    """The file mapped at `address` (the library a symbol really came from), or None."""
    if not address:
        return None
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                start, _, end = parts[0].partition("-")
                if int(start, 16) <= address < int(end, 16):
                    return parts[5].strip() if len(parts) == 6 else None
    except (OSError, ValueError, IndexError):
        pass
    return None


def _load(ctypes, candidates):
    """dlopen the first loadable candidate: (library, None), or (None, why one that exists failed, or None)."""
    failure = None
    for name in candidates:
        try:
            return ctypes.CDLL(name), None
        except OSError as exc:
            message = str(exc)
            if failure is None and not message.startswith(name + ": cannot open shared object file"):
                failure = message[:MAX_TEXT]  # there, but broken: wrong ELF class, a missing dependency...
    return None, failure


def _not_loaded(missing, failure):
    """The answer when an API's library could not be loaded: absent, or present but broken."""
    if failure:
        return _result(False, "the library is there but cannot be loaded: %s" % failure, error="library_load_failed")
    return _result(False, missing, error="library_not_found")


def _address(ctypes, function):
    return ctypes.cast(function, ctypes.c_void_p).value


def _drivers_loaded(before, names):
    """Libraries mapped since `before` that are the drivers `names` point at (by path, or soname stem)."""
    stems = set()
    paths = set()
    for name in names:
        if name.startswith("/"):
            paths.add(os.path.realpath(name))
        stems.add(os.path.basename(name).split(".so", 1)[0])
    return sorted(
        path
        for path in _mapped_libraries() - before
        if path in paths or os.path.basename(path).split(".so", 1)[0] in stems
    )[:32]


def _hex(value):
    return "0x%04x" % value


# --------------------------------------------------------------------------------------------
# The check work: each API adds two vectors of WORK_ITEMS unsigned ints on the device, reads
# the sum back and compares it. A device that enumerates but cannot do this does not count.

WORK_ITEMS = 64


class Work:
    """How a child runs the check work. `software`: run it on software devices too (they still
    never count; tests prove the dispatch path on lavapipe and PoCL this way). `progress_fd`: where
    each driver call is announced before it is made, so the parent can name the call a hung or
    crashed child stopped in."""

    def __init__(self, software=False, progress_fd=None):
        self.software = software
        self.progress_fd = progress_fd

    def step(self, call, device):
        if self.progress_fd is None:
            return
        line = ("%s on %s" % (call, device))[:MAX_TEXT].replace("\n", " ") + "\n"
        try:
            os.write(self.progress_fd, line.encode("utf-8", "replace"))
        except OSError:
            self.progress_fd = None

    def wanted(self, counted):
        """Whether to run the work on a device the counting rules do (not) count."""
        return counted or self.software


class WorkFailed(Exception):
    """The check work stopped: at which call (`step`), with which error name, and what else is known
    (a hint, the build log's first lines, the first wrong element)."""

    def __init__(self, step, error, detail=""):
        super().__init__("%s failed with %s%s" % (step, error, ": " + detail if detail else ""))
        self.step, self.error, self.detail = step, error, detail


def _work_inputs():
    """The two input vectors and the sums the device must return."""
    a = [i * 7 + 3 for i in range(WORK_ITEMS)]
    b = [100000 + i * i for i in range(WORK_ITEMS)]
    return a, b, [a[i] + b[i] for i in range(WORK_ITEMS)]


def _check_sums(got, expected):
    for index, wanted in enumerate(expected):
        value = got[index]
        if value != wanted:
            raise WorkFailed(
                "result check",
                "wrong_result",
                "element %d is %d, expected %d: the device computed wrongly" % (index, value, wanted),
            )


def _run_work(entry, run, *args):
    """Run one device's check, `run(*args)` (raises WorkFailed), and record it in its entry; True when it passed."""
    started = time.monotonic()
    try:
        run(*args)
    except WorkFailed as exc:
        entry.update(work="failed", work_step=exc.step, work_error=exc.error, work_detail=exc.detail[:MAX_TEXT])
    else:
        entry["work"] = "passed"
    entry["work_seconds"] = round(time.monotonic() - started, 3)
    return entry["work"] == "passed"


def _work_failure(entry):
    """One phrase for a device whose check failed: where it stopped and why."""
    text = "stopped at %s with %s" % (entry["work_step"], entry["work_error"])
    return text + (" (%s)" % entry["work_detail"] if entry.get("work_detail") else "")


def _not_working_summary(what, devices):
    """The summary when devices enumerate but none passed the check work."""
    return "%s, but none ran the check work: %s" % (
        what,
        "; ".join("%s %s" % (d["name"], _work_failure(d)) for d in devices if d.get("work") == "failed"),
    )


# --------------------------------------------------------------------------------------------
# CUDA (driver API)

CUDA_LIBRARIES = ("libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1")  # never bare libcuda.so: often the toolkit stub
CUDA_ERRORS = {
    0: "CUDA_SUCCESS",
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    34: "CUDA_ERROR_STUB_LIBRARY",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    801: "CUDA_ERROR_NOT_SUPPORTED",
    802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    200: "CUDA_ERROR_INVALID_IMAGE",
    201: "CUDA_ERROR_INVALID_CONTEXT",
    209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
    218: "CUDA_ERROR_INVALID_PTX",
    221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
    223: "CUDA_ERROR_JIT_COMPILATION_DISABLED",
    500: "CUDA_ERROR_NOT_FOUND",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    999: "CUDA_ERROR_UNKNOWN",
}
CUDA_JIT_LIBRARY = "libnvidia-ptxjitcompiler.so.1"
# The check kernel: c[i] = a[i] + b[i] for i < n, as PTX so the driver's JIT compiles it for
# whatever GPU this is (that is the path a CUDA application shipping PTX takes). Generated by
# LLVM 14's NVPTX back end (llc -O2 -mcpu=sm_50) from the obvious LLVM IR, comments removed.
CUDA_KERNEL = b"cgpu_add"
CUDA_PTX = b"""
.version 4.0
.target sm_50
.address_size 64

.visible .entry cgpu_add(
	.param .u64 cgpu_add_param_0,
	.param .u64 cgpu_add_param_1,
	.param .u64 cgpu_add_param_2,
	.param .u32 cgpu_add_param_3
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<9>;
	.reg .b64 	%rd<8>;

	mov.u32 	%r1, %tid.x;
	mov.u32 	%r2, %ctaid.x;
	ld.param.u32 	%r3, [cgpu_add_param_3];
	mov.u32 	%r4, %ntid.x;
	mad.lo.s32 	%r5, %r2, %r4, %r1;
	setp.ge.u32 	%p1, %r5, %r3;
	@%p1 bra 	LBB0_2;
	ld.param.u64 	%rd4, [cgpu_add_param_0];
	ld.param.u64 	%rd5, [cgpu_add_param_1];
	ld.param.u64 	%rd6, [cgpu_add_param_2];
	mul.wide.u32 	%rd7, %r5, 4;
	add.s64 	%rd1, %rd4, %rd7;
	add.s64 	%rd2, %rd5, %rd7;
	add.s64 	%rd3, %rd6, %rd7;
	ld.global.u32 	%r6, [%rd1];
	ld.global.u32 	%r7, [%rd2];
	add.s32 	%r8, %r6, %r7;
	st.global.u32 	[%rd3], %r8;
LBB0_2:
	ret;
}
"""
CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 5, 6
JIT_LOG_BYTES = 4096
CU_DEVICE_ATTRIBUTE_INTEGRATED = 18
CU_DEVICE_ATTRIBUTE_CC_MAJOR = 75
CU_DEVICE_ATTRIBUTE_CC_MINOR = 76


def _cuda_hint(code, library):
    if code == 100:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hint = "no CUDA device is visible: pass the GPU's /dev/nvidiaN into the container"
        if visible is not None:
            hint += " and check CUDA_VISIBLE_DEVICES=%r" % visible
        return hint
    if code == 34:
        return (
            "%s is the CUDA toolkit's stub library, not the driver: mount the NVIDIA driver's libcuda.so.1 "
            "(e.g. with the NVIDIA container toolkit) and keep the stubs directory off the library path" % library
        )
    if code == 803:
        return (
            "the user-space driver %s does not match the host's kernel module: a CUDA forward-compat or "
            "other-version libcuda.so.1 was picked up ahead of the one the host injected" % library
        )
    if code == 804:
        return "the CUDA forward-compat library %s is not supported on this GPU" % library
    if code == 999:
        hint = "unknown error, most often the nvidia_uvm module not loaded or /dev/nvidia-uvm not passed in"
        if not os.path.exists("/dev/nvidia-uvm"):
            hint += " (/dev/nvidia-uvm is missing here)"
        return hint
    return "the driver refused to initialise"


def _cuda_work_hint(code):
    if code == 221:
        return (
            "the driver's PTX JIT compiler %s is not in the container: the NVIDIA container toolkit mounts it "
            "with the compute capability" % CUDA_JIT_LIBRARY
        )
    if code == 223:
        return "PTX JIT compilation is disabled (CUDA_DISABLE_PTX_JIT?)"
    if code in (218, 222, 209):
        return "the driver's JIT could not compile the check kernel's PTX for this GPU"
    if code == 999:
        return "unknown error, most often /dev/nvidia-uvm not passed in"
    return ""


def _cuda_work(C, lib, device, label, error_name, work):
    """The PTX vector add on one device: JIT-load, launch, copy back, compare (raises WorkFailed)."""
    size = WORK_ITEMS * 4
    a, b, expected = _work_inputs()
    context, module, function = C.c_void_p(), C.c_void_p(), C.c_void_p()
    buffers = [C.c_uint64(0) for _ in range(3)]
    undo = []

    def call(name, argtypes, *args):
        work.step(name, label)
        try:
            function_ = getattr(lib, name)
        except AttributeError:
            raise WorkFailed(name, "missing_function", "the driver library does not export %s" % name) from None
        function_.argtypes, function_.restype = argtypes, C.c_int
        code = function_(*args)
        if code != 0:
            raise WorkFailed(name, error_name(code), _cuda_work_hint(code) or "error %d" % code)

    P, u, v = C.POINTER, C.c_uint, C.c_void_p
    try:
        call("cuDevicePrimaryCtxRetain", [P(v), C.c_int], C.byref(context), device)
        undo.append(lambda: call("cuDevicePrimaryCtxRelease_v2", [C.c_int], device))
        call("cuCtxSetCurrent", [v], context)
        log = C.create_string_buffer(JIT_LOG_BYTES)
        options = (C.c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        values = (v * 2)(C.cast(log, v), v(JIT_LOG_BYTES))
        try:
            call("cuModuleLoadDataEx", [P(v), C.c_char_p, u, v, v], C.byref(module), CUDA_PTX, 2, options, values)
        except WorkFailed as exc:
            jit_log = _text(log.raw)
            if jit_log:
                exc.detail = "%s; JIT log: %s" % (exc.detail, " / ".join(jit_log.splitlines()[:3]))
            raise
        undo.append(lambda: call("cuModuleUnload", [v], module))
        call("cuModuleGetFunction", [P(v), v, C.c_char_p], C.byref(function), module, CUDA_KERNEL)
        for buffer in buffers:
            call("cuMemAlloc_v2", [P(C.c_uint64), C.c_size_t], C.byref(buffer), size)
            undo.append(lambda buffer=buffer: call("cuMemFree_v2", [C.c_uint64], buffer))
        for buffer, values_ in ((buffers[0], a), (buffers[1], b)):
            host = (C.c_uint32 * WORK_ITEMS)(*values_)
            call("cuMemcpyHtoD_v2", [C.c_uint64, v, C.c_size_t], buffer, host, size)
        count = C.c_uint32(WORK_ITEMS)
        params = (v * 4)(*[C.addressof(x) for x in (*buffers, count)])
        call(
            "cuLaunchKernel",
            [v, u, u, u, u, u, u, u, v, v, v],
            function,
            1,
            1,
            1,
            WORK_ITEMS,
            1,
            1,
            0,
            None,
            params,
            None,
        )
        call("cuCtxSynchronize", [])
        result = (C.c_uint32 * WORK_ITEMS)()
        call("cuMemcpyDtoH_v2", [v, C.c_uint64, C.c_size_t], result, buffers[2], size)
        _check_sums(list(result), expected)
    finally:
        for action in reversed(undo):
            try:
                action()
            except WorkFailed:
                pass  # the answer is the first failure; cleaning up after it may fail too


def probe_cuda(ctypes, work):
    stub = failure = None
    os.environ.setdefault("CUDA_CACHE_DISABLE", "1")  # the check kernel is JIT-compiled every time, never cached
    for name in CUDA_LIBRARIES:
        lib, problem = _load(ctypes, (name,))
        failure = failure or problem
        if lib is None:
            continue
        result = _probe_cuda_library(ctypes, lib, name, work)
        if result["error"] != CUDA_ERRORS[34]:
            return result
        stub = stub or result  # the toolkit's stub: still try WSL's driver before giving that answer
    return stub or _not_loaded(
        "no NVIDIA driver library: libcuda.so.1 is not on the library path here (the "
        "host's NVIDIA driver is not mounted)",
        failure,
    )


def _probe_cuda_library(ctypes, lib, name, work):
    c_int, byref = ctypes.c_int, ctypes.byref
    before = _mapped_libraries()
    library = _path_of(_address(ctypes, lib.cuInit)) or name
    lib.cuInit.argtypes, lib.cuInit.restype = [ctypes.c_uint], c_int

    def error_name(code):
        if code in CUDA_ERRORS:
            return CUDA_ERRORS[code]
        text = ctypes.c_char_p()
        try:
            lib.cuGetErrorName.argtypes = [c_int, ctypes.POINTER(ctypes.c_char_p)]
            if lib.cuGetErrorName(code, byref(text)) == 0 and text.value:
                return _text(text.value)
        except AttributeError:
            pass
        return "CUDA_ERROR_%d" % code

    driver = c_int(0)
    version = None
    try:
        if lib.cuDriverGetVersion(byref(driver)) == 0 and driver.value > 0:
            version = "%d.%d" % (driver.value // 1000, driver.value % 1000 // 10)
    except AttributeError:
        pass
    code = lib.cuInit(0)
    if code != 0:
        name_ = error_name(code)
        return _result(
            False,
            "cuInit failed with %s (%d): %s" % (name_, code, _cuda_hint(code, library)),
            library=library,
            error=name_,
            driver_version=version,
        )
    count = c_int(0)
    code = lib.cuDeviceGetCount(byref(count))
    if code != 0:
        name_ = error_name(code)
        return _result(
            False,
            "cuDeviceGetCount failed with %s (%d)" % (name_, code),
            library=library,
            error=name_,
            driver_version=version,
        )
    devices = []
    for ordinal in range(min(count.value, 64)):
        device = c_int(0)
        if lib.cuDeviceGet(byref(device), ordinal) != 0:
            continue
        name_buf = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(name_buf, 256, device)
        entry = {
            "name": _text(name_buf.raw) or "CUDA device %d" % ordinal,
            "counted": True,
            "reason": "a CUDA device (NVIDIA ships no software CUDA driver)",
            "index": ordinal,
        }
        major, minor, integrated = c_int(0), c_int(0), c_int(0)
        if (
            lib.cuDeviceGetAttribute(byref(major), CU_DEVICE_ATTRIBUTE_CC_MAJOR, device) == 0
            and lib.cuDeviceGetAttribute(byref(minor), CU_DEVICE_ATTRIBUTE_CC_MINOR, device) == 0
        ):
            entry["compute_capability"] = "%d.%d" % (major.value, minor.value)
        if lib.cuDeviceGetAttribute(byref(integrated), CU_DEVICE_ATTRIBUTE_INTEGRATED, device) == 0:
            entry["integrated"] = bool(integrated.value)
        try:
            total = ctypes.c_size_t(0)
            lib.cuDeviceTotalMem_v2.argtypes = [ctypes.POINTER(ctypes.c_size_t), c_int]
            if lib.cuDeviceTotalMem_v2(byref(total), device) == 0:
                entry["total_memory"] = total.value
        except AttributeError:
            pass
        label = "%s (CUDA device %d)" % (entry["name"], ordinal)
        if _run_work(entry, _cuda_work, ctypes, lib, device.value, label, error_name, work):
            entry["reason"] += "; a PTX vector add was JIT-compiled, ran and checked"
        else:
            entry["counted"] = False
            entry["reason"] = "a CUDA device, but the check kernel %s" % _work_failure(entry)
        devices.append(entry)
    jit = sorted(path for path in _mapped_libraries() - before if "ptxjitcompiler" in os.path.basename(path))
    common = dict(library=library, driver_version=version, jit_library=jit[0] if jit else None)
    if not devices:
        return _result(False, "cuInit succeeded but the driver reports no CUDA device", error=None, **common)
    counted = [d for d in devices if d["counted"]]
    if not counted:
        what = "CUDA %s lists %d device(s)" % (version or "driver", len(devices))
        return _result(
            False, _not_working_summary(what, devices), error=devices[0]["work_error"], devices=devices, **common
        )
    names = ", ".join(d["name"] for d in counted)
    return _result(
        True,
        "CUDA %s works with %d device(s): %s; each ran a PTX vector add, checked"
        % (version or "driver", len(counted), names),
        devices=devices,
        **common,
    )


# --------------------------------------------------------------------------------------------
# Vulkan

VK_RESULTS = {
    0: "VK_SUCCESS",
    5: "VK_INCOMPLETE",
    -1: "VK_ERROR_OUT_OF_HOST_MEMORY",
    -2: "VK_ERROR_OUT_OF_DEVICE_MEMORY",
    -3: "VK_ERROR_INITIALIZATION_FAILED",
    -4: "VK_ERROR_DEVICE_LOST",
    -5: "VK_ERROR_MEMORY_MAP_FAILED",
    -6: "VK_ERROR_LAYER_NOT_PRESENT",
    -7: "VK_ERROR_EXTENSION_NOT_PRESENT",
    -8: "VK_ERROR_FEATURE_NOT_PRESENT",
    -9: "VK_ERROR_INCOMPATIBLE_DRIVER",
    -13: "VK_ERROR_UNKNOWN",
}
VK_TYPES = {0: "OTHER", 1: "INTEGRATED_GPU", 2: "DISCRETE_GPU", 3: "VIRTUAL_GPU", 4: "CPU"}
VK_DRIVER_IDS = {
    1: "AMD_PROPRIETARY",
    2: "AMD_OPEN_SOURCE",
    3: "MESA_RADV",
    4: "NVIDIA_PROPRIETARY",
    5: "INTEL_PROPRIETARY_WINDOWS",
    6: "INTEL_OPEN_SOURCE_MESA",
    7: "IMAGINATION_PROPRIETARY",
    8: "QUALCOMM_PROPRIETARY",
    9: "ARM_PROPRIETARY",
    10: "GOOGLE_SWIFTSHADER",
    11: "GGP_PROPRIETARY",
    12: "BROADCOM_PROPRIETARY",
    13: "MESA_LLVMPIPE",
    14: "MOLTENVK",
    15: "COREAVI_PROPRIETARY",
    16: "JUICE_PROPRIETARY",
    17: "VERISILICON_PROPRIETARY",
    18: "MESA_TURNIP",
    19: "MESA_V3DV",
    20: "MESA_PANVK",
    21: "SAMSUNG_PROPRIETARY",
    22: "MESA_VENUS",
    23: "MESA_DOZEN",
    24: "MESA_NVK",
    25: "IMAGINATION_OPEN_SOURCE_MESA",
    26: "MESA_HONEYKRISP",
    27: "VULKAN_SC_EMULATION_ON_VULKAN",
    28: "MESA_KOSMICKRISP",
    29: "MESA_GFXSTREAM",
    30: "APE_SOFT",
}
VK_DRIVER_SWIFTSHADER, VK_DRIVER_LLVMPIPE, VK_DRIVER_VENUS, VK_DRIVER_DOZEN = 10, 13, 22, 23
VK_VENDOR_MESA = 0x10005
VK_API_1_1 = (1 << 22) | (1 << 12)
VK_API_1_2 = (1 << 22) | (2 << 12)
VK_API_1_3 = (1 << 22) | (3 << 12)
VK_ST_DRIVER_PROPERTIES = 1000196000
VK_ST_PROPERTIES_2 = 1000059001
VK_MEMORY_HOST_VISIBLE, VK_MEMORY_HOST_COHERENT = 0x2, 0x4
VENUS_TEST_ALLOCATION = 4096  # smaller than Apple's 16 KiB page: what trips unpatched Mesa under krunkit
VENUS_FIX = (
    "the fix is Mesa with the 16 KiB blob-alignment patches krunkit needs (the libkrun build from "
    "Fedora copr slp/mesa-libkrun-vulkan, version pinned)"
)
# The check shader, c[i] = a[i] + b[i] over one storage buffer {a[64], b[64], c[64]} with one
# workgroup of 64: SPIR-V 1.0 (Vulkan 1.0), a uniform BufferBlock as Vulkan 1.0 drivers all take.
# The words below are this assembly, assembled (`spirv-as --target-env vulkan1.0`; a test checks
# they still match where spirv-tools is installed):
#
#                  OpCapability Shader
#                  OpMemoryModel Logical GLSL450
#                  OpEntryPoint GLCompute %main "main" %gid
#                  OpExecutionMode %main LocalSize 64 1 1
#                  OpDecorate %gid BuiltIn GlobalInvocationId
#                  OpDecorate %array ArrayStride 4
#                  OpMemberDecorate %Data 0 Offset 0
#                  OpMemberDecorate %Data 1 Offset 256
#                  OpMemberDecorate %Data 2 Offset 512
#                  OpDecorate %Data BufferBlock
#                  OpDecorate %data DescriptorSet 0
#                  OpDecorate %data Binding 0
#          %void = OpTypeVoid
#      %void_fn = OpTypeFunction %void
#          %uint = OpTypeInt 32 0
#         %uint3 = OpTypeVector %uint 3
#      %in_uint3 = OpTypePointer Input %uint3
#       %in_uint = OpTypePointer Input %uint
#        %uint_0 = OpConstant %uint 0
#        %uint_1 = OpConstant %uint 1
#        %uint_2 = OpConstant %uint 2
#       %uint_64 = OpConstant %uint 64
#         %array = OpTypeArray %uint %uint_64
#          %Data = OpTypeStruct %array %array %array
#        %u_Data = OpTypePointer Uniform %Data
#        %u_uint = OpTypePointer Uniform %uint
#           %gid = OpVariable %in_uint3 Input
#          %data = OpVariable %u_Data Uniform
#          %main = OpFunction %void None %void_fn
#         %entry = OpLabel
#         %gid_x = OpAccessChain %in_uint %gid %uint_0
#             %i = OpLoad %uint %gid_x
#            %pa = OpAccessChain %u_uint %data %uint_0 %i
#             %a = OpLoad %uint %pa
#            %pb = OpAccessChain %u_uint %data %uint_1 %i
#             %b = OpLoad %uint %pb
#           %sum = OpIAdd %uint %a %b
#            %pc = OpAccessChain %u_uint %data %uint_2 %i
#                  OpStore %pc %sum
#                  OpReturn
#                  OpFunctionEnd
# fmt: off
VK_SHADER = (
    0x07230203, 0x00010000, 0x00070000, 0x0000001b, 0x00000000, 0x00020011, 0x00000001, 0x0003000e,
    0x00000000, 0x00000001, 0x0006000f, 0x00000005, 0x00000001, 0x6e69616d, 0x00000000, 0x00000002,
    0x00060010, 0x00000001, 0x00000011, 0x00000040, 0x00000001, 0x00000001, 0x00040047, 0x00000002,
    0x0000000b, 0x0000001c, 0x00040047, 0x00000003, 0x00000006, 0x00000004, 0x00050048, 0x00000004,
    0x00000000, 0x00000023, 0x00000000, 0x00050048, 0x00000004, 0x00000001, 0x00000023, 0x00000100,
    0x00050048, 0x00000004, 0x00000002, 0x00000023, 0x00000200, 0x00030047, 0x00000004, 0x00000003,
    0x00040047, 0x00000005, 0x00000022, 0x00000000, 0x00040047, 0x00000005, 0x00000021, 0x00000000,
    0x00020013, 0x00000006, 0x00030021, 0x00000007, 0x00000006, 0x00040015, 0x00000008, 0x00000020,
    0x00000000, 0x00040017, 0x00000009, 0x00000008, 0x00000003, 0x00040020, 0x0000000a, 0x00000001,
    0x00000009, 0x00040020, 0x0000000b, 0x00000001, 0x00000008, 0x0004002b, 0x00000008, 0x0000000c,
    0x00000000, 0x0004002b, 0x00000008, 0x0000000d, 0x00000001, 0x0004002b, 0x00000008, 0x0000000e,
    0x00000002, 0x0004002b, 0x00000008, 0x0000000f, 0x00000040, 0x0004001c, 0x00000003, 0x00000008,
    0x0000000f, 0x0005001e, 0x00000004, 0x00000003, 0x00000003, 0x00000003, 0x00040020, 0x00000010,
    0x00000002, 0x00000004, 0x00040020, 0x00000011, 0x00000002, 0x00000008, 0x0004003b, 0x0000000a,
    0x00000002, 0x00000001, 0x0004003b, 0x00000010, 0x00000005, 0x00000002, 0x00050036, 0x00000006,
    0x00000001, 0x00000000, 0x00000007, 0x000200f8, 0x00000012, 0x00050041, 0x0000000b, 0x00000013,
    0x00000002, 0x0000000c, 0x0004003d, 0x00000008, 0x00000014, 0x00000013, 0x00060041, 0x00000011,
    0x00000015, 0x00000005, 0x0000000c, 0x00000014, 0x0004003d, 0x00000008, 0x00000016, 0x00000015,
    0x00060041, 0x00000011, 0x00000017, 0x00000005, 0x0000000d, 0x00000014, 0x0004003d, 0x00000008,
    0x00000018, 0x00000017, 0x00050080, 0x00000008, 0x00000019, 0x00000016, 0x00000018, 0x00060041,
    0x00000011, 0x0000001a, 0x00000005, 0x0000000e, 0x00000014, 0x0003003e, 0x0000001a, 0x00000019,
    0x000100fd, 0x00010038,
)
# fmt: on
VK_QUEUE_COMPUTE = 0x2
VK_BUFFER_USAGE_STORAGE = 0x20
VK_DESCRIPTOR_STORAGE_BUFFER = 7
VK_SHADER_STAGE_COMPUTE = 0x20
VK_BIND_POINT_COMPUTE = 1
VK_STAGE_COMPUTE_SHADER, VK_STAGE_HOST = 0x800, 0x4000
VK_ACCESS_SHADER_WRITE, VK_ACCESS_HOST_READ = 0x40, 0x2000
VK_WAIT_FOREVER = 0xFFFFFFFFFFFFFFFF  # a hung dispatch is the parent's deadline to end, and it names the call
ICD_DIRS = (
    "/etc/vulkan/icd.d",
    "/usr/local/etc/vulkan/icd.d",
    "/usr/local/share/vulkan/icd.d",
    "/usr/share/vulkan/icd.d",
    "/etc/xdg/vulkan/icd.d",
)


def _vk_version(value):
    return "%d.%d.%d" % ((value >> 22) & 0x7F, (value >> 12) & 0x3FF, value & 0xFFF)


def _vk_name(code):
    return VK_RESULTS.get(code, "VkResult %d" % code)


def _icd_manifests():
    """ICD manifests the loader would read: VK_DRIVER_FILES/VK_ICD_FILENAMES (files or dirs) or the default dirs."""
    listed = os.environ.get("VK_DRIVER_FILES") or os.environ.get("VK_ICD_FILENAMES")
    if listed:
        entries = [entry for entry in listed.split(":") if entry]
    else:
        data_dirs = (os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(":")
        entries = list(ICD_DIRS) + [os.path.join(d, "vulkan/icd.d") for d in data_dirs if d]
        extra = os.environ.get("VK_ADD_DRIVER_FILES")
        if extra:
            entries = [entry for entry in extra.split(":") if entry] + entries
    manifests = []
    for entry in entries:
        found = sorted(glob.glob(os.path.join(entry, "*.json"))) if os.path.isdir(entry) else [entry]
        manifests.extend(path for path in found if os.path.isfile(path) and path not in manifests)
    return manifests[:64]


def _manifest_libraries(manifests):
    """The driver libraries the Vulkan ICD manifests name (as written in them)."""
    names = []
    for path in manifests:
        try:
            with open(path, "rb") as file:
                library = json.loads(file.read(1 << 16).decode("utf-8", "replace"))["ICD"]["library_path"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(library, str) and library:
            names.append(
                library
                if library.startswith("/") or "/" not in library
                else os.path.join(os.path.dirname(path), library)
            )
    return names


def _opencl_icd_libraries():
    """The driver libraries OpenCL ICD registrations name: vendors dir files and the loaders' env vars."""
    names = [name for name in os.environ.get("OCL_ICD_FILENAMES", "").split(":") if name]
    vendors = os.environ.get("OCL_ICD_VENDORS") or os.environ.get("OPENCL_VENDOR_PATH") or "/etc/OpenCL/vendors"
    files = sorted(glob.glob(os.path.join(vendors, "*.icd"))) if os.path.isdir(vendors) else []
    if not os.path.isdir(vendors) and vendors.endswith(".icd"):
        files = [vendors]
    elif not os.path.isdir(vendors):
        names.append(vendors)  # OCL-ICD also takes a library here
    for path in files[:64]:
        try:
            with open(path, "rb") as file:
                line = file.read(4096).decode("utf-8", "replace").strip().splitlines()
        except OSError:
            continue
        if line:
            names.append(line[0].strip())
    return names


def _venus_manifests(manifests):
    return [path for path in manifests if os.path.basename(path).startswith("virtio_icd")]


def _vk_structs(ctypes):
    C = ctypes

    class AppInfo(C.Structure):
        _fields_ = [
            ("sType", C.c_int32),
            ("pNext", C.c_void_p),
            ("pApplicationName", C.c_char_p),
            ("applicationVersion", C.c_uint32),
            ("pEngineName", C.c_char_p),
            ("engineVersion", C.c_uint32),
            ("apiVersion", C.c_uint32),
        ]

    class InstanceInfo(C.Structure):
        _fields_ = [
            ("sType", C.c_int32),
            ("pNext", C.c_void_p),
            ("flags", C.c_uint32),
            ("pApplicationInfo", C.POINTER(AppInfo)),
            ("enabledLayerCount", C.c_uint32),
            ("ppEnabledLayerNames", C.c_void_p),
            ("enabledExtensionCount", C.c_uint32),
            ("ppEnabledExtensionNames", C.c_void_p),
        ]

    class Properties(C.Structure):  # VkPhysicalDeviceProperties, 824 bytes; limits kept opaque but aligned
        _fields_ = [
            ("apiVersion", C.c_uint32),
            ("driverVersion", C.c_uint32),
            ("vendorID", C.c_uint32),
            ("deviceID", C.c_uint32),
            ("deviceType", C.c_int32),
            ("deviceName", C.c_char * 256),
            ("pipelineCacheUUID", C.c_uint8 * 16),
            ("_pad", C.c_uint32),
            ("_limits", C.c_uint64 * 63),
            ("_sparse", C.c_uint32 * 5),
            ("_tail", C.c_uint32),
        ]

    class Properties2(C.Structure):
        _fields_ = [("sType", C.c_int32), ("pNext", C.c_void_p), ("properties", Properties)]

    class DriverProperties(C.Structure):
        _fields_ = [
            ("sType", C.c_int32),
            ("pNext", C.c_void_p),
            ("driverID", C.c_int32),
            ("driverName", C.c_char * 256),
            ("driverInfo", C.c_char * 256),
            ("conformanceVersion", C.c_uint8 * 4),
        ]

    class ExtensionProperties(C.Structure):
        _fields_ = [("extensionName", C.c_char * 256), ("specVersion", C.c_uint32)]

    class MemoryType(C.Structure):
        _fields_ = [("propertyFlags", C.c_uint32), ("heapIndex", C.c_uint32)]

    class MemoryHeap(C.Structure):
        _fields_ = [("size", C.c_uint64), ("flags", C.c_uint32)]

    class MemoryProperties(C.Structure):  # 520 bytes
        _fields_ = [
            ("memoryTypeCount", C.c_uint32),
            ("memoryTypes", MemoryType * 32),
            ("memoryHeapCount", C.c_uint32),
            ("memoryHeaps", MemoryHeap * 16),
        ]

    class QueueInfo(C.Structure):
        _fields_ = [
            ("sType", C.c_int32),
            ("pNext", C.c_void_p),
            ("flags", C.c_uint32),
            ("queueFamilyIndex", C.c_uint32),
            ("queueCount", C.c_uint32),
            ("pQueuePriorities", C.POINTER(C.c_float)),
        ]

    class DeviceInfo(C.Structure):
        _fields_ = [
            ("sType", C.c_int32),
            ("pNext", C.c_void_p),
            ("flags", C.c_uint32),
            ("queueCreateInfoCount", C.c_uint32),
            ("pQueueCreateInfos", C.POINTER(QueueInfo)),
            ("enabledLayerCount", C.c_uint32),
            ("ppEnabledLayerNames", C.c_void_p),
            ("enabledExtensionCount", C.c_uint32),
            ("ppEnabledExtensionNames", C.c_void_p),
            ("pEnabledFeatures", C.c_void_p),
        ]

    class AllocateInfo(C.Structure):
        _fields_ = [
            ("sType", C.c_int32),
            ("pNext", C.c_void_p),
            ("allocationSize", C.c_uint64),
            ("memoryTypeIndex", C.c_uint32),
        ]

    class QueueFamily(C.Structure):  # VkQueueFamilyProperties, 24 bytes
        _fields_ = [("queueFlags", C.c_uint32), ("queueCount", C.c_uint32), ("_rest", C.c_uint32 * 4)]

    def info(*fields):
        """A Vulkan create-info struct: sType, pNext, then `fields`."""
        return type("Info", (C.Structure,), {"_fields_": [("sType", C.c_int32), ("pNext", C.c_void_p), *fields]})

    handle, u32, u64, ptr = C.c_uint64, C.c_uint32, C.c_uint64, C.c_void_p  # non-dispatchable handles are 64-bit
    stage = info(
        ("flags", u32), ("stage", u32), ("module", handle), ("pName", C.c_char_p), ("pSpecializationInfo", ptr)
    )
    compute = dict(
        BufferInfo=info(
            ("flags", u32),
            ("size", u64),
            ("usage", u32),
            ("sharingMode", u32),
            ("queueFamilyIndexCount", u32),
            ("pQueueFamilyIndices", ptr),
        ),
        MemoryRequirements=type(
            "MemoryRequirements", (C.Structure,), {"_fields_": [("size", u64), ("alignment", u64), ("bits", u32)]}
        ),
        ShaderInfo=info(("flags", u32), ("codeSize", C.c_size_t), ("pCode", ptr)),
        Binding=type(
            "Binding",
            (C.Structure,),
            {"_fields_": [("binding", u32), ("type", u32), ("count", u32), ("stages", u32), ("samplers", ptr)]},
        ),
        SetLayoutInfo=info(("flags", u32), ("bindingCount", u32), ("pBindings", ptr)),
        PipelineLayoutInfo=info(
            ("flags", u32), ("setLayoutCount", u32), ("pSetLayouts", ptr), ("rangeCount", u32), ("pRanges", ptr)
        ),
        PipelineInfo=info(
            ("flags", u32), ("stage", stage), ("layout", handle), ("basePipeline", handle), ("baseIndex", C.c_int32)
        ),
        PoolSize=type("PoolSize", (C.Structure,), {"_fields_": [("type", u32), ("count", u32)]}),
        PoolInfo=info(("flags", u32), ("maxSets", u32), ("poolSizeCount", u32), ("pPoolSizes", ptr)),
        SetAllocateInfo=info(("pool", handle), ("count", u32), ("pSetLayouts", ptr)),
        BufferRange=type(
            "BufferRange", (C.Structure,), {"_fields_": [("buffer", handle), ("offset", u64), ("range", u64)]}
        ),
        WriteSet=info(
            ("dstSet", handle),
            ("dstBinding", u32),
            ("dstArrayElement", u32),
            ("count", u32),
            ("type", u32),
            ("pImageInfo", ptr),
            ("pBufferInfo", ptr),
            ("pTexelBufferView", ptr),
        ),
        CommandPoolInfo=info(("flags", u32), ("queueFamilyIndex", u32)),
        CommandBufferInfo=info(("pool", handle), ("level", u32), ("count", u32)),
        BeginInfo=info(("flags", u32), ("pInheritanceInfo", ptr)),
        MemoryBarrier=info(("srcAccessMask", u32), ("dstAccessMask", u32)),
        FenceInfo=info(("flags", u32)),
        SubmitInfo=info(
            ("waitCount", u32),
            ("pWaitSemaphores", ptr),
            ("pWaitStages", ptr),
            ("commandBufferCount", u32),
            ("pCommandBuffers", ptr),
            ("signalCount", u32),
            ("pSignalSemaphores", ptr),
        ),
    )
    return dict(
        compute,
        QueueFamily=QueueFamily,
        AppInfo=AppInfo,
        InstanceInfo=InstanceInfo,
        Properties=Properties,
        Properties2=Properties2,
        DriverProperties=DriverProperties,
        ExtensionProperties=ExtensionProperties,
        MemoryProperties=MemoryProperties,
        QueueInfo=QueueInfo,
        DeviceInfo=DeviceInfo,
        AllocateInfo=AllocateInfo,
    )


def probe_vulkan(ctypes, work):
    C = ctypes
    S = _vk_structs(C)
    os.environ.setdefault("VK_LOADER_DEBUG", "error,warn")  # why a driver was skipped goes to stderr
    manifests = _icd_manifests()
    drivers = _manifest_libraries(manifests)
    before = _mapped_libraries()
    lib, failure = _load(C, ("libvulkan.so.1",))
    if lib is None:
        return _not_loaded(
            "no Vulkan loader: libvulkan.so.1 is not installed here (the image must bring it, "
            "e.g. libvulkan1 or vulkan-loader)",
            failure,
        )
    gipa = lib.vkGetInstanceProcAddr
    gipa.restype, gipa.argtypes = C.c_void_p, [C.c_void_p, C.c_char_p]
    library = _path_of(_address(C, gipa)) or "libvulkan.so.1"

    def fn(instance, name, restype, *argtypes):
        address = gipa(instance, name.encode())
        return C.CFUNCTYPE(restype, *argtypes)(address) if address else None

    loader_version = 1 << 22  # a 1.0 loader has no vkEnumerateInstanceVersion
    enumerate_version = fn(None, "vkEnumerateInstanceVersion", C.c_int32, C.POINTER(C.c_uint32))
    if enumerate_version is not None:
        value = C.c_uint32(0)
        if enumerate_version(C.byref(value)) == 0:
            loader_version = value.value
    api = min(loader_version & ~0xFFF, VK_API_1_3)
    app = S["AppInfo"](sType=0, pApplicationName=b"cgpu-probe", apiVersion=api)
    info = S["InstanceInfo"](sType=1, pApplicationInfo=C.pointer(app))
    instance = C.c_void_p()
    create = fn(None, "vkCreateInstance", C.c_int32, C.c_void_p, C.c_void_p, C.POINTER(C.c_void_p))
    code = create(C.byref(info), None, C.byref(instance))
    common = dict(library=library, loader_version=_vk_version(loader_version), manifests=manifests)
    if code != 0:
        return _result(
            False,
            "vkCreateInstance failed with %s (%d): %s%s"
            % (_vk_name(code), code, _vk_instance_hint(code, manifests), _nvidia_graphics_hint()),
            error=_vk_name(code),
            drivers_loaded=_drivers_loaded(before, drivers),
            **common,
        )
    try:
        devices, failed = _vk_devices(C, S, fn, instance, api, work)
        loaded = _drivers_loaded(before, drivers)  # the loader unloads them with the instance
    except VulkanError as exc:
        return _result(False, str(exc), error=_vk_name(exc.code), **common)
    finally:
        destroy = fn(instance, "vkDestroyInstance", None, C.c_void_p, C.c_void_p)
        destroy(instance, None)
    counted = [d for d in devices if d["counted"]]
    error = None
    if counted:
        summary = "Vulkan works with %d GPU(s): %s; each ran a compute dispatch, checked" % (
            len(counted),
            ", ".join(d["name"] for d in counted),
        )
    elif failed:
        summary = _not_working_summary("Vulkan lists %d GPU(s)" % len(failed), failed)
        error = failed[0]["work_error"]
    elif devices:
        summary = "Vulkan has no usable GPU, only: %s" % "; ".join(
            "%s (%s)" % (d["name"], d["reason"]) for d in devices
        )
    else:
        summary = "vkCreateInstance succeeded but no driver reports a device (is the GPU's /dev/dri node passed in?)"
    if not counted:
        summary += _nvidia_graphics_hint()
    venus = _venus_manifests(manifests)
    if venus and not any(d["driver_id"] == VK_DRIVER_VENUS for d in devices):
        summary += (
            "; the Venus driver (%s) gave no device: it needs the virtio-gpu /dev/dri node, and under "
            "krunkit stock Mesa fails to initialise; %s" % (venus[0], VENUS_FIX)
        )
    return _result(bool(counted), summary, error=error, devices=devices, drivers_loaded=loaded, **common)


def _nvidia_graphics_hint():
    """NVIDIA's container toolkit mounts its Vulkan driver only with the graphics capability."""
    capabilities = os.environ.get("NVIDIA_DRIVER_CAPABILITIES")
    if capabilities is None:
        if "NVIDIA_VISIBLE_DEVICES" not in os.environ:
            return ""
        capabilities = "utility,compute"  # the toolkit's default
    if {c.strip() for c in capabilities.split(",")} & {"graphics", "display", "all"}:
        return ""
    return (
        "; NVIDIA_DRIVER_CAPABILITIES=%s lacks graphics, so the NVIDIA container toolkit did not mount its "
        "Vulkan driver (add graphics)" % capabilities
    )


def _vk_instance_hint(code, manifests):
    venus = _venus_manifests(manifests)
    if code == -9:
        if not manifests:
            return "no Vulkan driver manifest (ICD) in the loader's search path"
        hint = "no driver listed in %d manifest(s) could be loaded or initialised" % len(manifests)
        if venus:
            hint += " (under krunkit, stock Mesa's Venus driver %s fails here; %s)" % (venus[0], VENUS_FIX)
        return hint
    if code in (-1, -3):
        if venus:
            return (
                "a driver failed to initialise; stock Mesa's Venus driver (%s) fails this way under krunkit "
                "and the loader then gives up on every driver; %s" % (venus[0], VENUS_FIX)
            )
        if code == -1:
            return "a driver ran out of host memory; the loader then aborts instance creation for all drivers"
        return "a driver failed to initialise"
    return "the loader or a driver refused to create an instance"


def _vk_devices(C, S, fn, instance, api, work):
    """The devices, each with its counting verdict, and those that would count but failed the work."""
    enumerate_devices = fn(
        instance, "vkEnumeratePhysicalDevices", C.c_int32, C.c_void_p, C.POINTER(C.c_uint32), C.c_void_p
    )
    count = C.c_uint32(0)
    code = enumerate_devices(instance, C.byref(count), None)
    if code != 0:
        raise VulkanError("vkEnumeratePhysicalDevices", code)
    handles = (C.c_void_p * max(count.value, 1))()
    code = enumerate_devices(instance, C.byref(count), handles)
    if code not in (0, 5):
        raise VulkanError("vkEnumeratePhysicalDevices", code)
    get_properties = fn(instance, "vkGetPhysicalDeviceProperties", None, C.c_void_p, C.c_void_p)
    get_properties2 = fn(instance, "vkGetPhysicalDeviceProperties2", None, C.c_void_p, C.c_void_p)
    enumerate_extensions = fn(
        instance,
        "vkEnumerateDeviceExtensionProperties",
        C.c_int32,
        C.c_void_p,
        C.c_char_p,
        C.POINTER(C.c_uint32),
        C.c_void_p,
    )
    devices, failed = [], []
    for handle in list(handles)[: count.value]:
        props = S["Properties"]()
        get_properties(handle, C.byref(props))
        entry = {
            "name": _text(props.deviceName) or "unnamed Vulkan device",
            "type": props.deviceType,
            "type_name": VK_TYPES.get(props.deviceType, "UNKNOWN"),
            "vendor_id": _hex(props.vendorID),
            "device_id": _hex(props.deviceID),
            "api_version": _vk_version(props.apiVersion),
            "driver_id": None,
            "driver_id_name": None,
        }
        if (
            api >= VK_API_1_1
            and get_properties2 is not None
            and (
                props.apiVersion >= VK_API_1_2
                or _has_extension(C, S, enumerate_extensions, handle, b"VK_KHR_driver_properties")
            )
        ):
            driver = S["DriverProperties"](sType=VK_ST_DRIVER_PROPERTIES)
            props2 = S["Properties2"](sType=VK_ST_PROPERTIES_2, pNext=C.cast(C.pointer(driver), C.c_void_p))
            get_properties2(handle, C.byref(props2))
            if driver.driverID:
                entry["driver_id"] = driver.driverID
                entry["driver_id_name"] = VK_DRIVER_IDS.get(driver.driverID, "UNKNOWN")
                entry["driver_name"] = _text(driver.driverName)
                entry["driver_info"] = _text(driver.driverInfo)
        if entry["driver_id"] == VK_DRIVER_VENUS:
            entry["allocated"], failure = _vk_allocate(C, S, fn, instance, handle)
            if failure:
                entry["allocation_error"] = failure
        entry["counted"], entry["reason"] = _vk_counts(entry, props.vendorID, props.deviceID)
        if work.wanted(entry["counted"]):
            label = "%s (Vulkan device %d)" % (entry["name"], len(devices))
            if _run_work(entry, _vk_work, C, S, fn, instance, handle, label, work):
                entry["reason"] += "; a compute dispatch ran and its result was checked"
            elif entry["counted"]:
                entry["counted"] = False
                entry["reason"] = "%s, but the compute check %s" % (entry["reason"], _work_failure(entry))
                failed.append(entry)
            else:
                entry["reason"] += "; the compute check %s" % _work_failure(entry)
        devices.append(entry)
    return devices, failed


class VulkanError(Exception):
    def __init__(self, call, code):
        super().__init__("%s failed with %s (%d)" % (call, _vk_name(code), code))
        self.code = code


def _has_extension(C, S, enumerate_extensions, handle, wanted):
    count = C.c_uint32(0)
    if enumerate_extensions(handle, None, C.byref(count), None) != 0 or not count.value:
        return False
    extensions = (S["ExtensionProperties"] * count.value)()
    if enumerate_extensions(handle, None, C.byref(count), extensions) not in (0, 5):
        return False
    return any(bytes(e.extensionName).split(b"\0", 1)[0] == wanted for e in extensions[: count.value])


def _vk_counts(entry, vendor_id, device_id):
    """(counted, reason): real GPU types only, software drivers never, Venus only if it allocates."""
    name, kind, driver = entry["name"], entry["type"], entry["driver_id"]
    lowered = name.lower()
    if driver == VK_DRIVER_VENUS and kind == 4:
        return False, "Venus forwarding a CPU device of the host (deviceType CPU), not a GPU"
    if driver == VK_DRIVER_LLVMPIPE or "llvmpipe" in lowered:
        return False, "lavapipe/llvmpipe, Mesa's CPU software driver"
    if driver == VK_DRIVER_SWIFTSHADER or "swiftshader" in lowered or (vendor_id, device_id) == (0x1AE0, 0xC0DE):
        return False, "SwiftShader, a CPU software driver"
    if "microsoft basic render" in lowered or "warp" in lowered.split():
        return False, "WARP, Microsoft's CPU software adapter"
    if vendor_id == VK_VENDOR_MESA:
        return False, "Mesa's software vendor ID 0x10005 (a CPU driver)"
    if kind == 4:
        if driver == VK_DRIVER_DOZEN:
            return False, "Dozen on WARP, the D3D12 software adapter (deviceType CPU)"
        return False, "deviceType CPU: a software driver"
    if kind not in (1, 2, 3):
        return False, "deviceType %s: not known to be a GPU" % VK_TYPES.get(kind, kind)
    if driver == VK_DRIVER_VENUS:
        if entry.get("allocated"):
            return True, (
                "Venus (virtio-gpu) forwarding the host's GPU; a %d-byte host-visible allocation "
                "and map worked" % VENUS_TEST_ALLOCATION
            )
        return False, "Venus enumerates but cannot allocate memory (%s); %s" % (
            entry.get("allocation_error", "failed"),
            VENUS_FIX,
        )
    return True, "a %s from driver %s" % (
        entry["type_name"].lower().replace("_", " "),
        entry["driver_name"] if entry.get("driver_name") else "unknown",
    )


def _vk_work(C, S, fn, instance, physical, label, work):
    """One dispatch of the check shader: a device, a storage buffer in host-visible memory, a compute
    pipeline from the embedded SPIR-V (where the driver's SPIR-V compiler runs), one dispatch, a
    fence, the sums read back and compared (raises WorkFailed)."""
    size = WORK_ITEMS * 4 * 3
    a, b, expected = _work_inputs()
    P, v, h, u32 = C.POINTER, C.c_void_p, C.c_uint64, C.c_uint32
    undo = []

    def function(name, restype, *argtypes):
        work.step(name, label)
        found = fn(instance, name, restype, *argtypes)
        if found is None:
            raise WorkFailed(name, "missing_function", "the loader does not return %s" % name)
        return found

    def call(name, argtypes, *args):
        code = function(name, C.c_int32, *argtypes)(*args)
        if code != 0:
            raise WorkFailed(name, _vk_name(code), "")

    def create(name, destroy, info, *before):
        """vkCreateX(device, info, NULL, &handle), and vkDestroyX(device, handle, NULL) afterwards."""
        handle = h()
        argtypes = (v, *(type(arg) for arg in before), v, v, P(h))
        call(name, argtypes, device, *before, C.byref(info), None, C.byref(handle))
        undo.append(lambda: function(destroy, None, v, h, v)(device, handle, None))
        return handle

    def address(struct):
        return C.cast(C.pointer(struct), v)

    try:
        get_families = function("vkGetPhysicalDeviceQueueFamilyProperties", None, v, P(u32), v)
        count = u32(0)
        get_families(physical, C.byref(count), None)
        families = (S["QueueFamily"] * max(count.value, 1))()
        get_families(physical, C.byref(count), families)
        family = next(
            (i for i, f in enumerate(families[: count.value]) if f.queueFlags & VK_QUEUE_COMPUTE and f.queueCount),
            None,
        )
        if family is None:
            raise WorkFailed("vkGetPhysicalDeviceQueueFamilyProperties", "no_compute_queue", "no queue family computes")
        memory = S["MemoryProperties"]()
        function("vkGetPhysicalDeviceMemoryProperties", None, v, v)(physical, C.byref(memory))
        priority = C.c_float(1.0)
        queue_info = S["QueueInfo"](
            sType=2, queueFamilyIndex=family, queueCount=1, pQueuePriorities=C.pointer(priority)
        )
        device_info = S["DeviceInfo"](sType=3, queueCreateInfoCount=1, pQueueCreateInfos=C.pointer(queue_info))
        device = v()
        call("vkCreateDevice", (v, v, v, P(v)), physical, C.byref(device_info), None, C.byref(device))
        undo.append(lambda: function("vkDestroyDevice", None, v, v)(device, None))
        queue = v()
        function("vkGetDeviceQueue", None, v, u32, u32, P(v))(device, family, 0, C.byref(queue))
        buffer = create("vkCreateBuffer", "vkDestroyBuffer", S["BufferInfo"](sType=12, size=size, usage=0x20))
        needs = S["MemoryRequirements"]()
        function("vkGetBufferMemoryRequirements", None, v, h, v)(device, buffer, C.byref(needs))
        index = _vk_host_memory_type(memory, needs.bits)
        if index is None:
            raise WorkFailed("vkGetBufferMemoryRequirements", "no_host_visible_memory", "the buffer cannot be mapped")
        block = h()
        allocate_info = S["AllocateInfo"](sType=5, allocationSize=needs.size, memoryTypeIndex=index)
        call("vkAllocateMemory", (v, v, v, P(h)), device, C.byref(allocate_info), None, C.byref(block))
        undo.append(lambda: function("vkFreeMemory", None, v, h, v)(device, block, None))
        call("vkBindBufferMemory", (v, h, h, C.c_uint64), device, buffer, block, 0)
        mapped = v()
        call("vkMapMemory", (v, h, C.c_uint64, C.c_uint64, u32, P(v)), device, block, 0, size, 0, C.byref(mapped))
        undo.append(lambda: function("vkUnmapMemory", None, v, h)(device, block))
        if not mapped.value:
            raise WorkFailed("vkMapMemory", "null_pointer", "the driver mapped the buffer at address 0")
        data = (u32 * (3 * WORK_ITEMS)).from_address(mapped.value)
        data[:] = a + b + [0] * WORK_ITEMS
        code = (u32 * len(VK_SHADER))(*VK_SHADER)
        shader = S["ShaderInfo"](sType=16, codeSize=C.sizeof(code), pCode=C.cast(code, v))
        module = create("vkCreateShaderModule", "vkDestroyShaderModule", shader)
        binding = S["Binding"](binding=0, type=VK_DESCRIPTOR_STORAGE_BUFFER, count=1, stages=VK_SHADER_STAGE_COMPUTE)
        set_layout = create(
            "vkCreateDescriptorSetLayout",
            "vkDestroyDescriptorSetLayout",
            S["SetLayoutInfo"](sType=32, bindingCount=1, pBindings=address(binding)),
        )
        layout = create(
            "vkCreatePipelineLayout",
            "vkDestroyPipelineLayout",
            S["PipelineLayoutInfo"](sType=30, setLayoutCount=1, pSetLayouts=address(set_layout)),
        )
        pipeline_info = S["PipelineInfo"](sType=29, layout=layout, baseIndex=-1)
        pipeline_info.stage.sType, pipeline_info.stage.stage = 18, VK_SHADER_STAGE_COMPUTE
        pipeline_info.stage.module, pipeline_info.stage.pName = module, b"main"
        pipeline = create("vkCreateComputePipelines", "vkDestroyPipeline", pipeline_info, h(0), u32(1))
        pool_size = S["PoolSize"](type=VK_DESCRIPTOR_STORAGE_BUFFER, count=1)
        pool = create(
            "vkCreateDescriptorPool",
            "vkDestroyDescriptorPool",
            S["PoolInfo"](sType=33, maxSets=1, poolSizeCount=1, pPoolSizes=address(pool_size)),
        )
        descriptor_set = h()
        set_info = S["SetAllocateInfo"](sType=34, pool=pool, count=1, pSetLayouts=address(set_layout))
        call("vkAllocateDescriptorSets", (v, v, P(h)), device, C.byref(set_info), C.byref(descriptor_set))
        buffer_range = S["BufferRange"](buffer=buffer, offset=0, range=size)
        write = S["WriteSet"](
            sType=35,
            dstSet=descriptor_set,
            count=1,
            type=VK_DESCRIPTOR_STORAGE_BUFFER,
            pBufferInfo=address(buffer_range),
        )
        function("vkUpdateDescriptorSets", None, v, u32, v, u32, v)(device, 1, C.byref(write), 0, None)
        command_pool = create(
            "vkCreateCommandPool", "vkDestroyCommandPool", S["CommandPoolInfo"](sType=39, queueFamilyIndex=family)
        )
        commands = v()
        command_info = S["CommandBufferInfo"](sType=40, pool=command_pool, level=0, count=1)
        call("vkAllocateCommandBuffers", (v, v, P(v)), device, C.byref(command_info), C.byref(commands))
        call("vkBeginCommandBuffer", (v, v), commands, C.byref(S["BeginInfo"](sType=42, flags=1)))
        function("vkCmdBindPipeline", None, v, u32, h)(commands, VK_BIND_POINT_COMPUTE, pipeline)
        function("vkCmdBindDescriptorSets", None, v, u32, h, u32, u32, P(h), u32, v)(
            commands, VK_BIND_POINT_COMPUTE, layout, 0, 1, C.byref(descriptor_set), 0, None
        )
        function("vkCmdDispatch", None, v, u32, u32, u32)(commands, 1, 1, 1)
        barrier = S["MemoryBarrier"](sType=46, srcAccessMask=VK_ACCESS_SHADER_WRITE, dstAccessMask=VK_ACCESS_HOST_READ)
        function("vkCmdPipelineBarrier", None, v, u32, u32, u32, u32, v, u32, v, u32, v)(
            commands, VK_STAGE_COMPUTE_SHADER, VK_STAGE_HOST, 0, 1, C.byref(barrier), 0, None, 0, None
        )
        call("vkEndCommandBuffer", (v,), commands)
        fence = create("vkCreateFence", "vkDestroyFence", S["FenceInfo"](sType=8))
        command_list = (v * 1)(commands)
        submit = S["SubmitInfo"](sType=4, commandBufferCount=1, pCommandBuffers=C.cast(command_list, v))
        call("vkQueueSubmit", (v, u32, v, h), queue, 1, C.byref(submit), fence)
        call("vkWaitForFences", (v, u32, P(h), u32, C.c_uint64), device, 1, C.byref(fence), 1, VK_WAIT_FOREVER)
        _check_sums(list(data[2 * WORK_ITEMS :]), expected)
    finally:
        for action in reversed(undo):
            try:
                action()
            except WorkFailed:
                pass  # the answer is the first failure; cleaning up after it may fail too


def _vk_host_memory_type(memory, allowed=0xFFFFFFFF):
    """The index of a host-visible (coherent where there is one) memory type among `allowed`, or None."""
    types = [
        (i, t.propertyFlags)
        for i, t in enumerate(list(memory.memoryTypes)[: min(memory.memoryTypeCount, 32)])
        if allowed & (1 << i)
    ]
    wanted = VK_MEMORY_HOST_VISIBLE | VK_MEMORY_HOST_COHERENT
    return next(
        (i for i, flags in types if flags & wanted == wanted),
        next((i for i, flags in types if flags & VK_MEMORY_HOST_VISIBLE), None),
    )


def _vk_allocate(C, S, fn, instance, handle):
    """Create a device, allocate and map a small host-visible block: (worked, failure or None)."""
    get_memory = fn(instance, "vkGetPhysicalDeviceMemoryProperties", None, C.c_void_p, C.c_void_p)
    create_device = fn(instance, "vkCreateDevice", C.c_int32, C.c_void_p, C.c_void_p, C.c_void_p, C.POINTER(C.c_void_p))
    destroy_device = fn(instance, "vkDestroyDevice", None, C.c_void_p, C.c_void_p)
    allocate = fn(instance, "vkAllocateMemory", C.c_int32, C.c_void_p, C.c_void_p, C.c_void_p, C.POINTER(C.c_uint64))
    free = fn(instance, "vkFreeMemory", None, C.c_void_p, C.c_uint64, C.c_void_p)
    map_memory = fn(
        instance,
        "vkMapMemory",
        C.c_int32,
        C.c_void_p,
        C.c_uint64,
        C.c_uint64,
        C.c_uint64,
        C.c_uint32,
        C.POINTER(C.c_void_p),
    )
    unmap = fn(instance, "vkUnmapMemory", None, C.c_void_p, C.c_uint64)
    if None in (get_memory, create_device, destroy_device, allocate, free, map_memory, unmap):
        return False, "the loader lacks a core device function"
    memory = S["MemoryProperties"]()
    get_memory(handle, C.byref(memory))
    index = _vk_host_memory_type(memory)
    if index is None:
        return False, "no host-visible memory type"
    priority = C.c_float(1.0)
    queue = S["QueueInfo"](sType=2, queueFamilyIndex=0, queueCount=1, pQueuePriorities=C.pointer(priority))
    info = S["DeviceInfo"](sType=3, queueCreateInfoCount=1, pQueueCreateInfos=C.pointer(queue))
    device = C.c_void_p()
    code = create_device(handle, C.byref(info), None, C.byref(device))
    if code != 0:
        return False, "vkCreateDevice: %s" % _vk_name(code)
    try:
        block = C.c_uint64(0)
        allocate_info = S["AllocateInfo"](sType=5, allocationSize=VENUS_TEST_ALLOCATION, memoryTypeIndex=index)
        code = allocate(device, C.byref(allocate_info), None, C.byref(block))
        if code != 0:
            return False, "vkAllocateMemory: %s" % _vk_name(code)
        try:
            pointer = C.c_void_p()
            code = map_memory(device, block.value, 0, VENUS_TEST_ALLOCATION, 0, C.byref(pointer))
            if code != 0 or not pointer.value:
                return False, "vkMapMemory: %s" % _vk_name(code)
            C.memset(pointer.value, 0xA5, VENUS_TEST_ALLOCATION)
            unmap(device, block.value)
        finally:
            free(device, block.value, None)
    finally:
        destroy_device(device, None)
    return True, None


# --------------------------------------------------------------------------------------------
# OpenCL

CL_ERRORS = {
    0: "CL_SUCCESS",
    -1: "CL_DEVICE_NOT_FOUND",
    -2: "CL_DEVICE_NOT_AVAILABLE",
    -3: "CL_COMPILER_NOT_AVAILABLE",
    -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE",
    -5: "CL_OUT_OF_RESOURCES",
    -6: "CL_OUT_OF_HOST_MEMORY",
    -11: "CL_BUILD_PROGRAM_FAILURE",
    -30: "CL_INVALID_VALUE",
    -32: "CL_INVALID_PLATFORM",
    -33: "CL_INVALID_DEVICE",
    -34: "CL_INVALID_CONTEXT",
    -36: "CL_INVALID_COMMAND_QUEUE",
    -38: "CL_INVALID_MEM_OBJECT",
    -44: "CL_INVALID_PROGRAM",
    -45: "CL_INVALID_PROGRAM_EXECUTABLE",
    -46: "CL_INVALID_KERNEL_NAME",
    -48: "CL_INVALID_KERNEL",
    -49: "CL_INVALID_ARG_INDEX",
    -51: "CL_INVALID_ARG_SIZE",
    -52: "CL_INVALID_KERNEL_ARGS",
    -54: "CL_INVALID_WORK_GROUP_SIZE",
    -1001: "CL_PLATFORM_NOT_FOUND_KHR",
}
# The check kernel, built from source by the driver's OpenCL C compiler.
CL_KERNEL = b"cgpu_add"
CL_KERNEL_SOURCE = b"""
__kernel void cgpu_add(__global const uint *a, __global const uint *b, __global uint *c, const uint n)
{
    size_t i = get_global_id(0);
    if (i < n) c[i] = a[i] + b[i];
}
"""
CL_PROGRAM_BUILD_LOG = 0x1183
CL_MEM_WRITE_ONLY, CL_MEM_READ_ONLY, CL_MEM_COPY_HOST_PTR = 2, 4, 32
BUILD_LOG_LINES = 5
NVIDIA_OPENCL = "libnvidia-opencl.so.1"
CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ACCELERATOR = 2, 4, 8
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_PLATFORM_VERSION, CL_PLATFORM_NAME, CL_PLATFORM_VENDOR = 0x0901, 0x0902, 0x0903
CL_DEVICE_TYPE, CL_DEVICE_VENDOR_ID = 0x1000, 0x1001
CL_DEVICE_NAME, CL_DEVICE_VENDOR, CL_DRIVER_VERSION = 0x102B, 0x102C, 0x102D


def _cl_type_name(value):
    names = [
        name
        for bit, name in ((1, "DEFAULT"), (2, "CPU"), (4, "GPU"), (8, "ACCELERATOR"), (16, "CUSTOM"))
        if value & bit
    ]
    return "|".join(names) or "NONE"


def probe_opencl(ctypes, work):
    C = ctypes
    before = _mapped_libraries()
    lib, failure = _load(C, ("libOpenCL.so.1",))
    if lib is None:
        return _not_loaded(
            "no OpenCL ICD loader: libOpenCL.so.1 is not installed here (the image must bring it, "
            "e.g. ocl-icd-libopencl1 or ocl-icd)",
            failure,
        )
    library = _path_of(_address(C, lib.clGetPlatformIDs)) or "libOpenCL.so.1"
    lib.clGetPlatformIDs.argtypes = [C.c_uint32, C.c_void_p, C.POINTER(C.c_uint32)]
    lib.clGetPlatformIDs.restype = C.c_int32
    lib.clGetPlatformInfo.argtypes = [C.c_void_p, C.c_uint32, C.c_size_t, C.c_void_p, C.POINTER(C.c_size_t)]
    lib.clGetPlatformInfo.restype = C.c_int32
    lib.clGetDeviceIDs.argtypes = [C.c_void_p, C.c_uint64, C.c_uint32, C.c_void_p, C.POINTER(C.c_uint32)]
    lib.clGetDeviceIDs.restype = C.c_int32
    lib.clGetDeviceInfo.argtypes = [C.c_void_p, C.c_uint32, C.c_size_t, C.c_void_p, C.POINTER(C.c_size_t)]
    lib.clGetDeviceInfo.restype = C.c_int32

    def info_string(getter, handle, param):
        buffer = C.create_string_buffer(1024)
        if getter(handle, param, 1024, buffer, None) != 0:
            return ""
        return _text(buffer.raw)

    count = C.c_uint32(0)
    code = lib.clGetPlatformIDs(0, None, C.byref(count))
    if code != 0 or not count.value:
        name = CL_ERRORS.get(code, "CL error %d" % code) if code else None
        hint = (
            "no OpenCL driver (ICD) is registered: add /etc/OpenCL/vendors/<vendor>.icd naming the driver "
            "library, or set OCL_ICD_FILENAMES / OCL_ICD_VENDORS"
            if code in (-1001, 0)
            else "the ICD loader failed"
        )
        loaded = _drivers_loaded(before, _opencl_icd_libraries())
        return _result(
            False,
            "clGetPlatformIDs found no platform (%s): %s%s"
            % (name or "none listed", hint, _unregistered_nvidia_opencl(C, loaded)),
            library=library,
            error=name,
            drivers_loaded=loaded,
        )
    platforms = (C.c_void_p * count.value)()
    code = lib.clGetPlatformIDs(count.value, platforms, C.byref(count))
    if code != 0:
        name = CL_ERRORS.get(code, "CL error %d" % code)
        return _result(False, "clGetPlatformIDs failed with %s" % name, library=library, error=name)
    devices = []
    platform_names = []
    for platform in list(platforms)[: count.value]:
        platform_name = info_string(lib.clGetPlatformInfo, platform, CL_PLATFORM_NAME) or "unnamed platform"
        platform_names.append(platform_name)
        n = C.c_uint32(0)
        if lib.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, None, C.byref(n)) != 0 or not n.value:
            continue
        handles = (C.c_void_p * n.value)()
        if lib.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n.value, handles, C.byref(n)) != 0:
            continue
        for handle in list(handles)[: min(n.value, 64)]:
            kind = C.c_uint64(0)  # cl_device_type is 64-bit
            lib.clGetDeviceInfo(handle, CL_DEVICE_TYPE, 8, C.byref(kind), None)
            vendor_id = C.c_uint32(0)
            lib.clGetDeviceInfo(handle, CL_DEVICE_VENDOR_ID, 4, C.byref(vendor_id), None)
            entry = {
                "name": info_string(lib.clGetDeviceInfo, handle, CL_DEVICE_NAME) or "unnamed OpenCL device",
                "type": kind.value,
                "type_name": _cl_type_name(kind.value),
                "vendor": info_string(lib.clGetDeviceInfo, handle, CL_DEVICE_VENDOR),
                "vendor_id": _hex(vendor_id.value),
                "platform": platform_name,
                "driver_version": info_string(lib.clGetDeviceInfo, handle, CL_DRIVER_VERSION),
            }
            entry["counted"], entry["reason"] = _cl_counts(entry, kind.value)
            label = "%s (%s)" % (entry["name"], platform_name)
            if work.wanted(entry["counted"]):
                if _run_work(entry, _cl_work, C, lib, handle, label, work):
                    entry["reason"] += "; a kernel was built from source, ran and checked"
                elif entry["counted"]:
                    entry["counted"] = False
                    entry["reason"] = "an OpenCL %s device, but the check kernel %s" % (
                        _cl_type_name(kind.value),
                        _work_failure(entry),
                    )
                else:
                    entry["reason"] += "; the check kernel %s" % _work_failure(entry)
            devices.append(entry)
    counted = [d for d in devices if d["counted"]]
    loaded = _drivers_loaded(before, _opencl_icd_libraries())
    failed = [
        d
        for d in devices
        if d.get("work") == "failed" and d["type"] & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)
    ]
    error = None
    if counted:
        summary = "OpenCL works with %d GPU/accelerator device(s): %s; each ran a kernel, checked" % (
            len(counted),
            ", ".join("%s (%s)" % (d["name"], d["platform"]) for d in counted),
        )
    elif failed:
        summary = _not_working_summary("OpenCL lists %d GPU/accelerator device(s)" % len(failed), failed)
        error = failed[0]["work_error"]
    elif devices:
        summary = "OpenCL has no GPU, only: %s" % "; ".join("%s (%s)" % (d["name"], d["reason"]) for d in devices)
    else:
        summary = "OpenCL platform(s) %s report no device" % ", ".join(platform_names)
    if not counted:
        summary += _unregistered_nvidia_opencl(C, loaded)
    return _result(
        bool(counted),
        summary,
        library=library,
        error=error,
        devices=devices,
        platforms=platform_names,
        drivers_loaded=loaded,
    )


def _cl_work(C, lib, device, label, work):
    """The vector add on one OpenCL device: build from source, run, read back, compare (raises WorkFailed)."""
    size = WORK_ITEMS * 4
    a, b, expected = _work_inputs()
    status = C.c_int32(0)
    undo = []
    P, v = C.POINTER, C.c_void_p

    def function(name, restype, argtypes):
        work.step(name, label)
        try:
            function_ = getattr(lib, name)
        except AttributeError:
            raise WorkFailed(name, "missing_function", "the ICD loader does not export %s" % name) from None
        function_.argtypes, function_.restype = argtypes, restype
        return function_

    def check(name, code, detail=""):
        if code != 0:
            raise WorkFailed(name, CL_ERRORS.get(code, "CL error %d" % code), detail)

    def create(name, release, argtypes, *args):
        """A call that returns an object (freed by `release` afterwards) and its status in its last argument."""
        handle = function(name, v, [*argtypes, P(C.c_int32)])(*args, C.byref(status))
        check(name, status.value)
        if not handle:
            raise WorkFailed(name, "null_handle", "the call returned no object and no error")
        undo.append(lambda: function(release, C.c_int32, [v])(handle))
        return handle

    try:
        device_list = (v * 1)(device)
        context = create(
            "clCreateContext", "clReleaseContext", [v, C.c_uint32, v, v, v], None, 1, device_list, None, None
        )
        queue = create("clCreateCommandQueue", "clReleaseCommandQueue", [v, v, C.c_uint64], context, device, 0)
        source = C.c_char_p(CL_KERNEL_SOURCE)
        length = C.c_size_t(len(CL_KERNEL_SOURCE))
        program = create(
            "clCreateProgramWithSource",
            "clReleaseProgram",
            [v, C.c_uint32, P(C.c_char_p), P(C.c_size_t)],
            context,
            1,
            C.byref(source),
            C.byref(length),
        )
        code = function("clBuildProgram", C.c_int32, [v, C.c_uint32, v, C.c_char_p, v, v])(
            program, 1, device_list, b"", None, None
        )
        if code != 0:
            check("clBuildProgram", code, _cl_build_log(C, lib, program, device))
        kernel = create("clCreateKernel", "clReleaseKernel", [v, C.c_char_p], program, CL_KERNEL)
        buffers = []
        for flags, values in (
            (CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, a),
            (CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, b),
        ):
            host = (C.c_uint32 * WORK_ITEMS)(*values)
            buffers.append(
                create(
                    "clCreateBuffer", "clReleaseMemObject", [v, C.c_uint64, C.c_size_t, v], context, flags, size, host
                )
            )
        buffers.append(
            create(
                "clCreateBuffer",
                "clReleaseMemObject",
                [v, C.c_uint64, C.c_size_t, v],
                context,
                CL_MEM_WRITE_ONLY,
                size,
                None,
            )
        )
        set_arg = function("clSetKernelArg", C.c_int32, [v, C.c_uint32, C.c_size_t, v])
        for index, buffer in enumerate(buffers):
            check("clSetKernelArg", set_arg(kernel, index, C.sizeof(v), C.byref(v(buffer))))
        check("clSetKernelArg", set_arg(kernel, 3, 4, C.byref(C.c_uint32(WORK_ITEMS))))
        global_size = C.c_size_t(WORK_ITEMS)
        enqueue = function(
            "clEnqueueNDRangeKernel", C.c_int32, [v, v, C.c_uint32, v, P(C.c_size_t), v, C.c_uint32, v, v]
        )
        check("clEnqueueNDRangeKernel", enqueue(queue, kernel, 1, None, C.byref(global_size), None, 0, None, None))
        check("clFinish", function("clFinish", C.c_int32, [v])(queue))
        result = (C.c_uint32 * WORK_ITEMS)()
        read = function(
            "clEnqueueReadBuffer", C.c_int32, [v, v, C.c_uint32, C.c_size_t, C.c_size_t, v, C.c_uint32, v, v]
        )
        check("clEnqueueReadBuffer", read(queue, buffers[2], 1, 0, size, result, 0, None, None))
        _check_sums(list(result), expected)
    finally:
        for action in reversed(undo):
            try:
                action()
            except WorkFailed:
                pass  # the answer is the first failure; cleaning up after it may fail too


def _cl_build_log(C, lib, program, device):
    """The first lines of a failed build's log (what the compiler said), or ''."""
    get_info = lib.clGetProgramBuildInfo
    get_info.argtypes = [C.c_void_p, C.c_void_p, C.c_uint32, C.c_size_t, C.c_void_p, C.POINTER(C.c_size_t)]
    get_info.restype = C.c_int32
    size = C.c_size_t(0)
    if get_info(program, device, CL_PROGRAM_BUILD_LOG, 0, None, C.byref(size)) != 0 or not size.value:
        return ""
    log = C.create_string_buffer(min(size.value, 1 << 16))
    if get_info(program, device, CL_PROGRAM_BUILD_LOG, len(log), log, None) != 0:
        return ""
    text = log.raw.split(b"\0", 1)[0].decode("utf-8", "replace")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "build log: " + " / ".join(lines[:BUILD_LOG_LINES])[:MAX_TEXT] if lines else ""


def _unregistered_nvidia_opencl(C, loaded):
    """NVIDIA's compute-only containers get the OpenCL driver but not its registration: say so."""
    if any("libnvidia-opencl" in path for path in loaded):
        return ""
    try:
        C.CDLL(NVIDIA_OPENCL)
    except OSError:
        return ""
    return (
        "; %s is here but not registered: add /etc/OpenCL/vendors/nvidia.icd containing %s, or set "
        "OCL_ICD_FILENAMES=%s" % (NVIDIA_OPENCL, NVIDIA_OPENCL, NVIDIA_OPENCL)
    )


def _cl_counts(entry, kind):
    software = "pocl" in entry["platform"].lower() or "portable computing language" in entry["platform"].lower()
    if "llvmpipe" in entry["name"].lower():
        return False, "rusticl on llvmpipe, Mesa's CPU software driver (RUSTICL_DEVICE_TYPE can make it claim GPU)"
    if kind & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR):
        return True, "an OpenCL %s device of platform %s" % (_cl_type_name(kind), entry["platform"])
    if kind & CL_DEVICE_TYPE_CPU:
        if software:
            return False, "PoCL's CPU device (CL_DEVICE_TYPE_CPU): runs on the processor, not a GPU"
        return False, "a CPU device (CL_DEVICE_TYPE_CPU), not a GPU"
    return False, "device type %s is not a GPU or accelerator" % _cl_type_name(kind)


# --------------------------------------------------------------------------------------------
# ROCm (HSA runtime)

HSA_STATUS = {
    0x1000: "HSA_STATUS_ERROR",
    0x1001: "HSA_STATUS_ERROR_INVALID_ARGUMENT",
    0x1004: "HSA_STATUS_ERROR_INVALID_AGENT",
    0x1008: "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
    0x100B: "HSA_STATUS_ERROR_NOT_INITIALIZED",
}
HSA_AGENT_INFO_NAME, HSA_AGENT_INFO_VENDOR_NAME, HSA_AGENT_INFO_DEVICE = 0, 1, 17
HSA_AMD_AGENT_INFO_PRODUCT_NAME = 0xA009
HSA_DEVICE_TYPE_GPU = 1


def probe_rocm(ctypes):
    C = ctypes
    rocm = os.environ.get("ROCM_PATH") or "/opt/rocm"
    lib, failure = _load(C, ("libhsa-runtime64.so.1", os.path.join(rocm, "lib/libhsa-runtime64.so.1")))
    if lib is None:
        return _not_loaded(
            "no ROCm runtime: libhsa-runtime64.so.1 is not installed here (ROCm images bring it)", failure
        )
    library = _path_of(_address(C, lib.hsa_init)) or "libhsa-runtime64.so.1"
    lib.hsa_init.restype = C.c_int
    code = lib.hsa_init()
    if code != 0:
        name = HSA_STATUS.get(code, "HSA status 0x%x" % code)
        hint = (
            "the runtime could not open the GPU: pass /dev/kfd and the GPU's /dev/dri/renderD* node, "
            "readable by this user"
            if code == 0x1008
            else "the runtime failed to initialise"
        )
        if code == 0x1008 and not os.path.exists("/dev/kfd"):
            hint += " (/dev/kfd is missing here)"
        return _result(False, "hsa_init failed with %s: %s" % (name, hint), library=library, error=name)
    devices = []
    try:
        get_info = lib.hsa_agent_get_info
        get_info.argtypes, get_info.restype = [C.c_uint64, C.c_int, C.c_void_p], C.c_int
        callback_type = C.CFUNCTYPE(C.c_int, C.c_uint64, C.c_void_p)

        def visit(agent, _data):
            kind = C.c_int(-1)
            if get_info(agent, HSA_AGENT_INFO_DEVICE, C.byref(kind)) != 0 or kind.value != HSA_DEVICE_TYPE_GPU:
                return 0
            name, product = C.create_string_buffer(64), C.create_string_buffer(64)
            get_info(agent, HSA_AGENT_INFO_NAME, name)
            if get_info(agent, HSA_AMD_AGENT_INFO_PRODUCT_NAME, product) != 0:
                product.value = b""
            devices.append(
                {
                    "name": _text(product.raw) or _text(name.raw) or "HSA GPU agent",
                    "gfx_target": _text(name.raw),
                    "counted": True,
                    "reason": "an HSA GPU agent",
                }
            )
            return 0

        lib.hsa_iterate_agents.argtypes = [callback_type, C.c_void_p]
        code = lib.hsa_iterate_agents(callback_type(visit), None)
    finally:
        lib.hsa_shut_down()
    if code != 0:
        name = HSA_STATUS.get(code, "HSA status 0x%x" % code)
        return _result(False, "hsa_iterate_agents failed with %s" % name, library=library, error=name)
    if not devices:
        return _result(False, "the HSA runtime started but sees only CPU agents, no GPU", library=library)
    return _result(
        True,
        "ROCm (HSA) works with %d GPU agent(s): %s" % (len(devices), ", ".join(d["name"] for d in devices)),
        library=library,
        devices=devices,
    )


# --------------------------------------------------------------------------------------------
# DirectML / D3D12 on WSL (DXCore adapter enumeration through its COM vtables)

WSL_LIB = "/usr/lib/wsl/lib"
DXCORE_IS_HARDWARE, DXCORE_DRIVER_DESCRIPTION, DXCORE_HARDWARE_ID = 11, 2, 3
IID_FACTORY = "78ee5945-c36e-4b13-a669-005dd11c0f06"
IID_LIST = "526c7776-40e9-459b-b711-f32ad76dfc28"
IID_ADAPTER = "f0db4c7f-fe5a-42a2-bd62-f2a6cf6fc83e"
ATTRIBUTE_D3D12_CORE_COMPUTE = "248e2800-a793-4724-abaa-23a6de1be090"
WARP_IDS = (0x1414, 0x008C)


def probe_directml(ctypes):
    C = ctypes
    if not os.path.exists("/dev/dxg"):
        return _result(
            False,
            "no /dev/dxg: not WSL, or the container was started without --device /dev/dxg",
            error="no_device_node",
        )
    try:
        os.close(os.open("/dev/dxg", os.O_RDWR))
    except OSError as exc:
        return _result(False, "/dev/dxg is present but cannot be opened: %s" % exc.strerror, error="no_access")
    dxcore, dxcore_failure = _load(C, ("libdxcore.so", os.path.join(WSL_LIB, "libdxcore.so")))
    d3d12, d3d12_failure = _load(C, ("libd3d12.so", os.path.join(WSL_LIB, "libd3d12.so")))
    missing = [name for name, lib in (("libdxcore.so", dxcore), ("libd3d12.so", d3d12)) if lib is None]
    if missing:
        return _not_loaded(
            "/dev/dxg is here but %s is not: mount %s into the container" % (" and ".join(missing), WSL_LIB),
            dxcore_failure or d3d12_failure,
        )
    library = _path_of(_address(C, d3d12.D3D12CreateDevice)) or "libd3d12.so"
    try:
        devices = _dxcore_adapters(C, dxcore)
    except (OSError, AttributeError, DXCoreError) as exc:
        return _result(
            False,
            "/dev/dxg and the D3D12 libraries are here but DXCore could not list adapters: %s" % exc,
            library=library,
            error="DXCORE_ENUM_FAILED",
        )
    counted = [d for d in devices if d["counted"]]
    if counted:
        summary = "D3D12 (DirectML) has %d hardware adapter(s): %s" % (
            len(counted),
            ", ".join(d["name"] for d in counted),
        )
    else:
        summary = "D3D12 sees no hardware compute adapter%s" % (
            ", only: " + "; ".join(d["name"] for d in devices) if devices else ""
        )
    return _result(bool(counted), summary, library=library, devices=devices)


class DXCoreError(Exception):
    pass


def _guid(C, text):
    import uuid

    class GUID(C.Structure):
        _fields_ = [("data1", C.c_uint32), ("data2", C.c_uint16), ("data3", C.c_uint16), ("data4", C.c_uint8 * 8)]

    value = uuid.UUID(text)
    fields = value.fields
    return GUID(fields[0], fields[1], fields[2], (C.c_uint8 * 8)(*value.bytes[8:]))


def _method(C, obj, slot, restype, *argtypes):
    vtable = C.cast(obj, C.POINTER(C.POINTER(C.c_void_p)))[0]
    return C.CFUNCTYPE(restype, C.c_void_p, *argtypes)(vtable[slot])


def _dxcore_adapters(C, dxcore):
    create = dxcore.DXCoreCreateAdapterFactory
    create.argtypes, create.restype = [C.c_void_p, C.POINTER(C.c_void_p)], C.c_int32
    factory = C.c_void_p()
    code = create(C.byref(_guid(C, IID_FACTORY)), C.byref(factory))
    if code < 0 or not factory.value:
        raise DXCoreError("DXCoreCreateAdapterFactory returned 0x%08x" % (code & 0xFFFFFFFF))
    release = lambda obj: _method(C, obj, 2, C.c_uint32)(obj)  # noqa: E731
    adapters = C.c_void_p()
    try:
        attribute = _guid(C, ATTRIBUTE_D3D12_CORE_COMPUTE)
        code = _method(C, factory, 3, C.c_int32, C.c_uint32, C.c_void_p, C.c_void_p, C.POINTER(C.c_void_p))(
            factory, 1, C.byref(attribute), C.byref(_guid(C, IID_LIST)), C.byref(adapters)
        )
        if code < 0 or not adapters.value:
            raise DXCoreError("CreateAdapterList returned 0x%08x" % (code & 0xFFFFFFFF))
        devices = []
        count = _method(C, adapters, 4, C.c_uint32)(adapters)
        for index in range(min(count, 64)):
            adapter = C.c_void_p()
            if (
                _method(C, adapters, 3, C.c_int32, C.c_uint32, C.c_void_p, C.POINTER(C.c_void_p))(
                    adapters, index, C.byref(_guid(C, IID_ADAPTER)), C.byref(adapter)
                )
                < 0
                or not adapter.value
            ):
                continue
            try:
                devices.append(_dxcore_adapter(C, adapter, index))
            finally:
                release(adapter)
        return devices
    finally:
        if adapters.value:
            release(adapters)
        release(factory)


def _dxcore_adapter(C, adapter, index):
    """One IDXCoreAdapter as a device entry: counted only when DXCore says it is hardware."""
    get_property = _method(C, adapter, 6, C.c_int32, C.c_uint32, C.c_size_t, C.c_void_p)
    get_size = _method(C, adapter, 7, C.c_int32, C.c_uint32, C.POINTER(C.c_size_t))
    name = "D3D12 adapter %d" % index
    size = C.c_size_t(0)
    if get_size(adapter, DXCORE_DRIVER_DESCRIPTION, C.byref(size)) >= 0 and 0 < size.value <= 4096:
        description = C.create_string_buffer(size.value)
        if get_property(adapter, DXCORE_DRIVER_DESCRIPTION, size.value, description) >= 0:
            name = _text(description.raw) or name
    ids = (C.c_uint32 * 4)()  # DXCoreHardwareID: vendor, device, subsystem, revision
    known_ids = get_property(adapter, DXCORE_HARDWARE_ID, 16, ids) >= 0
    hardware = C.c_bool(False)
    if get_property(adapter, DXCORE_IS_HARDWARE, 1, C.byref(hardware)) < 0:
        counted, reason = False, "DXCore could not say whether this adapter is hardware"
    elif hardware.value and (ids[0], ids[1]) != WARP_IDS:
        counted, reason = True, "a hardware D3D12 compute adapter"
    else:
        counted, reason = False, "a software adapter (WARP, Microsoft Basic Render Driver), not a GPU"
    entry = {"name": name, "hardware": bool(hardware.value), "counted": counted, "reason": reason}
    if known_ids:
        entry.update(vendor_id=_hex(ids[0]), device_id=_hex(ids[1]))
    return entry


# --------------------------------------------------------------------------------------------
# Entry points

PROBES = {
    "cuda": probe_cuda,
    "rocm": probe_rocm,
    "vulkan": probe_vulkan,
    "opencl": probe_opencl,
    "directml": probe_directml,
}


WORK_APIS = ("cuda", "vulkan", "opencl")  # the APIs whose devices must run the check work to count


def child_main(api, work):
    """Run one API's probe; the answer goes to the original stdout, drivers' chatter to stderr."""
    answer_fd = os.dup(1)
    os.dup2(2, 1)  # anything a driver prints on stdout must not corrupt the answer
    try:
        import ctypes
    except ImportError as exc:
        result = _result(False, "this Python has no ctypes (%s), so no driver can be loaded" % exc, error="no_ctypes")
    else:
        try:
            result = PROBES[api](ctypes, work) if api in WORK_APIS else PROBES[api](ctypes)
        except Exception as exc:  # a driver answering nonsense must still give an answer
            result = _result(
                False,
                "the %s probe failed: %s: %s" % (api, type(exc).__name__, str(exc)[:MAX_TEXT]),
                error="probe_error",
            )
    with os.fdopen(answer_fd, "w") as answer:
        json.dump(result, answer)
    return 0


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(prog="probe.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds each API may take (default %(default)g)"
    )
    parser.add_argument("--api", action="append", choices=APIS, help="probe only this API (repeatable)")
    parser.add_argument("--human", action="store_true", help="print for a person, not JSON (the default)")
    parser.add_argument(
        "--work-on-software",
        action="store_true",
        help="also run the check work on software devices (lavapipe, PoCL); they still never count",
    )
    parser.add_argument("--child", choices=sorted(PROBES), help=argparse.SUPPRESS)
    parser.add_argument("--progress-fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child, Work(args.work_on_software, args.progress_fd))
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    try:
        data = run_probe(args.api, args.timeout, args.work_on_software)
    except KeyboardInterrupt:
        sys.stderr.write("probe.py: interrupted\n")
        return 130
    if args.human:
        sys.stdout.write(render_human(data) + "\n")
        return 0
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


# --------------------------------------------------------------------------------------------
# --human: the answer for a person (cgpu.terminal has the same sanitiser; a test keeps them equal)

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}


def _shown(char):
    if char.isprintable() or char == " ":
        return char
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:
        return "\\x%02x" % (code - 0xDC00)
    return "\\x%02x" % code if code < 0x100 else "\\u%04x" % code


def escape(text):
    """Every character Python does not call printable (controls, bidi overrides, lone surrogates)
    shown escaped: a driver's name or stderr cannot move the cursor, forge a line or write the clipboard."""
    value = str(text)
    return value if value.isprintable() else "".join(map(_shown, value))


def render_human(data, columns=None):
    import shutil
    import textwrap

    if columns is None:
        columns = shutil.get_terminal_size((80, 24)).columns if sys.stdout.isatty() else 80
    columns = max(columns, 40)

    def wrap(text, first, hang):
        return textwrap.wrap(
            escape(text), columns, initial_indent=first, subsequent_indent=" " * hang, break_on_hyphens=False
        ) or [first.rstrip()]

    apis = data.get("apis", {})
    usable = [api for api in APIS if apis.get(api, {}).get("available")]
    lines = ["GPU APIs that work here: %s" % (", ".join(usable) or "none")]
    lines += wrap(
        "probe %s · %s · Python %s · %s"
        % (data.get("probe_version"), data.get("platform"), data.get("python"), data.get("libc")),
        "",
        2,
    )
    for api in APIS:
        if api not in apis:
            continue
        result = apis[api]
        mark = "+" if result.get("available") else "-"
        lines += wrap(result.get("summary", ""), "  %s %-9s" % (mark, api), 13)
        for device in result.get("devices") or []:
            state = "counted" if device.get("counted") else "not counted: %s" % device.get("reason", "")
            lines += wrap("%s (%s)" % (device.get("name", "?"), state), " " * 13, 15)
        if result.get("stderr"):
            lines += wrap("stderr: %s" % result["stderr"], " " * 13, 15)
    if data.get("device_nodes"):
        lines += wrap("device nodes: %s" % ", ".join(map(str, data["device_nodes"])), "", 2)
    for name, value in sorted((data.get("env") or {}).items()):
        lines += wrap("%s=%s" % (name, value), "env ", 4)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
