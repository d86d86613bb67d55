/* A stand-in for NVIDIA's libcuda.so.1 (driver API), steered by environment variables:
 *   FAKE_CUDA_INIT   cuInit's return code (default 0), or "hang" / "crash"
 *   FAKE_CUDA_COUNT  number of devices after a successful cuInit (default 0)
 *   FAKE_CUDA_FAIL   "cuName:code": that call returns code (cuModuleLoadDataEx also writes a JIT log)
 *   FAKE_CUDA_HANG   "cuName": that call never returns
 *   FAKE_CUDA_WRONG  set: the kernel computes element 5 wrongly
 *   FAKE_CUDA_TRACE  a file: every call made after cuInit is appended to it, one name a line
 * Devices are named "Fake GPU <n>", compute capability 9.0, 80 GiB. Like the real driver,
 * cuModuleLoadDataEx JIT-compiles PTX with libnvidia-ptxjitcompiler.so.1, loaded by dlopen when
 * first needed: without it the call fails with CUDA_ERROR_JIT_COMPILER_NOT_FOUND (221). Device
 * memory is host memory; cuLaunchKernel runs the vector add on the host. */
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int initialised;

/* The code the test asks `call` to return (0 when not asked), after tracing it; hangs if asked. */
static int steer(const char *call) {
    const char *trace = getenv("FAKE_CUDA_TRACE");
    if (trace) {
        FILE *file = fopen(trace, "a");
        if (file) { fprintf(file, "%s\n", call); fclose(file); }
    }
    const char *hang = getenv("FAKE_CUDA_HANG");
    if (hang && strcmp(hang, call) == 0) for (;;) pause();
    const char *fail = getenv("FAKE_CUDA_FAIL");
    size_t n = strlen(call);
    if (fail && strncmp(fail, call, n) == 0 && fail[n] == ':') return atoi(fail + n + 1);
    return 0;
}

static int env_int(const char *name, int fallback) {
    const char *value = getenv(name);
    return value ? atoi(value) : fallback;
}

int cuDriverGetVersion(int *version) {
    if (!version) return 1;
    *version = 12040;
    return 0;
}

int cuInit(unsigned int flags) {
    const char *mode = getenv("FAKE_CUDA_INIT");
    if (flags != 0) return 1;
    if (mode && strcmp(mode, "hang") == 0) for (;;) pause();
    if (mode && strcmp(mode, "crash") == 0) raise(SIGSEGV);
    printf("fake libcuda: chatter on stdout\n");
    int code = mode ? atoi(mode) : 0;
    initialised = code == 0;
    return code;
}

int cuDeviceGetCount(int *count) {
    if (!initialised) return 3;
    *count = env_int("FAKE_CUDA_COUNT", 0);
    return 0;
}

int cuDeviceGet(int *device, int ordinal) {
    if (!initialised) return 3;
    if (ordinal < 0 || ordinal >= env_int("FAKE_CUDA_COUNT", 0)) return 101;
    *device = ordinal;
    return 0;
}

int cuDeviceGetName(char *name, int len, int device) {
    snprintf(name, (size_t)len, "Fake GPU %d", device);
    return 0;
}

int cuDeviceGetAttribute(int *value, int attribute, int device) {
    (void)device;
    switch (attribute) {
    case 75: *value = 9; return 0;  /* compute capability major */
    case 76: *value = 0; return 0;
    case 18: *value = 0; return 0;  /* integrated */
    default: return 1;
    }
}

int cuDeviceTotalMem_v2(size_t *bytes, int device) {
    (void)device;
    *bytes = (size_t)80 << 30;
    return 0;
}

int cuGetErrorName(int code, const char **name) {
    if (code == 222) { *name = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"; return 0; }
    return 1;
}

/* ---- the check work ---- */
typedef unsigned long long CUdeviceptr;
static int context_marker, module_marker, function_marker;
static void *current_context;

int cuDevicePrimaryCtxRetain(void **context, int device) {
    int code = steer("cuDevicePrimaryCtxRetain");
    if (code) return code;
    if (!initialised) return 3;
    if (device < 0 || device >= env_int("FAKE_CUDA_COUNT", 0)) return 101;
    *context = &context_marker;
    return 0;
}

int cuDevicePrimaryCtxRelease_v2(int device) {
    (void)device;
    current_context = NULL;
    return steer("cuDevicePrimaryCtxRelease_v2");
}

int cuCtxSetCurrent(void *context) {
    int code = steer("cuCtxSetCurrent");
    if (code) return code;
    if (context != &context_marker) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    current_context = context;
    return 0;
}

int cuModuleLoadDataEx(void **module, const void *image, unsigned count, int *options, void **values) {
    int code = steer("cuModuleLoadDataEx");
    char *log = NULL;
    size_t log_size = 0;
    for (unsigned i = 0; i < count; i++) {
        if (options[i] == 5) log = values[i];                      /* CU_JIT_ERROR_LOG_BUFFER */
        if (options[i] == 6) log_size = (size_t)values[i];         /* ..._SIZE_BYTES */
    }
    if (!current_context) return 201;
    if (code == 218 && log && log_size)
        snprintf(log, log_size, "ptxas application ptx input, line 2; fatal   : Parsing error near '.target'\nptxas fatal   : Ptx assembly aborted");
    if (code) return code;
    if (!dlopen("libnvidia-ptxjitcompiler.so.1", RTLD_NOW)) return 221;
    if (!strstr(image, ".entry cgpu_add(") || !strstr(image, ".target sm_")) return 218;
    *module = &module_marker;
    return 0;
}

int cuModuleGetFunction(void **function, void *module, const char *name) {
    int code = steer("cuModuleGetFunction");
    if (code) return code;
    if (module != &module_marker || strcmp(name, "cgpu_add") != 0) return 500; /* CUDA_ERROR_NOT_FOUND */
    *function = &function_marker;
    return 0;
}

int cuModuleUnload(void *module) {
    (void)module;
    return steer("cuModuleUnload");
}

int cuMemAlloc_v2(CUdeviceptr *pointer, size_t size) {
    int code = steer("cuMemAlloc_v2");
    if (code) return code;
    void *memory = calloc(1, size);
    if (!memory) return 2;
    *pointer = (CUdeviceptr)(uintptr_t)memory;
    return 0;
}

int cuMemFree_v2(CUdeviceptr pointer) {
    free((void *)(uintptr_t)pointer);
    return steer("cuMemFree_v2");
}

int cuMemcpyHtoD_v2(CUdeviceptr destination, const void *source, size_t size) {
    int code = steer("cuMemcpyHtoD_v2");
    if (code) return code;
    memcpy((void *)(uintptr_t)destination, source, size);
    return 0;
}

int cuMemcpyDtoH_v2(void *destination, CUdeviceptr source, size_t size) {
    int code = steer("cuMemcpyDtoH_v2");
    if (code) return code;
    memcpy(destination, (void *)(uintptr_t)source, size);
    return 0;
}

int cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) {
    int code = steer("cuLaunchKernel");
    if (code) return code;
    if (function != &function_marker || !params || extra || shared || stream) return 1;
    unsigned *a = (unsigned *)(uintptr_t)*(CUdeviceptr *)params[0];
    unsigned *b = (unsigned *)(uintptr_t)*(CUdeviceptr *)params[1];
    unsigned *c = (unsigned *)(uintptr_t)*(CUdeviceptr *)params[2];
    unsigned n = *(unsigned *)params[3];
    unsigned threads = gx * gy * gz * bx * by * bz;
    for (unsigned i = 0; i < n && i < threads; i++) c[i] = a[i] + b[i];
    if (getenv("FAKE_CUDA_WRONG") && n > 5) c[5] += 1;
    return 0;
}

int cuCtxSynchronize(void) {
    return steer("cuCtxSynchronize");
}
