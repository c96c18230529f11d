/* A stand-in for libnvidia-ml.so.1 with three GPUs, for NvidiaDriver's telemetry tests on machines
 * without a driver: the entry points ReadTelemetry and the XID event set use, with the signatures
 * and units of NVIDIA's NVML reference (bytes, milliwatts, percent). Not NVML: nothing here is
 * checked against a real driver, only against what the documentation says it returns.
 *   GPU 0: busy and hot: 42 %, 1 GiB of 80 GiB in use, 55 C, 123456 mW.
 *   GPU 1: MIG-enabled: no utilisation or power (NOT_SUPPORTED); XIDs 48 then 13 queued.
 *   GPU 2: fallen off the bus (GPU_IS_LOST for every query). */
#include <stddef.h>

enum { SUCCESS = 0, NOT_SUPPORTED = 3, NOT_FOUND = 6, TIMEOUT = 10, GPU_IS_LOST = 15 };

typedef struct { int index; } Device;
static Device devices[3] = {{0}, {1}, {2}};
typedef struct { unsigned long long total, free, used; } Memory;
typedef struct { unsigned int gpu, memory; } Utilization;
typedef struct {
  Device* device;
  unsigned long long eventType, eventData;
  unsigned int gpuInstanceId, computeInstanceId;
} EventData;

static int set_token;
static int next_event;
static const struct { int device; unsigned long long xid; } events[] = {{1, 48}, {1, 13}};

int nvmlInit_v2(void) { return SUCCESS; }
int nvmlShutdown(void) { return SUCCESS; }
const char* nvmlErrorString(int result) { return result == GPU_IS_LOST ? "GPU is lost" : "fake NVML error"; }
int nvmlDeviceGetCount_v2(unsigned int* count) { *count = 3; return SUCCESS; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, Device** device) {
  if (index >= 3) return NOT_FOUND;
  *device = &devices[index];
  return SUCCESS;
}
int nvmlDeviceGetIndex(Device* device, unsigned int* index) { *index = (unsigned int)device->index; return SUCCESS; }

int nvmlDeviceGetUtilizationRates(Device* device, Utilization* u) {
  if (device->index == 2) return GPU_IS_LOST;
  if (device->index == 1) return NOT_SUPPORTED;
  u->gpu = 42;
  u->memory = 7;
  return SUCCESS;
}
int nvmlDeviceGetMemoryInfo(Device* device, Memory* m) {
  if (device->index == 2) return GPU_IS_LOST;
  m->total = 80ULL << 30;
  m->used = device->index == 0 ? 1ULL << 30 : 0;
  m->free = m->total - m->used;
  return SUCCESS;
}
int nvmlDeviceGetTemperature(Device* device, int sensor, unsigned int* t) {
  if (device->index == 2) return GPU_IS_LOST;
  if (sensor != 0) return NOT_SUPPORTED;
  *t = device->index == 0 ? 55 : 35;
  return SUCCESS;
}
int nvmlDeviceGetPowerUsage(Device* device, unsigned int* milliwatts) {
  if (device->index == 2) return GPU_IS_LOST;
  if (device->index == 1) return NOT_SUPPORTED;
  *milliwatts = 123456;
  return SUCCESS;
}

int nvmlEventSetCreate(void** set) { *set = &set_token; return SUCCESS; }
int nvmlEventSetFree(void* set) { (void)set; return SUCCESS; }
int nvmlDeviceGetSupportedEventTypes(Device* device, unsigned long long* types) {
  (void)device;
  *types = 0x8; /* nvmlEventTypeXidCriticalError */
  return SUCCESS;
}
int nvmlDeviceRegisterEvents(Device* device, unsigned long long types, void* set) {
  (void)device; (void)types; (void)set;
  return SUCCESS;
}
int nvmlEventSetWait_v2(void* set, EventData* data, unsigned int timeout_ms) {
  (void)set; (void)timeout_ms;
  if (next_event >= (int)(sizeof events / sizeof events[0])) return TIMEOUT;
  data->device = &devices[events[next_event].device];
  data->eventType = 0x8;
  data->eventData = events[next_event].xid;
  data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
  ++next_event;
  return SUCCESS;
}
