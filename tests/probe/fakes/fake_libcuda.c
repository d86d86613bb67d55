/* A stand-in for NVIDIA's libcuda.so.1 (driver API), steered by environment variables:
 *   FAKE_CUDA_INIT   cuInit's return code (default 0), or "hang" / "crash"
 *   FAKE_CUDA_COUNT  number of devices after a successful cuInit (default 0)
 * Devices are named "Fake GPU <n>", compute capability 9.0, 80 GiB. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int initialised;

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
