/* A stand-in for ROCm's libhsa-runtime64.so.1, steered by environment variables:
 *   FAKE_HSA_INIT  hsa_init's status (default 0; 0x1008 = HSA_STATUS_ERROR_OUT_OF_RESOURCES is what a
 *                  missing /dev/kfd gives)
 *   FAKE_HSA_GPUS  number of GPU agents next to the one CPU agent (default 0) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { uint64_t handle; } hsa_agent_t;
typedef int (*agent_callback)(hsa_agent_t agent, void *data);

int hsa_init(void) {
    const char *code = getenv("FAKE_HSA_INIT");
    return code ? (int)strtol(code, NULL, 0) : 0;
}

int hsa_shut_down(void) { return 0; }

int hsa_iterate_agents(agent_callback callback, void *data) {
    const char *gpus = getenv("FAKE_HSA_GPUS");
    int count = gpus ? atoi(gpus) : 0;
    for (int i = 0; i <= count; i++) {  /* handle 0 is the CPU agent */
        hsa_agent_t agent = {(uint64_t)i};
        int status = callback(agent, data);
        if (status != 0) return status;
    }
    return 0;
}

int hsa_agent_get_info(hsa_agent_t agent, int attribute, void *value) {
    switch (attribute) {
    case 17: *(int *)value = agent.handle ? 1 : 0; return 0;  /* HSA_AGENT_INFO_DEVICE: GPU or CPU */
    case 0: snprintf(value, 64, agent.handle ? "gfx1100" : "AMD EPYC"); return 0;
    case 0xA009: snprintf(value, 64, agent.handle ? "Radeon RX 7900 XTX" : "AMD EPYC"); return 0;
    default: return 0x1003;
    }
}
