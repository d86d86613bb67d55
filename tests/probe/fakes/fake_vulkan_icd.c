/* A Vulkan driver (ICD) for the real Khronos loader, steered by environment variables:
 *   FAKE_VK_INSTANCE  "ok" (default), a VkResult for vkCreateInstance (e.g. -1, -3), "hang" or "crash"
 *   FAKE_VK_DEVICES   devices separated by ';', each "type,driverID,vendorID,deviceID,allocResult,mapResult,name"
 *                     e.g. "1,22,0x106b,0x1,0,0,Virtio-GPU Venus (Apple M2)"
 *   FAKE_VK_FAIL      "vkName:result": that call of the check work returns that VkResult
 *   FAKE_VK_HANG      "vkName": that call never returns
 *   FAKE_VK_WRONG     set: the dispatch computes element 7 wrongly
 *   FAKE_VK_TRACE     a file: each object the check work creates or destroys is appended ("+Buffer", "-Buffer")
 * The check work's dispatch runs on the host at vkQueueSubmit: c[i] = a[i] + b[i] over the mapped
 * buffer {a[64], b[64], c[64]}, after checking the shader module is SPIR-V.
 * Dispatchable objects start with the loader's magic word, as the loader-driver interface requires. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ICD_LOADER_MAGIC 0x01CDC0DE
#define EXPORT __attribute__((visibility("default")))
typedef int32_t VkResult;
typedef void (*PFN_vkVoidFunction)(void);
typedef struct { uintptr_t magic; } Dispatchable;

#define MAX_DEVICES 8
typedef struct {
    uintptr_t magic;
    int type, driver_id, alloc_result, map_result;
    unsigned vendor_id, device_id;
    char name[256];
} FakePhysicalDevice;

static Dispatchable the_instance = {ICD_LOADER_MAGIC};
static FakePhysicalDevice devices[MAX_DEVICES];
static uint32_t device_count;
static char mapped[1 << 16];

static void parse_devices(void) {
    const char *spec = getenv("FAKE_VK_DEVICES");
    device_count = 0;
    if (!spec) return;
    char buffer[4096];
    snprintf(buffer, sizeof buffer, "%s", spec);
    char *save = NULL;
    for (char *item = strtok_r(buffer, ";", &save); item && device_count < MAX_DEVICES;
         item = strtok_r(NULL, ";", &save)) {
        FakePhysicalDevice *d = &devices[device_count];
        memset(d, 0, sizeof *d);
        d->magic = ICD_LOADER_MAGIC;
        if (sscanf(item, "%d,%d,%i,%i,%d,%d,%255[^;]", &d->type, &d->driver_id, (int *)&d->vendor_id,
                   (int *)&d->device_id, &d->alloc_result, &d->map_result, d->name) == 7)
            device_count++;
    }
}

/* ---- instance level ---- */
static VkResult CreateInstance(const void *info, const void *allocator, void **instance) {
    (void)info; (void)allocator;
    const char *mode = getenv("FAKE_VK_INSTANCE");
    if (mode && strcmp(mode, "hang") == 0) for (;;) pause();
    if (mode && strcmp(mode, "crash") == 0) raise(SIGSEGV);
    if (mode && strcmp(mode, "ok") != 0) return atoi(mode);
    parse_devices();
    *instance = &the_instance;
    return 0;
}
static void DestroyInstance(void *instance, const void *allocator) { (void)instance; (void)allocator; }
static VkResult EnumerateInstanceExtensionProperties(const char *layer, uint32_t *count, void *props) {
    (void)layer; (void)props; *count = 0; return 0;
}
static VkResult EnumerateInstanceVersion(uint32_t *version) { *version = (1u << 22) | (3u << 12); return 0; }
static VkResult EnumeratePhysicalDevices(void *instance, uint32_t *count, void **handles) {
    (void)instance;
    if (!handles) { *count = device_count; return 0; }
    uint32_t n = *count < device_count ? *count : device_count;
    for (uint32_t i = 0; i < n; i++) handles[i] = &devices[i];
    *count = n;
    return n < device_count ? 5 : 0;
}

/* VkPhysicalDeviceProperties: apiVersion@0 driverVersion@4 vendorID@8 deviceID@12 deviceType@16 deviceName@20; 824 bytes */
static void fill_properties(FakePhysicalDevice *d, unsigned char *p) {
    memset(p, 0, 824);
    uint32_t api = (1u << 22) | (3u << 12) | 250;
    memcpy(p + 0, &api, 4);
    memcpy(p + 8, &d->vendor_id, 4);
    memcpy(p + 12, &d->device_id, 4);
    memcpy(p + 16, &d->type, 4);
    snprintf((char *)p + 20, 256, "%s", d->name);
}
static void GetPhysicalDeviceProperties(void *pd, void *props) { fill_properties(pd, props); }

typedef struct { int32_t sType; void *pNext; } BaseOut;
static void GetPhysicalDeviceProperties2(void *pd, void *props2) {
    FakePhysicalDevice *d = pd;
    fill_properties(d, (unsigned char *)props2 + 16);
    for (BaseOut *s = ((BaseOut *)props2)->pNext; s; s = s->pNext) {
        if (s->sType == 1000196000) { /* VkPhysicalDeviceDriverProperties */
            unsigned char *p = (unsigned char *)s;
            memcpy(p + 16, &d->driver_id, 4);
            snprintf((char *)p + 20, 256, "%s", d->driver_id == 22 ? "venus" : "fake");
            snprintf((char *)p + 276, 256, "Fake Mesa 25.3.6");
        }
    }
}
static VkResult EnumerateDeviceExtensionProperties(void *pd, const char *layer, uint32_t *count, void *props) {
    (void)pd; (void)layer;
    if (!props) { *count = 1; return 0; }
    if (*count < 1) return 5;
    memset(props, 0, 260);
    strcpy(props, "VK_KHR_driver_properties");
    *count = 1;
    return 0;
}
static void GetPhysicalDeviceMemoryProperties(void *pd, void *props) {
    (void)pd;
    uint32_t *p = props;
    memset(props, 0, 520);
    p[0] = 1;                 /* memoryTypeCount */
    p[1] = 0x2 | 0x4;         /* HOST_VISIBLE | HOST_COHERENT */
    p[2] = 0;                 /* heapIndex */
    p[65] = 1;                /* memoryHeapCount at byte 260 */
}
static void GetPhysicalDeviceQueueFamilyProperties(void *pd, uint32_t *count, void *props) {
    (void)pd;
    if (!props) { *count = 1; return; }
    uint32_t family[6] = {0x1 | 0x2, 1, 64, 1, 1, 1};
    memcpy(props, family, sizeof family);
    *count = 1;
}

/* Core 1.0 entry points the loader requires of every driver; the probe never calls them. */
static void GetPhysicalDeviceFeatures(void *pd, void *features) { (void)pd; memset(features, 0, 220); }
static void GetPhysicalDeviceFormatProperties(void *pd, int format, void *props) { (void)pd; (void)format; memset(props, 0, 12); }
static VkResult GetPhysicalDeviceImageFormatProperties(void *pd, int f, int t, int ti, uint32_t u, uint32_t c, void *p) {
    (void)pd; (void)f; (void)t; (void)ti; (void)u; (void)c; (void)p; return -11; /* VK_ERROR_FORMAT_NOT_SUPPORTED */
}
static void GetPhysicalDeviceSparseImageFormatProperties(void *pd, int f, int t, int s, uint32_t u, int ti,
                                                         uint32_t *count, void *p) {
    (void)pd; (void)f; (void)t; (void)s; (void)u; (void)ti; (void)p; *count = 0;
}

static void trace(char sign, const char *object) {
    const char *path = getenv("FAKE_VK_TRACE");
    FILE *file = path ? fopen(path, "a") : NULL;
    if (file) { fprintf(file, "%c%s\n", sign, object); fclose(file); }
}

/* The result the test asks `call` to return (0 when not asked); hangs if asked. */
static VkResult steer(const char *call) {
    const char *hang = getenv("FAKE_VK_HANG");
    if (hang && strcmp(hang, call) == 0) for (;;) pause();
    const char *fail = getenv("FAKE_VK_FAIL");
    size_t n = strlen(call);
    if (fail && strncmp(fail, call, n) == 0 && fail[n] == ':') return atoi(fail + n + 1);
    return 0;
}

/* ---- device level ---- */
typedef struct { uintptr_t magic; FakePhysicalDevice *physical; } FakeDevice;
static FakeDevice the_device;
static VkResult CreateDevice(void *pd, const void *info, const void *allocator, void **device) {
    (void)info; (void)allocator;
    the_device.magic = ICD_LOADER_MAGIC;
    the_device.physical = pd;
    *device = &the_device;
    trace('+', "Device");
    return 0;
}
static void DestroyDevice(void *device, const void *allocator) { (void)device; (void)allocator; trace('-', "Device"); }
static VkResult AllocateMemory(void *device, const void *info, const void *allocator, uint64_t *memory) {
    (void)info; (void)allocator;
    VkResult result = ((FakeDevice *)device)->physical->alloc_result;
    if (result == 0) { *memory = 0x1234; trace('+', "Memory"); }
    return result;
}
static void FreeMemory(void *device, uint64_t memory, const void *allocator) {
    (void)device; (void)memory; (void)allocator; trace('-', "Memory");
}
static VkResult MapMemory(void *device, uint64_t memory, uint64_t offset, uint64_t size, uint32_t flags, void **data) {
    (void)memory; (void)offset; (void)size; (void)flags;
    VkResult result = ((FakeDevice *)device)->physical->map_result;
    if (result == 0) { *data = mapped; trace('+', "Mapping"); }
    return result;
}
static void UnmapMemory(void *device, uint64_t memory) { (void)device; (void)memory; trace('-', "Mapping"); }

/* The check work: objects are counters, except the dispatchable queue and command buffer. */
static Dispatchable the_queue = {ICD_LOADER_MAGIC}, the_commands = {ICD_LOADER_MAGIC};
static uint64_t next_handle = 0x100;
static int spirv_seen;
static uint32_t dispatched;
#define CREATE(name) \
    static VkResult name(void *device, const void *info, const void *allocator, uint64_t *handle) { \
        (void)device; (void)info; (void)allocator; \
        VkResult result = steer("vk" #name); \
        if (result == 0) { *handle = next_handle++; trace('+', #name + 6); } \
        return result; \
    }
#define DESTROY(name) \
    static void name(void *device, uint64_t handle, const void *allocator) { \
        (void)device; (void)handle; (void)allocator; trace('-', #name + 7); \
    }
CREATE(CreateBuffer) CREATE(CreateDescriptorSetLayout) CREATE(CreatePipelineLayout) CREATE(CreateDescriptorPool)
CREATE(CreateCommandPool) CREATE(CreateFence)
DESTROY(DestroyBuffer) DESTROY(DestroyShaderModule) DESTROY(DestroyDescriptorSetLayout) DESTROY(DestroyPipelineLayout)
DESTROY(DestroyPipeline) DESTROY(DestroyDescriptorPool) DESTROY(DestroyCommandPool) DESTROY(DestroyFence)

typedef struct { int32_t sType; const void *pNext; uint32_t flags; size_t codeSize; const uint32_t *pCode; } ShaderInfo;
static VkResult CreateShaderModule(void *device, const ShaderInfo *info, const void *allocator, uint64_t *handle) {
    (void)device; (void)allocator;
    VkResult result = steer("vkCreateShaderModule");
    if (result) return result;
    if (info->sType != 16 || info->codeSize < 20 || info->codeSize % 4 || info->pCode[0] != 0x07230203) return -3;
    spirv_seen = 1;
    *handle = next_handle++;
    trace('+', "ShaderModule");
    return 0;
}
static VkResult CreateComputePipelines(void *device, uint64_t cache, uint32_t count, const void *infos,
                                       const void *allocator, uint64_t *pipelines) {
    (void)device; (void)cache; (void)infos; (void)allocator;
    VkResult result = steer("vkCreateComputePipelines");
    if (result) return result;
    if (!spirv_seen) return -3;
    for (uint32_t i = 0; i < count; i++) pipelines[i] = next_handle++;
    trace('+', "Pipeline");
    return 0;
}
static void GetDeviceQueue(void *device, uint32_t family, uint32_t index, void **queue) {
    (void)device; (void)family; (void)index; *queue = &the_queue;
}
static void GetBufferMemoryRequirements(void *device, uint64_t buffer, uint64_t *needs) {
    (void)device; (void)buffer;
    needs[0] = 4096; needs[1] = 64; needs[2] = 1; /* size, alignment, memoryTypeBits */
}
static VkResult BindBufferMemory(void *device, uint64_t buffer, uint64_t memory, uint64_t offset) {
    (void)device; (void)buffer; (void)memory; (void)offset; return steer("vkBindBufferMemory");
}
static VkResult AllocateDescriptorSets(void *device, const void *info, uint64_t *sets) {
    (void)device; (void)info;
    VkResult result = steer("vkAllocateDescriptorSets");
    if (result == 0) *sets = next_handle++;
    return result;
}
static void UpdateDescriptorSets(void *device, uint32_t writes, const void *w, uint32_t copies, const void *c) {
    (void)device; (void)writes; (void)w; (void)copies; (void)c;
}
static VkResult AllocateCommandBuffers(void *device, const void *info, void **buffers) {
    (void)device; (void)info;
    VkResult result = steer("vkAllocateCommandBuffers");
    if (result == 0) *buffers = &the_commands;
    return result;
}
static VkResult BeginCommandBuffer(void *commands, const void *info) { (void)commands; (void)info; dispatched = 0; return 0; }
static VkResult EndCommandBuffer(void *commands) { (void)commands; return steer("vkEndCommandBuffer"); }
static void CmdBindPipeline(void *commands, int point, uint64_t pipeline) { (void)commands; (void)point; (void)pipeline; }
static void CmdBindDescriptorSets(void *commands, int point, uint64_t layout, uint32_t first, uint32_t count,
                                  const uint64_t *sets, uint32_t offsets, const uint32_t *o) {
    (void)commands; (void)point; (void)layout; (void)first; (void)count; (void)sets; (void)offsets; (void)o;
}
static void CmdDispatch(void *commands, uint32_t x, uint32_t y, uint32_t z) { (void)commands; dispatched = x * y * z; }
static void CmdPipelineBarrier(void *commands, uint32_t src, uint32_t dst, uint32_t flags, uint32_t n1, const void *b1,
                               uint32_t n2, const void *b2, uint32_t n3, const void *b3) {
    (void)commands; (void)src; (void)dst; (void)flags; (void)n1; (void)b1; (void)n2; (void)b2; (void)n3; (void)b3;
}
static VkResult QueueSubmit(void *queue, uint32_t count, const void *submits, uint64_t fence) {
    (void)queue; (void)count; (void)submits; (void)fence;
    VkResult result = steer("vkQueueSubmit");
    if (result) return result;
    uint32_t *data = (uint32_t *)mapped;
    for (uint32_t i = 0; i < 64 * dispatched && i < 64; i++) data[128 + i] = data[i] + data[64 + i];
    if (getenv("FAKE_VK_WRONG")) data[128 + 7] ^= 1;
    return 0;
}
static VkResult WaitForFences(void *device, uint32_t count, const uint64_t *fences, uint32_t all, uint64_t timeout) {
    (void)device; (void)count; (void)fences; (void)all; (void)timeout;
    return steer("vkWaitForFences");
}

#define ENTRY(name) {"vk" #name, (PFN_vkVoidFunction)name}
static const struct { const char *name; PFN_vkVoidFunction fn; } device_entries[] = {
    ENTRY(DestroyDevice), ENTRY(AllocateMemory), ENTRY(FreeMemory), ENTRY(MapMemory), ENTRY(UnmapMemory),
    ENTRY(CreateBuffer), ENTRY(DestroyBuffer), ENTRY(GetBufferMemoryRequirements), ENTRY(BindBufferMemory),
    ENTRY(CreateShaderModule), ENTRY(DestroyShaderModule), ENTRY(CreateDescriptorSetLayout),
    ENTRY(DestroyDescriptorSetLayout), ENTRY(CreatePipelineLayout), ENTRY(DestroyPipelineLayout),
    ENTRY(CreateComputePipelines), ENTRY(DestroyPipeline), ENTRY(CreateDescriptorPool), ENTRY(DestroyDescriptorPool),
    ENTRY(AllocateDescriptorSets), ENTRY(UpdateDescriptorSets), ENTRY(CreateCommandPool), ENTRY(DestroyCommandPool),
    ENTRY(AllocateCommandBuffers), ENTRY(BeginCommandBuffer), ENTRY(EndCommandBuffer), ENTRY(CmdBindPipeline),
    ENTRY(CmdBindDescriptorSets), ENTRY(CmdDispatch), ENTRY(CmdPipelineBarrier), ENTRY(CreateFence),
    ENTRY(DestroyFence), ENTRY(GetDeviceQueue), ENTRY(QueueSubmit), ENTRY(WaitForFences),
};
static PFN_vkVoidFunction lookup_device(const char *name);
static PFN_vkVoidFunction GetDeviceProcAddr(void *device, const char *name) { (void)device; return lookup_device(name); }
static PFN_vkVoidFunction lookup_device(const char *name) {
    if (strcmp(name, "vkGetDeviceProcAddr") == 0) return (PFN_vkVoidFunction)GetDeviceProcAddr;
    for (size_t i = 0; i < sizeof device_entries / sizeof *device_entries; i++)
        if (strcmp(name, device_entries[i].name) == 0) return device_entries[i].fn;
    return NULL;
}

static const struct { const char *name; PFN_vkVoidFunction fn; } instance_entries[] = {
    ENTRY(CreateInstance), ENTRY(DestroyInstance), ENTRY(EnumerateInstanceExtensionProperties),
    ENTRY(EnumerateInstanceVersion), ENTRY(EnumeratePhysicalDevices), ENTRY(GetPhysicalDeviceProperties),
    ENTRY(GetPhysicalDeviceProperties2), ENTRY(EnumerateDeviceExtensionProperties),
    ENTRY(GetPhysicalDeviceMemoryProperties), ENTRY(GetPhysicalDeviceQueueFamilyProperties),
    ENTRY(CreateDevice), ENTRY(GetDeviceProcAddr), ENTRY(GetPhysicalDeviceFeatures),
    ENTRY(GetPhysicalDeviceFormatProperties), ENTRY(GetPhysicalDeviceImageFormatProperties),
    ENTRY(GetPhysicalDeviceSparseImageFormatProperties),
};

EXPORT PFN_vkVoidFunction vk_icdGetInstanceProcAddr(void *instance, const char *name) {
    (void)instance;
    for (size_t i = 0; i < sizeof instance_entries / sizeof *instance_entries; i++)
        if (strcmp(name, instance_entries[i].name) == 0) return instance_entries[i].fn;
    if (strcmp(name, "vkGetPhysicalDeviceProperties2KHR") == 0) return (PFN_vkVoidFunction)GetPhysicalDeviceProperties2;
    return lookup_device(name);
}

EXPORT VkResult vk_icdNegotiateLoaderICDInterfaceVersion(uint32_t *version) {
    if (*version > 5) *version = 5;
    return 0;
}
