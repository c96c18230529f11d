#include "pool/devices/nvml_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpupool::pool::nvidia_internal {

// nvml_api.h keeps NVIDIA's own names (NVML_SUCCESS, nvmlDevice_t) so that each call reads like
// NVIDIA's reference; they live in their own namespace and only the NVIDIA driver's source files
// import them.
using namespace nvml;  // NOLINT(build/namespaces)

namespace {

constexpr char kDefaultNvmlLibrary[] = "libnvidia-ml.so.1";
constexpr char kDefaultCudaLibrary[] = "libcuda.so.1";
constexpr char kNvmlLibraryEnv[] = "GPUPOOL_NVML_LIBRARY";

std::string DlError() {
  const char* error = dlerror();
  return error != nullptr ? error : "unknown dlopen error";
}

template <typename Fn>
void Resolve(void* library, const char* symbol, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(library, symbol));
}

// Newer drivers rename some calls; the older name has the same signature.
template <typename Fn>
void ResolveEither(void* library, const char* symbol, const char* older_symbol, Fn& out) {
  Resolve(library, symbol, out);
  if (out == nullptr) Resolve(library, older_symbol, out);
}

absl::Status ResolveNvml(void* library, const std::string& path, NvmlApi& api) {
  Resolve(library, "nvmlInit_v2", api.nvmlInit_v2);
  Resolve(library, "nvmlShutdown", api.nvmlShutdown);
  Resolve(library, "nvmlErrorString", api.nvmlErrorString);
  Resolve(library, "nvmlDeviceGetCount_v2", api.nvmlDeviceGetCount_v2);
  Resolve(library, "nvmlDeviceGetHandleByIndex_v2", api.nvmlDeviceGetHandleByIndex_v2);
  const std::pair<const char*, bool> required[] = {
      {"nvmlInit_v2", api.nvmlInit_v2 != nullptr},
      {"nvmlShutdown", api.nvmlShutdown != nullptr},
      {"nvmlErrorString", api.nvmlErrorString != nullptr},
      {"nvmlDeviceGetCount_v2", api.nvmlDeviceGetCount_v2 != nullptr},
      {"nvmlDeviceGetHandleByIndex_v2", api.nvmlDeviceGetHandleByIndex_v2 != nullptr},
  };
  for (const auto& [symbol, present] : required) {
    if (!present) {
      return absl::UnavailableError(absl::StrCat("NVIDIA driver at ", path, " lacks ", symbol,
                                                 ": not NVML, or a driver too old for gpupool"));
    }
  }
  Resolve(library, "nvmlSystemGetDriverVersion", api.nvmlSystemGetDriverVersion);
  Resolve(library, "nvmlSystemGetCudaDriverVersion_v2", api.nvmlSystemGetCudaDriverVersion_v2);
  Resolve(library, "nvmlDeviceGetIndex", api.nvmlDeviceGetIndex);
  Resolve(library, "nvmlDeviceGetName", api.nvmlDeviceGetName);
  Resolve(library, "nvmlDeviceGetUUID", api.nvmlDeviceGetUUID);
  Resolve(library, "nvmlDeviceGetMemoryInfo", api.nvmlDeviceGetMemoryInfo);
  Resolve(library, "nvmlDeviceGetCudaComputeCapability", api.nvmlDeviceGetCudaComputeCapability);
  Resolve(library, "nvmlDeviceGetPciInfo_v3", api.nvmlDeviceGetPciInfo_v3);
  Resolve(library, "nvmlDeviceGetNumaNodeId", api.nvmlDeviceGetNumaNodeId);
  Resolve(library, "nvmlDeviceGetNvLinkState", api.nvmlDeviceGetNvLinkState);
  Resolve(library, "nvmlDeviceGetNvLinkRemotePciInfo_v2",
          api.nvmlDeviceGetNvLinkRemotePciInfo_v2);
  Resolve(library, "nvmlDeviceGetEccMode", api.nvmlDeviceGetEccMode);
  Resolve(library, "nvmlDeviceGetTotalEccErrors", api.nvmlDeviceGetTotalEccErrors);
  Resolve(library, "nvmlDeviceGetRetiredPages", api.nvmlDeviceGetRetiredPages);
  Resolve(library, "nvmlDeviceGetRetiredPagesPendingStatus",
          api.nvmlDeviceGetRetiredPagesPendingStatus);
  Resolve(library, "nvmlDeviceGetRemappedRows", api.nvmlDeviceGetRemappedRows);
  Resolve(library, "nvmlDeviceGetFieldValues", api.nvmlDeviceGetFieldValues);
  ResolveEither(library, "nvmlDeviceGetCurrentClocksEventReasons",
                "nvmlDeviceGetCurrentClocksThrottleReasons",
                api.nvmlDeviceGetCurrentClocksEventReasons);
  Resolve(library, "nvmlDeviceGetTemperature", api.nvmlDeviceGetTemperature);
  Resolve(library, "nvmlEventSetCreate", api.nvmlEventSetCreate);
  Resolve(library, "nvmlEventSetFree", api.nvmlEventSetFree);
  Resolve(library, "nvmlDeviceGetSupportedEventTypes", api.nvmlDeviceGetSupportedEventTypes);
  Resolve(library, "nvmlDeviceRegisterEvents", api.nvmlDeviceRegisterEvents);
  ResolveEither(library, "nvmlEventSetWait_v2", "nvmlEventSetWait", api.nvmlEventSetWait_v2);
  Resolve(library, "nvmlDeviceGetMigMode", api.nvmlDeviceGetMigMode);
  Resolve(library, "nvmlDeviceGetGpuInstanceProfileInfo",
          api.nvmlDeviceGetGpuInstanceProfileInfo);
  Resolve(library, "nvmlDeviceGetGpuInstanceProfileInfoV",
          api.nvmlDeviceGetGpuInstanceProfileInfoV);
  Resolve(library, "nvmlDeviceGetGpuInstances", api.nvmlDeviceGetGpuInstances);
  Resolve(library, "nvmlDeviceGetGpuInstanceById", api.nvmlDeviceGetGpuInstanceById);
  Resolve(library, "nvmlGpuInstanceGetInfo", api.nvmlGpuInstanceGetInfo);
  Resolve(library, "nvmlDeviceCreateGpuInstance", api.nvmlDeviceCreateGpuInstance);
  Resolve(library, "nvmlDeviceCreateGpuInstanceWithPlacement",
          api.nvmlDeviceCreateGpuInstanceWithPlacement);
  Resolve(library, "nvmlGpuInstanceDestroy", api.nvmlGpuInstanceDestroy);
  Resolve(library, "nvmlGpuInstanceGetComputeInstanceProfileInfo",
          api.nvmlGpuInstanceGetComputeInstanceProfileInfo);
  Resolve(library, "nvmlGpuInstanceGetComputeInstances", api.nvmlGpuInstanceGetComputeInstances);
  Resolve(library, "nvmlGpuInstanceGetComputeInstanceById",
          api.nvmlGpuInstanceGetComputeInstanceById);
  Resolve(library, "nvmlGpuInstanceCreateComputeInstance",
          api.nvmlGpuInstanceCreateComputeInstance);
  Resolve(library, "nvmlComputeInstanceDestroy", api.nvmlComputeInstanceDestroy);
  ResolveEither(library, "nvmlComputeInstanceGetInfo_v2", "nvmlComputeInstanceGetInfo",
                api.nvmlComputeInstanceGetInfo_v2);
  Resolve(library, "nvmlDeviceGetMaxMigDeviceCount", api.nvmlDeviceGetMaxMigDeviceCount);
  Resolve(library, "nvmlDeviceGetMigDeviceHandleByIndex", api.nvmlDeviceGetMigDeviceHandleByIndex);
  Resolve(library, "nvmlDeviceGetGpuInstanceId", api.nvmlDeviceGetGpuInstanceId);
  Resolve(library, "nvmlDeviceGetComputeInstanceId", api.nvmlDeviceGetComputeInstanceId);
  Resolve(library, "nvmlDeviceGetUtilizationRates", api.nvmlDeviceGetUtilizationRates);
  Resolve(library, "nvmlDeviceGetPowerUsage", api.nvmlDeviceGetPowerUsage);
  return absl::OkStatus();
}

}  // namespace

std::string NvmlLibraryPath(absl::string_view configured) {
  if (!configured.empty()) return std::string(configured);
  const char* env = std::getenv(kNvmlLibraryEnv);
  if (env != nullptr && *env != '\0') return env;
  return kDefaultNvmlLibrary;
}

bool LibraryLoadable(const std::string& path) {
  void* library = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (library == nullptr) return false;
  dlclose(library);
  return true;
}

absl::StatusOr<void*> LoadNvmlLibrary(const std::string& path, NvmlApi& api) {
  dlerror();  // clear any stale error so the message below is this call's
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::string why = DlError();
    if (!absl::StrContains(why, path)) why = absl::StrCat(path, ": ", why);
    return absl::UnavailableError(absl::StrCat("NVIDIA driver not found: ", why));
  }
  if (absl::Status status = ResolveNvml(library, path, api); !status.ok()) {
    dlclose(library);
    return status;
  }
  return library;
}

void* LoadCudaLibrary(const std::string& path, std::vector<CudaDeviceFacts>& devices) {
  const std::string file = path.empty() ? kDefaultCudaLibrary : path;
  // RTLD_NODELETE: cuInit leaves driver threads and state behind that no handle accounts for, so
  // the library must stay mapped even after the caller closes its handle.
  void* library = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (library == nullptr) return nullptr;
  cuda::PFN_cuInit init = nullptr;
  cuda::PFN_cuDeviceGetCount get_count = nullptr;
  cuda::PFN_cuDeviceGet get = nullptr;
  cuda::PFN_cuDeviceGetAttribute attribute = nullptr;
  cuda::PFN_cuDeviceGetPCIBusId bus_id = nullptr;
  Resolve(library, "cuInit", init);
  Resolve(library, "cuDeviceGetCount", get_count);
  Resolve(library, "cuDeviceGet", get);
  Resolve(library, "cuDeviceGetAttribute", attribute);
  Resolve(library, "cuDeviceGetPCIBusId", bus_id);
  int count = 0;
  if (init == nullptr || get_count == nullptr || get == nullptr || attribute == nullptr ||
      bus_id == nullptr || init(0) != cuda::CUDA_SUCCESS ||
      get_count(&count) != cuda::CUDA_SUCCESS) {
    return library;
  }
  for (int i = 0; i < count; ++i) {
    cuda::CUdevice device = 0;
    char id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE] = {};
    CudaDeviceFacts facts;
    if (get(&device, i) != cuda::CUDA_SUCCESS ||
        bus_id(id, static_cast<int>(sizeof id), device) != cuda::CUDA_SUCCESS ||
        attribute(&facts.sm_count, cuda::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device) !=
            cuda::CUDA_SUCCESS) {
      continue;
    }
    attribute(&facts.cc_major, cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
    attribute(&facts.cc_minor, cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
    facts.pci_bus_id = FromBuffer(id, sizeof id);
    devices.push_back(std::move(facts));
  }
  return library;
}

absl::Status NvmlResultToStatus(int result, absl::string_view call, absl::string_view error_text) {
  if (result == NVML_SUCCESS) return absl::OkStatus();
  std::string message =
      absl::StrCat(call, ": ", error_text.empty() ? "unknown NVML error" : error_text,
                   " (NVML error ", result, ")");
  switch (result) {
    case NVML_ERROR_NO_PERMISSION:
      return absl::PermissionDeniedError(message);
    case NVML_ERROR_NOT_FOUND:
      return absl::NotFoundError(message);
    case NVML_ERROR_IN_USE:
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_RESET_REQUIRED:
      return absl::FailedPreconditionError(message);
    case NVML_ERROR_INVALID_ARGUMENT:
      return absl::InvalidArgumentError(message);
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_UNINITIALIZED:
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
    case NVML_ERROR_TIMEOUT:
      return absl::UnavailableError(message);
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

std::string NvmlErrorText(const NvmlApi& api, nvmlReturn_t result) {
  const char* text = api.nvmlErrorString(result);
  return text != nullptr ? text : "";
}

std::string FromBuffer(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

}  // namespace gpupool::pool::nvidia_internal
