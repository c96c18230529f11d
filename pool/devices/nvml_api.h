// File: pool/devices/nvml_api.h
//
// Hand-written declarations of the parts of NVML (libnvidia-ml.so.1) and the CUDA driver API
// (libcuda.so.1) that NvidiaDriver loads with dlopen. The build machines have no nvml.h and must
// never link the driver libraries (BUILD-NOTES.md: the toolkit's stub libcuda would be linked
// silently and the binary would then fail to start without a driver), so the types, constants and
// function-pointer types below are declared here from NVIDIA's published API reference.
//
// Contract: every struct matches NVML's C layout on LP64 Linux exactly (nothing here may be
// reordered or resized); every PFN_* matches the exported symbol named in its comment, which is
// the name dlsym must look up (nvml.h maps the plain names to versioned ones with macros, e.g.
// nvmlInit -> nvmlInit_v2; dlsym sees only the exported names). The names keep NVML's own
// spelling so that each line can be checked against NVIDIA's documentation.
// Thread-safety: declarations only.
#ifndef GPUPOOL_POOL_DEVICES_NVML_API_H_
#define GPUPOOL_POOL_DEVICES_NVML_API_H_

#include <cstddef>

namespace gpupool::pool::nvml {

// ---- Return codes (nvmlReturn_t). C enums are int-sized on every platform NVML supports. ----
enum nvmlReturn_t : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_UNKNOWN = 999,
};

// ---- Opaque handles. ----
struct nvmlDevice_st;
struct nvmlGpuInstance_st;
struct nvmlComputeInstance_st;
struct nvmlEventSet_st;
using nvmlDevice_t = nvmlDevice_st*;
using nvmlGpuInstance_t = nvmlGpuInstance_st*;
using nvmlComputeInstance_t = nvmlComputeInstance_st*;
using nvmlEventSet_t = nvmlEventSet_st*;

// ---- Buffer sizes and limits. ----
inline constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
inline constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;
inline constexpr unsigned int NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
// 18 since NVLink 4 (Hopper); older headers said 6 or 12. Asking a GPU about a link it does not
// have returns an error, so the larger bound is safe on every generation.
inline constexpr unsigned int NVML_NVLINK_MAX_LINKS = 18;

// ---- Small enums. ----
enum nvmlEnableState_t : int { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 };
enum nvmlMemoryErrorType_t : int {
  NVML_MEMORY_ERROR_TYPE_CORRECTED = 0,
  NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
};
enum nvmlEccCounterType_t : int { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 };
enum nvmlPageRetirementCause_t : int {
  NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0,
  NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1,
};
enum nvmlTemperatureSensors_t : int { NVML_TEMPERATURE_GPU = 0 };

// nvmlDeviceGetMigMode's modes.
inline constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0x0;
inline constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 0x1;

// Event type bits (nvmlEventType*).
inline constexpr unsigned long long nvmlEventTypeSingleBitEccError = 0x1ULL;
inline constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x2ULL;
inline constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;

// ---- MIG profile indices. These are indices to pass to nvmlDeviceGetGpuInstanceProfileInfo /
// nvmlGpuInstanceGetComputeInstanceProfileInfo, which return the profile *id* that every other
// MIG call takes; the two must not be confused. ----
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7;  // 1g +me
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8;  // 2g +me (A30)
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9;  // 1g, double memory
// Newer drivers add graphics and media-engine variants (0xA..0x10); the count grows with them.
// Querying an index the driver does not know returns an error, so iterating to the newest known
// count is safe on older drivers.
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_COUNT = 0x11;

inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 0x3;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 0x4;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE = 0x5;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE = 0x6;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x8;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0;

// ---- Structs. ----
struct nvmlMemory_t {
  unsigned long long total;  // bytes
  unsigned long long free;
  unsigned long long used;
};

// Filled by nvmlDeviceGetUtilizationRates: percent of the last sample period (1/6 s to 1 s,
// by product) in which a kernel ran (gpu) or device memory was read or written (memory).
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];  // "00000000:19:00.0"
};

struct nvmlGpuInstancePlacement_t {
  unsigned int start;  // first memory slice
  unsigned int size;   // memory slices
};

// Filled by nvmlDeviceGetGpuInstanceProfileInfo (no version field).
struct nvmlGpuInstanceProfileInfo_t {
  unsigned int id;  // the profile id for the other MIG calls
  unsigned int isP2pSupported;
  unsigned int sliceCount;  // compute slices
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};

// Filled by nvmlDeviceGetGpuInstanceProfileInfoV; `version` must be set to the matching
// NVML_STRUCT_VERSION value below before the call.
struct nvmlGpuInstanceProfileInfo_v2_t {
  unsigned int version;
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];  // "MIG 1g.10gb"
};

// v3 drops isP2pSupported and adds capabilities at the end.
struct nvmlGpuInstanceProfileInfo_v3_t {
  unsigned int version;
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  unsigned int capabilities;
};

// NVML_STRUCT_VERSION(name, ver): the struct's size in the low bits, the version in bits 24..31.
constexpr unsigned int NvmlStructVersion(std::size_t size, unsigned int version) {
  return static_cast<unsigned int>(size) | (version << 24U);
}
inline constexpr unsigned int nvmlGpuInstanceProfileInfo_v2 =
    NvmlStructVersion(sizeof(nvmlGpuInstanceProfileInfo_v2_t), 2);
inline constexpr unsigned int nvmlGpuInstanceProfileInfo_v3 =
    NvmlStructVersion(sizeof(nvmlGpuInstanceProfileInfo_v3_t), 3);

struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned int id;         // GPU instance id
  unsigned int profileId;  // profile *id* (nvmlGpuInstanceProfileInfo_t::id)
  nvmlGpuInstancePlacement_t placement;
};

struct nvmlComputeInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};

// Filled by nvmlComputeInstanceGetInfo_v2. The unversioned nvmlComputeInstanceGetInfo of the first
// MIG drivers fills only the fields before `placement`.
struct nvmlComputeInstanceInfo_t {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned int id;
  unsigned int profileId;
  nvmlComputeInstancePlacement_t placement;
};

struct nvmlComputeInstanceProfileInfo_t {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};

// Filled by nvmlEventSetWait_v2 (the unversioned nvmlEventSetWait fills only the first three).
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID for nvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48, "nvmlGpuInstanceProfileInfo_t layout");
static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == 152, "v2 layout");
static_assert(sizeof(nvmlGpuInstanceProfileInfo_v3_t) == 152, "v3 layout");
static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24, "nvmlGpuInstanceInfo_t layout");
static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32, "nvmlComputeInstanceInfo_t layout");
static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t layout");

// ---- Entry points: PFN_<exported symbol>. ----
using PFN_nvmlInit_v2 = nvmlReturn_t (*)();
using PFN_nvmlShutdown = nvmlReturn_t (*)();
using PFN_nvmlErrorString = const char* (*)(nvmlReturn_t result);
using PFN_nvmlSystemGetDriverVersion = nvmlReturn_t (*)(char* version, unsigned int length);
using PFN_nvmlSystemGetCudaDriverVersion_v2 = nvmlReturn_t (*)(int* cuda_driver_version);

using PFN_nvmlDeviceGetCount_v2 = nvmlReturn_t (*)(unsigned int* device_count);
using PFN_nvmlDeviceGetHandleByIndex_v2 = nvmlReturn_t (*)(unsigned int index,
                                                           nvmlDevice_t* device);
using PFN_nvmlDeviceGetIndex = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* index);
using PFN_nvmlDeviceGetName = nvmlReturn_t (*)(nvmlDevice_t device, char* name,
                                               unsigned int length);
using PFN_nvmlDeviceGetUUID = nvmlReturn_t (*)(nvmlDevice_t device, char* uuid,
                                               unsigned int length);
using PFN_nvmlDeviceGetMemoryInfo = nvmlReturn_t (*)(nvmlDevice_t device, nvmlMemory_t* memory);
using PFN_nvmlDeviceGetCudaComputeCapability = nvmlReturn_t (*)(nvmlDevice_t device, int* major,
                                                                int* minor);
using PFN_nvmlDeviceGetPciInfo_v3 = nvmlReturn_t (*)(nvmlDevice_t device, nvmlPciInfo_t* pci);
using PFN_nvmlDeviceGetNumaNodeId = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* node);

using PFN_nvmlDeviceGetNvLinkState = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int link,
                                                      nvmlEnableState_t* is_active);
using PFN_nvmlDeviceGetNvLinkRemotePciInfo_v2 = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                 unsigned int link,
                                                                 nvmlPciInfo_t* pci);

using PFN_nvmlDeviceGetEccMode = nvmlReturn_t (*)(nvmlDevice_t device, nvmlEnableState_t* current,
                                                  nvmlEnableState_t* pending);
using PFN_nvmlDeviceGetTotalEccErrors = nvmlReturn_t (*)(nvmlDevice_t device,
                                                         nvmlMemoryErrorType_t error_type,
                                                         nvmlEccCounterType_t counter_type,
                                                         unsigned long long* ecc_counts);
using PFN_nvmlDeviceGetRetiredPages = nvmlReturn_t (*)(nvmlDevice_t device,
                                                       nvmlPageRetirementCause_t cause,
                                                       unsigned int* page_count,
                                                       unsigned long long* addresses);
using PFN_nvmlDeviceGetRetiredPagesPendingStatus = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                    nvmlEnableState_t* pending);
using PFN_nvmlDeviceGetRemappedRows = nvmlReturn_t (*)(nvmlDevice_t device,
                                                       unsigned int* corr_rows,
                                                       unsigned int* unc_rows,
                                                       unsigned int* is_pending,
                                                       unsigned int* failure_occurred);
// nvmlFieldValue_t (40 bytes): one field of nvmlDeviceGetFieldValues, asked by fieldId.
union nvmlValue_t {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
};
struct nvmlFieldValue_t {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;  // nvmlValueType_t
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
};
static_assert(sizeof(nvmlFieldValue_t) == 40, "NVML's layout");
inline constexpr unsigned int NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230;  // value.uiVal: 0 none ... 4
// nvmlDeviceGetFieldValues
using PFN_nvmlDeviceGetFieldValues = nvmlReturn_t (*)(nvmlDevice_t device, int values_count,
                                                      nvmlFieldValue_t* values);
// nvmlDeviceGetCurrentClocksEventReasons (R535 and later) and its older name
// nvmlDeviceGetCurrentClocksThrottleReasons share this signature.
using PFN_nvmlDeviceGetCurrentClocksEventReasons = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                    unsigned long long* reasons);
using PFN_nvmlDeviceGetTemperature = nvmlReturn_t (*)(nvmlDevice_t device,
                                                      nvmlTemperatureSensors_t sensor,
                                                      unsigned int* temp);

using PFN_nvmlEventSetCreate = nvmlReturn_t (*)(nvmlEventSet_t* set);
using PFN_nvmlEventSetFree = nvmlReturn_t (*)(nvmlEventSet_t set);
using PFN_nvmlDeviceGetSupportedEventTypes = nvmlReturn_t (*)(nvmlDevice_t device,
                                                              unsigned long long* event_types);
using PFN_nvmlDeviceRegisterEvents = nvmlReturn_t (*)(nvmlDevice_t device,
                                                      unsigned long long event_types,
                                                      nvmlEventSet_t set);
// nvmlEventSetWait_v2 and the unversioned nvmlEventSetWait share this signature.
using PFN_nvmlEventSetWait_v2 = nvmlReturn_t (*)(nvmlEventSet_t set, nvmlEventData_t* data,
                                                 unsigned int timeout_ms);

using PFN_nvmlDeviceGetMigMode = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* current_mode,
                                                  unsigned int* pending_mode);
using PFN_nvmlDeviceGetGpuInstanceProfileInfo = nvmlReturn_t (*)(
    nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t* info);
// Takes an nvmlGpuInstanceProfileInfo_v2_t or _v3_t with its version field set.
using PFN_nvmlDeviceGetGpuInstanceProfileInfoV = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                  unsigned int profile,
                                                                  void* versioned_info);
using PFN_nvmlDeviceGetGpuInstances = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int profile_id,
                                                       nvmlGpuInstance_t* gpu_instances,
                                                       unsigned int* count);
using PFN_nvmlDeviceGetGpuInstanceById = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int id,
                                                          nvmlGpuInstance_t* gpu_instance);
using PFN_nvmlGpuInstanceGetInfo = nvmlReturn_t (*)(nvmlGpuInstance_t gpu_instance,
                                                    nvmlGpuInstanceInfo_t* info);
using PFN_nvmlDeviceCreateGpuInstance = nvmlReturn_t (*)(nvmlDevice_t device,
                                                         unsigned int profile_id,
                                                         nvmlGpuInstance_t* gpu_instance);
using PFN_nvmlDeviceCreateGpuInstanceWithPlacement = nvmlReturn_t (*)(
    nvmlDevice_t device, unsigned int profile_id, const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* gpu_instance);
using PFN_nvmlGpuInstanceDestroy = nvmlReturn_t (*)(nvmlGpuInstance_t gpu_instance);

using PFN_nvmlGpuInstanceGetComputeInstanceProfileInfo = nvmlReturn_t (*)(
    nvmlGpuInstance_t gpu_instance, unsigned int profile, unsigned int eng_profile,
    nvmlComputeInstanceProfileInfo_t* info);
using PFN_nvmlGpuInstanceGetComputeInstances = nvmlReturn_t (*)(
    nvmlGpuInstance_t gpu_instance, unsigned int profile_id,
    nvmlComputeInstance_t* compute_instances, unsigned int* count);
using PFN_nvmlGpuInstanceGetComputeInstanceById = nvmlReturn_t (*)(
    nvmlGpuInstance_t gpu_instance, unsigned int id, nvmlComputeInstance_t* compute_instance);
using PFN_nvmlGpuInstanceCreateComputeInstance = nvmlReturn_t (*)(
    nvmlGpuInstance_t gpu_instance, unsigned int profile_id,
    nvmlComputeInstance_t* compute_instance);
using PFN_nvmlComputeInstanceDestroy = nvmlReturn_t (*)(nvmlComputeInstance_t compute_instance);
// nvmlComputeInstanceGetInfo_v2 and the unversioned nvmlComputeInstanceGetInfo share this
// signature (the latter fills less of the struct).
using PFN_nvmlComputeInstanceGetInfo_v2 = nvmlReturn_t (*)(nvmlComputeInstance_t compute_instance,
                                                           nvmlComputeInstanceInfo_t* info);

using PFN_nvmlDeviceGetMaxMigDeviceCount = nvmlReturn_t (*)(nvmlDevice_t device,
                                                            unsigned int* count);
using PFN_nvmlDeviceGetMigDeviceHandleByIndex = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                 unsigned int index,
                                                                 nvmlDevice_t* mig_device);
using PFN_nvmlDeviceGetGpuInstanceId = nvmlReturn_t (*)(nvmlDevice_t mig_device, unsigned int* id);
using PFN_nvmlDeviceGetComputeInstanceId = nvmlReturn_t (*)(nvmlDevice_t mig_device,
                                                            unsigned int* id);

// Telemetry (the agent's /metrics). Unsupported on MIG-enabled GPUs (NOT_SUPPORTED).
using PFN_nvmlDeviceGetUtilizationRates = nvmlReturn_t (*)(nvmlDevice_t device,
                                                          nvmlUtilization_t* utilization);
// Milliwatts, for the board and its memory; averaged over 1 s on Ampere (except GA100) and later,
// instantaneous on older GPUs. NOT_SUPPORTED without power management.
using PFN_nvmlDeviceGetPowerUsage = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* power_mw);

// The NVML entry points NvidiaDriver uses, resolved with dlsym. The first five are required (the
// driver refuses to open without them); every other one is null when the installed driver is too
// old to export it, and the field it feeds is then left unknown.
struct NvmlApi {
  // Required.
  PFN_nvmlInit_v2 nvmlInit_v2 = nullptr;
  PFN_nvmlShutdown nvmlShutdown = nullptr;
  PFN_nvmlErrorString nvmlErrorString = nullptr;
  PFN_nvmlDeviceGetCount_v2 nvmlDeviceGetCount_v2 = nullptr;
  PFN_nvmlDeviceGetHandleByIndex_v2 nvmlDeviceGetHandleByIndex_v2 = nullptr;
  // Optional: node and device facts.
  PFN_nvmlSystemGetDriverVersion nvmlSystemGetDriverVersion = nullptr;
  PFN_nvmlSystemGetCudaDriverVersion_v2 nvmlSystemGetCudaDriverVersion_v2 = nullptr;
  PFN_nvmlDeviceGetIndex nvmlDeviceGetIndex = nullptr;
  PFN_nvmlDeviceGetName nvmlDeviceGetName = nullptr;
  PFN_nvmlDeviceGetUUID nvmlDeviceGetUUID = nullptr;
  PFN_nvmlDeviceGetMemoryInfo nvmlDeviceGetMemoryInfo = nullptr;
  PFN_nvmlDeviceGetCudaComputeCapability nvmlDeviceGetCudaComputeCapability = nullptr;
  PFN_nvmlDeviceGetPciInfo_v3 nvmlDeviceGetPciInfo_v3 = nullptr;
  PFN_nvmlDeviceGetNumaNodeId nvmlDeviceGetNumaNodeId = nullptr;
  PFN_nvmlDeviceGetNvLinkState nvmlDeviceGetNvLinkState = nullptr;
  PFN_nvmlDeviceGetNvLinkRemotePciInfo_v2 nvmlDeviceGetNvLinkRemotePciInfo_v2 = nullptr;
  // Optional: health.
  PFN_nvmlDeviceGetEccMode nvmlDeviceGetEccMode = nullptr;
  PFN_nvmlDeviceGetTotalEccErrors nvmlDeviceGetTotalEccErrors = nullptr;
  PFN_nvmlDeviceGetRetiredPages nvmlDeviceGetRetiredPages = nullptr;
  PFN_nvmlDeviceGetRetiredPagesPendingStatus nvmlDeviceGetRetiredPagesPendingStatus = nullptr;
  PFN_nvmlDeviceGetRemappedRows nvmlDeviceGetRemappedRows = nullptr;
  PFN_nvmlDeviceGetFieldValues nvmlDeviceGetFieldValues = nullptr;
  // Resolved from nvmlDeviceGetCurrentClocksEventReasons, else the older
  // nvmlDeviceGetCurrentClocksThrottleReasons.
  PFN_nvmlDeviceGetCurrentClocksEventReasons nvmlDeviceGetCurrentClocksEventReasons = nullptr;
  PFN_nvmlDeviceGetTemperature nvmlDeviceGetTemperature = nullptr;
  PFN_nvmlEventSetCreate nvmlEventSetCreate = nullptr;
  PFN_nvmlEventSetFree nvmlEventSetFree = nullptr;
  PFN_nvmlDeviceGetSupportedEventTypes nvmlDeviceGetSupportedEventTypes = nullptr;
  PFN_nvmlDeviceRegisterEvents nvmlDeviceRegisterEvents = nullptr;
  // Resolved from nvmlEventSetWait_v2, else the unversioned nvmlEventSetWait.
  PFN_nvmlEventSetWait_v2 nvmlEventSetWait_v2 = nullptr;
  // Optional: MIG.
  PFN_nvmlDeviceGetMigMode nvmlDeviceGetMigMode = nullptr;
  PFN_nvmlDeviceGetGpuInstanceProfileInfo nvmlDeviceGetGpuInstanceProfileInfo = nullptr;
  PFN_nvmlDeviceGetGpuInstanceProfileInfoV nvmlDeviceGetGpuInstanceProfileInfoV = nullptr;
  PFN_nvmlDeviceGetGpuInstances nvmlDeviceGetGpuInstances = nullptr;
  PFN_nvmlDeviceGetGpuInstanceById nvmlDeviceGetGpuInstanceById = nullptr;
  PFN_nvmlGpuInstanceGetInfo nvmlGpuInstanceGetInfo = nullptr;
  PFN_nvmlDeviceCreateGpuInstance nvmlDeviceCreateGpuInstance = nullptr;
  PFN_nvmlDeviceCreateGpuInstanceWithPlacement nvmlDeviceCreateGpuInstanceWithPlacement = nullptr;
  PFN_nvmlGpuInstanceDestroy nvmlGpuInstanceDestroy = nullptr;
  PFN_nvmlGpuInstanceGetComputeInstanceProfileInfo nvmlGpuInstanceGetComputeInstanceProfileInfo =
      nullptr;
  PFN_nvmlGpuInstanceGetComputeInstances nvmlGpuInstanceGetComputeInstances = nullptr;
  PFN_nvmlGpuInstanceGetComputeInstanceById nvmlGpuInstanceGetComputeInstanceById = nullptr;
  PFN_nvmlGpuInstanceCreateComputeInstance nvmlGpuInstanceCreateComputeInstance = nullptr;
  PFN_nvmlComputeInstanceDestroy nvmlComputeInstanceDestroy = nullptr;
  // Resolved from nvmlComputeInstanceGetInfo_v2, else the unversioned nvmlComputeInstanceGetInfo.
  PFN_nvmlComputeInstanceGetInfo_v2 nvmlComputeInstanceGetInfo_v2 = nullptr;
  PFN_nvmlDeviceGetMaxMigDeviceCount nvmlDeviceGetMaxMigDeviceCount = nullptr;
  PFN_nvmlDeviceGetMigDeviceHandleByIndex nvmlDeviceGetMigDeviceHandleByIndex = nullptr;
  PFN_nvmlDeviceGetGpuInstanceId nvmlDeviceGetGpuInstanceId = nullptr;
  PFN_nvmlDeviceGetComputeInstanceId nvmlDeviceGetComputeInstanceId = nullptr;
  // Optional: telemetry.
  PFN_nvmlDeviceGetUtilizationRates nvmlDeviceGetUtilizationRates = nullptr;
  PFN_nvmlDeviceGetPowerUsage nvmlDeviceGetPowerUsage = nullptr;
};

}  // namespace gpupool::pool::nvml

// ---- CUDA driver API (libcuda.so.1), for the SM count NVML does not report. ----
namespace gpupool::pool::cuda {

using CUresult = int;  // CUDA_SUCCESS is 0; every other value is an error
using CUdevice = int;
inline constexpr CUresult CUDA_SUCCESS = 0;

enum CUdevice_attribute : int {
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
};

using PFN_cuInit = CUresult (*)(unsigned int flags);
using PFN_cuDeviceGetCount = CUresult (*)(int* count);
using PFN_cuDeviceGet = CUresult (*)(CUdevice* device, int ordinal);
using PFN_cuDeviceGetAttribute = CUresult (*)(int* value, CUdevice_attribute attribute,
                                              CUdevice device);
// Writes "0000:19:00.0" (a 4-digit domain, unlike NVML's 8).
using PFN_cuDeviceGetPCIBusId = CUresult (*)(char* pci_bus_id, int length, CUdevice device);

}  // namespace gpupool::pool::cuda

#endif  // GPUPOOL_POOL_DEVICES_NVML_API_H_
