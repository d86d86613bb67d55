/* A stand-in for WSL's libdxcore.so (and, built a second time, libd3d12.so): DXCore's COM objects
 * laid out as the Itanium C++ ABI lays out dxcore_interface.h on Linux (vtable pointer first,
 * IUnknown's three slots, then the interface's methods in declaration order).
 * Adapters: FAKE_DXCORE_ADAPTERS = "hardware,vendorID,deviceID,description;..." (default: none). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int32_t HRESULT;
typedef struct { uint32_t a; uint16_t b, c; uint8_t d[8]; } GUID;
#define E_INVALIDARG ((HRESULT)0x80070057)
#define E_NOINTERFACE ((HRESULT)0x80004002)
static const GUID IID_FACTORY = {0x78ee5945, 0xc36e, 0x4b13, {0xa6, 0x69, 0x00, 0x5d, 0xd1, 0x1c, 0x0f, 0x06}};
static const GUID IID_LIST = {0x526c7776, 0x40e9, 0x459b, {0xb7, 0x11, 0xf3, 0x2a, 0xd7, 0x6d, 0xfc, 0x28}};
static const GUID IID_ADAPTER = {0xf0db4c7f, 0xfe5a, 0x42a2, {0xbd, 0x62, 0xf2, 0xa6, 0xcf, 0x6f, 0xc8, 0x3e}};
static const GUID CORE_COMPUTE = {0x248e2800, 0xa793, 0x4724, {0xab, 0xaa, 0x23, 0xa6, 0xde, 0x1b, 0xe0, 0x90}};

typedef struct { void **vtable; int hardware; uint32_t ids[4]; char description[128]; } Adapter;
typedef struct { void **vtable; } Object;
static Adapter adapters[8];
static uint32_t adapter_count;
static int live_objects;  /* AddRef/Release balance, checked at exit */

static HRESULT QueryInterface(void *self, const GUID *iid, void **out) { (void)self; (void)iid; *out = NULL; return E_NOINTERFACE; }
static uint32_t AddRef(void *self) { (void)self; return (uint32_t)++live_objects; }
static uint32_t Release(void *self) { (void)self; return (uint32_t)--live_objects; }

/* IDXCoreAdapter: 3 IsValid, 4 IsAttributeSupported, 5 IsPropertySupported, 6 GetProperty, 7 GetPropertySize */
static _Bool IsValid(void *self) { (void)self; return 1; }
static _Bool IsAttributeSupported(void *self, const GUID *attribute) { (void)self; (void)attribute; return 1; }
static _Bool IsPropertySupported(void *self, uint32_t property) { (void)self; return property == 2 || property == 3 || property == 11; }
static HRESULT GetPropertySize(void *self, uint32_t property, size_t *size) {
    Adapter *a = self;
    switch (property) {
    case 2: *size = strlen(a->description) + 1; return 0;
    case 3: *size = 16; return 0;
    case 11: *size = 1; return 0;
    default: return E_INVALIDARG;
    }
}
static HRESULT GetProperty(void *self, uint32_t property, size_t size, void *data) {
    Adapter *a = self;
    size_t needed;
    if (GetPropertySize(self, property, &needed) != 0 || size < needed) return E_INVALIDARG;
    switch (property) {
    case 2: memcpy(data, a->description, needed); return 0;
    case 3: memcpy(data, a->ids, 16); return 0;
    default: *(_Bool *)data = (_Bool)a->hardware; return 0;
    }
}
static void *adapter_vtable[] = {QueryInterface, AddRef, Release, IsValid, IsAttributeSupported,
                                 IsPropertySupported, GetProperty, GetPropertySize};

/* IDXCoreAdapterList: 3 GetAdapter, 4 GetAdapterCount */
static HRESULT GetAdapter(void *self, uint32_t index, const GUID *iid, void **out) {
    (void)self;
    if (index >= adapter_count || memcmp(iid, &IID_ADAPTER, sizeof *iid) != 0) return E_INVALIDARG;
    adapters[index].vtable = adapter_vtable;
    AddRef(&adapters[index]);
    *out = &adapters[index];
    return 0;
}
static uint32_t GetAdapterCount(void *self) { (void)self; return adapter_count; }
static void *list_vtable[] = {QueryInterface, AddRef, Release, GetAdapter, GetAdapterCount};
static Object the_list = {list_vtable};

/* IDXCoreAdapterFactory: 3 CreateAdapterList */
static HRESULT CreateAdapterList(void *self, uint32_t count, const GUID *attributes, const GUID *iid, void **out) {
    (void)self;
    if (count != 1 || memcmp(&attributes[0], &CORE_COMPUTE, sizeof(GUID)) != 0) return E_INVALIDARG;
    if (memcmp(iid, &IID_LIST, sizeof *iid) != 0) return E_NOINTERFACE;
    AddRef(&the_list);
    *out = &the_list;
    return 0;
}
static void *factory_vtable[] = {QueryInterface, AddRef, Release, CreateAdapterList};
static Object the_factory = {factory_vtable};

static void report_leaks(void) {
    if (live_objects != 0) fprintf(stderr, "fake dxcore: %d COM references leaked\n", live_objects);
}

__attribute__((visibility("default"))) HRESULT DXCoreCreateAdapterFactory(const GUID *iid, void **out) {
    if (memcmp(iid, &IID_FACTORY, sizeof *iid) != 0) return E_NOINTERFACE;
    const char *spec = getenv("FAKE_DXCORE_ADAPTERS");
    char buffer[1024];
    char *save = NULL;
    snprintf(buffer, sizeof buffer, "%s", spec ? spec : "");
    adapter_count = 0;
    for (char *item = strtok_r(buffer, ";", &save); item && adapter_count < 8; item = strtok_r(NULL, ";", &save)) {
        Adapter *a = &adapters[adapter_count];
        memset(a, 0, sizeof *a);
        if (sscanf(item, "%d,%i,%i,%127[^;]", &a->hardware, (int *)&a->ids[0], (int *)&a->ids[1], a->description) == 4)
            adapter_count++;
    }
    atexit(report_leaks);
    AddRef(&the_factory);
    *out = &the_factory;
    return 0;
}

/* libd3d12.so's entry point; the probe only needs it to load. */
__attribute__((visibility("default"))) HRESULT D3D12CreateDevice(void *adapter, int level, const GUID *iid, void **out) {
    (void)adapter; (void)level; (void)iid; (void)out;
    return E_INVALIDARG;
}
