#include "pool/devices/nvidia_driver.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpupool::pool {

// nvml_api.h keeps NVIDIA's own names (NVML_SUCCESS, nvmlDevice_t) so that each call reads like
// NVIDIA's reference; they live in their own namespace and only this file imports them.
using namespace nvml;  // NOLINT(build/namespaces)

namespace {

constexpr char kDefaultNvmlLibrary[] = "libnvidia-ml.so.1";
constexpr char kDefaultCudaLibrary[] = "libcuda.so.1";
constexpr char kNvmlLibraryEnv[] = "GPUPOOL_NVML_LIBRARY";
constexpr uint64_t kMiB = 1024 * 1024;
// Bounds one drain so that an event storm cannot stall a health read; the rest waits in NVML.
constexpr int kMaxEventsPerDrain = 256;
// XIDs kept for a GPU nobody reads; beyond this the oldest are dropped.
constexpr size_t kMaxPendingXidsPerGpu = 1024;
// No GPU has more MIG instances of one profile than this; NVML's own count is used when larger.
constexpr unsigned int kMinInstanceBuffer = 8;

// Calls an optional NVML entry point. A missing one answers FUNCTION_NOT_FOUND, so "the installed
// driver is too old" is handled like any other unsupported query: the field stays unknown.
template <typename Fn, typename... Args>
nvmlReturn_t Call(Fn fn, Args... args) {
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  return fn(args...);
}

// Tracks whether any call on one GPU reported it lost (fallen off the bus).
class LostWatch {
 public:
  bool Ok(nvmlReturn_t result) {
    lost_ = lost_ || result == NVML_ERROR_GPU_IS_LOST;
    return result == NVML_SUCCESS;
  }
  bool lost() const { return lost_; }

 private:
  bool lost_ = false;
};

std::string GpuName(const GpuRef& gpu) { return absl::StrCat(gpu.node, "/", gpu.index); }

// NVML fills fixed-size buffers; a missing terminator must not run past the end.
std::string FromBuffer(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

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
  return absl::OkStatus();
}

std::string ErrorText(const NvmlApi& api, nvmlReturn_t result) {
  const char* text = api.nvmlErrorString(result);
  return text != nullptr ? text : "";
}

// nvmlInit failing means the driver as a whole cannot be used: kUnavailable, except that a
// permission refusal is the operator's to fix and keeps its own code.
absl::Status InitError(const NvmlApi& api, nvmlReturn_t result, const std::string& path) {
  absl::Status status = nvidia_internal::NvmlResultToStatus(
      result, absl::StrCat("nvmlInit_v2 (", path, ")"), ErrorText(api, result));
  if (absl::IsPermissionDenied(status)) return status;
  return absl::UnavailableError(absl::StrCat("NVIDIA driver unusable: ", status.message()));
}

// Registers every GPU that supports it for XID critical errors. Null when no GPU could be
// registered: ReadHealth then reports counters only.
nvmlEventSet_t RegisterXidEvents(const NvmlApi& api, unsigned int device_count) {
  nvmlEventSet_t set = nullptr;
  if (Call(api.nvmlEventSetCreate, &set) != NVML_SUCCESS) return nullptr;
  bool registered = false;
  for (unsigned int i = 0; i < device_count; ++i) {
    nvmlDevice_t device = nullptr;
    if (api.nvmlDeviceGetHandleByIndex_v2(i, &device) != NVML_SUCCESS) continue;
    unsigned long long supported = 0;
    // When the driver cannot say what it supports, registering is the way to find out.
    if (Call(api.nvmlDeviceGetSupportedEventTypes, device, &supported) == NVML_SUCCESS &&
        (supported & nvmlEventTypeXidCriticalError) == 0) {
      continue;
    }
    registered = Call(api.nvmlDeviceRegisterEvents, device, nvmlEventTypeXidCriticalError,
                      set) == NVML_SUCCESS ||
                 registered;
  }
  if (!registered) {
    Call(api.nvmlEventSetFree, set);
    return nullptr;
  }
  return set;
}

std::string HostName() {
  char name[HOST_NAME_MAX + 1] = {};
  // gethostname fails only for a too-small buffer; a name is still needed to identify the node.
  if (gethostname(name, HOST_NAME_MAX) != 0 || name[0] == '\0') return "localhost";
  return FromBuffer(name, sizeof name);
}

std::map<std::string, std::string> NodeLabels(const NvmlApi& api) {
  std::map<std::string, std::string> labels;
  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (Call(api.nvmlSystemGetDriverVersion, version, NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE) ==
      NVML_SUCCESS) {
    labels["nvidia.driver_version"] = FromBuffer(version, sizeof version);
  }
  int cuda = 0;  // 13000 for CUDA 13.0
  if (Call(api.nvmlSystemGetCudaDriverVersion_v2, &cuda) == NVML_SUCCESS && cuda > 0) {
    labels["nvidia.cuda_driver_version"] = absl::StrCat(cuda / 1000, ".", (cuda % 1000) / 10);
  }
  return labels;
}

// Name, UUID, memory, compute capability and PCI bus id; each left unset when NVML cannot say.
void ReadIdentity(const NvmlApi& api, nvmlDevice_t device, DiscoveredGpu& gpu) {
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  if (Call(api.nvmlDeviceGetName, device, name, NVML_DEVICE_NAME_V2_BUFFER_SIZE) == NVML_SUCCESS) {
    gpu.name = FromBuffer(name, sizeof name);
  }
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (Call(api.nvmlDeviceGetUUID, device, uuid, NVML_DEVICE_UUID_V2_BUFFER_SIZE) == NVML_SUCCESS) {
    gpu.uuid = FromBuffer(uuid, sizeof uuid);
  }
  nvmlMemory_t memory{};
  if (Call(api.nvmlDeviceGetMemoryInfo, device, &memory) == NVML_SUCCESS) {
    gpu.memory_mib = memory.total / kMiB;
  }
  int major = 0;
  int minor = 0;
  if (Call(api.nvmlDeviceGetCudaComputeCapability, device, &major, &minor) == NVML_SUCCESS) {
    gpu.compute_capability_major = major;
    gpu.compute_capability_minor = minor;
  }
  nvmlPciInfo_t pci{};
  if (Call(api.nvmlDeviceGetPciInfo_v3, device, &pci) == NVML_SUCCESS) {
    gpu.pci_bus_id = FromBuffer(pci.busId, sizeof pci.busId);
  }
}

// The host NUMA node the GPU hangs off is what placement wants (CPUs and host memory near the
// GPU), and sysfs reports exactly that. nvmlDeviceGetNumaNodeId answers a different question,
// the node of the GPU's *own* memory on platforms where that is a NUMA node (Grace Hopper), and is
// NOT_SUPPORTED elsewhere, so it is only the fallback when sysfs cannot say.
int NumaNode(const NvmlApi& api, nvmlDevice_t device, const std::string& pci_bus_id) {
  if (!pci_bus_id.empty()) {
    std::optional<int> node = nvidia_internal::ReadSysfsNumaNode(pci_bus_id);
    if (node.has_value() && *node >= 0) return *node;
  }
  unsigned int node = 0;
  if (Call(api.nvmlDeviceGetNumaNodeId, device, &node) == NVML_SUCCESS) {
    return static_cast<int>(node);
  }
  return -1;
}

// The current MIG mode. A pending change (it needs a GPU reset to take effect) is shown as a
// label so that an operator sees why the mode is not yet what they set.
MigMode ReadMigMode(const NvmlApi& api, nvmlDevice_t device,
                    std::map<std::string, std::string>* labels) {
  unsigned int current = 0;
  unsigned int pending = 0;
  if (Call(api.nvmlDeviceGetMigMode, device, &current, &pending) != NVML_SUCCESS) {
    return MigMode::kUnsupported;
  }
  if (labels != nullptr && pending != current) {
    (*labels)["nvidia.mig_mode_pending"] =
        pending == NVML_DEVICE_MIG_ENABLE ? "enabled" : "disabled";
  }
  return current == NVML_DEVICE_MIG_ENABLE ? MigMode::kEnabled : MigMode::kDisabled;
}

std::vector<NvLinkPeer> ReadNvLinkPeers(const NvmlApi& api, nvmlDevice_t device) {
  std::map<std::string, int> links_by_peer;  // ordered, so the output is stable
  for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
    nvmlEnableState_t active = NVML_FEATURE_DISABLED;
    if (Call(api.nvmlDeviceGetNvLinkState, device, link, &active) != NVML_SUCCESS ||
        active != NVML_FEATURE_ENABLED) {
      continue;
    }
    nvmlPciInfo_t remote{};
    if (Call(api.nvmlDeviceGetNvLinkRemotePciInfo_v2, device, link, &remote) != NVML_SUCCESS) {
      continue;
    }
    std::string peer = FromBuffer(remote.busId, sizeof remote.busId);
    if (!peer.empty()) ++links_by_peer[peer];
  }
  std::vector<NvLinkPeer> peers;
  for (const auto& [peer, links] : links_by_peer) peers.push_back({peer, links});
  return peers;
}

// ---- MIG. ----

// One GPU-instance profile as this GPU's driver defines it.
struct GiProfile {
  unsigned int index = 0;          // NVML_GPU_INSTANCE_PROFILE_*
  unsigned int id = 0;             // the id every other MIG call takes
  unsigned int max_instances = 0;  // NVML's instanceCount
  MigProfile profile;              // the catalogue's, or one built from NVML's figures
};

// NVML's own profile name ("MIG 1g.10gb" -> "1g.10gb"), or empty when the driver has no
// versioned query. v3 first: some drivers accept only the newest version of the struct.
std::string NvmlProfileName(const NvmlApi& api, nvmlDevice_t device, unsigned int index) {
  std::string name;
  nvmlGpuInstanceProfileInfo_v3_t v3{};
  v3.version = nvmlGpuInstanceProfileInfo_v3;
  nvmlGpuInstanceProfileInfo_v2_t v2{};
  v2.version = nvmlGpuInstanceProfileInfo_v2;
  if (Call(api.nvmlDeviceGetGpuInstanceProfileInfoV, device, index, static_cast<void*>(&v3)) ==
      NVML_SUCCESS) {
    name = FromBuffer(v3.name, sizeof v3.name);
  } else if (Call(api.nvmlDeviceGetGpuInstanceProfileInfoV, device, index,
                  static_cast<void*>(&v2)) == NVML_SUCCESS) {
    name = FromBuffer(v2.name, sizeof v2.name);
  }
  if (absl::StartsWith(name, "MIG ")) name.erase(0, 4);
  return name;
}

MigProfile ProfileFor(const NvmlApi& api, nvmlDevice_t device, const GpuModel* model,
                      unsigned int index, const nvmlGpuInstanceProfileInfo_t& info) {
  if (model != nullptr) {
    for (const MigProfile& p : model->mig_profiles) {
      if (p.nvml_profile == static_cast<int>(index)) return p;
    }
  }
  // Not in the catalogue: describe it from NVML so that Discover still shows what is carved.
  MigProfile p;
  p.name = NvmlProfileName(api, device, index);
  if (p.name.empty()) {
    p.name = absl::StrCat(info.sliceCount, "g.", (info.memorySizeMB + 512) / 1024, "gb");
  }
  p.compute_slices = static_cast<int>(info.sliceCount);
  p.memory_mib = static_cast<int>(info.memorySizeMB);
  p.sm_count = static_cast<int>(info.multiprocessorCount);
  p.max_instances = static_cast<int>(info.instanceCount);
  p.nvml_profile = static_cast<int>(index);
  return p;
}

std::vector<GiProfile> GpuInstanceProfiles(const NvmlApi& api, nvmlDevice_t device,
                                           const GpuModel* model) {
  std::vector<GiProfile> profiles;
  std::set<unsigned int> seen_ids;
  for (unsigned int index = 0; index < NVML_GPU_INSTANCE_PROFILE_COUNT; ++index) {
    nvmlGpuInstanceProfileInfo_t info{};
    if (Call(api.nvmlDeviceGetGpuInstanceProfileInfo, device, index, &info) != NVML_SUCCESS) {
      continue;  // a profile this GPU or driver does not have
    }
    if (!seen_ids.insert(info.id).second) continue;
    profiles.push_back({index, info.id, info.instanceCount,
                        ProfileFor(api, device, model, index, info)});
  }
  return profiles;
}

GpuInstanceInfo DescribeGpuInstance(const nvmlGpuInstanceInfo_t& info, const MigProfile& profile) {
  GpuInstanceInfo gi;
  gi.id = static_cast<int>(info.id);
  gi.profile = profile.name;
  gi.start = static_cast<int>(info.placement.start);
  gi.size = static_cast<int>(info.placement.size);
  return gi;
}

std::vector<ComputeInstanceInfo> ReadComputeInstances(const NvmlApi& api,
                                                      nvmlGpuInstance_t instance,
                                                      const MigProfile& gi_profile) {
  std::vector<ComputeInstanceInfo> out;
  std::set<unsigned int> seen_ids;
  for (unsigned int index = 0; index < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++index) {
    nvmlComputeInstanceProfileInfo_t info{};
    if (Call(api.nvmlGpuInstanceGetComputeInstanceProfileInfo, instance, index,
             NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info) != NVML_SUCCESS ||
        !seen_ids.insert(info.id).second) {
      continue;
    }
    std::vector<nvmlComputeInstance_t> handles(std::max(info.instanceCount, kMinInstanceBuffer));
    unsigned int count = 0;
    if (Call(api.nvmlGpuInstanceGetComputeInstances, instance, info.id, handles.data(), &count) !=
        NVML_SUCCESS) {
      continue;
    }
    for (unsigned int k = 0; k < count && k < handles.size(); ++k) {
      nvmlComputeInstanceInfo_t ci{};
      if (Call(api.nvmlComputeInstanceGetInfo_v2, handles[k], &ci) != NVML_SUCCESS) continue;
      const int slices = static_cast<int>(info.sliceCount);
      out.push_back({static_cast<int>(ci.id), GpuModel::ComputeProfileName(gi_profile, slices),
                     slices});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ComputeInstanceInfo& a, const ComputeInstanceInfo& b) { return a.id < b.id; });
  return out;
}

// MIG device UUIDs ("MIG-...") by GPU instance id. A MIG device is one compute instance; a GPU
// instance holding several is given the UUID of its lowest-numbered one.
std::map<unsigned int, std::string> MigDeviceUuids(const NvmlApi& api, nvmlDevice_t device) {
  unsigned int max_devices = 0;
  if (Call(api.nvmlDeviceGetMaxMigDeviceCount, device, &max_devices) != NVML_SUCCESS) return {};
  std::map<unsigned int, std::pair<unsigned int, std::string>> best;  // gi -> (ci, uuid)
  for (unsigned int i = 0; i < max_devices; ++i) {
    nvmlDevice_t mig = nullptr;
    unsigned int gi_id = 0;
    unsigned int ci_id = 0;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    // NOT_FOUND: no MIG device in this slot.
    if (Call(api.nvmlDeviceGetMigDeviceHandleByIndex, device, i, &mig) != NVML_SUCCESS ||
        Call(api.nvmlDeviceGetGpuInstanceId, mig, &gi_id) != NVML_SUCCESS ||
        Call(api.nvmlDeviceGetUUID, mig, uuid, NVML_DEVICE_UUID_V2_BUFFER_SIZE) != NVML_SUCCESS) {
      continue;
    }
    Call(api.nvmlDeviceGetComputeInstanceId, mig, &ci_id);
    std::pair<unsigned int, std::string> candidate{ci_id, FromBuffer(uuid, sizeof uuid)};
    auto [it, inserted] = best.try_emplace(gi_id, candidate);
    if (!inserted && ci_id < it->second.first) it->second = std::move(candidate);
  }
  std::map<unsigned int, std::string> uuids;
  for (auto& [gi_id, entry] : best) uuids[gi_id] = std::move(entry.second);
  return uuids;
}

std::vector<GpuInstanceInfo> ReadMigInstances(const NvmlApi& api, nvmlDevice_t device,
                                              const GpuModel* model) {
  const std::map<unsigned int, std::string> uuids = MigDeviceUuids(api, device);
  std::vector<GpuInstanceInfo> out;
  for (const GiProfile& p : GpuInstanceProfiles(api, device, model)) {
    std::vector<nvmlGpuInstance_t> handles(std::max(p.max_instances, kMinInstanceBuffer));
    unsigned int count = 0;
    if (Call(api.nvmlDeviceGetGpuInstances, device, p.id, handles.data(), &count) !=
        NVML_SUCCESS) {
      continue;
    }
    for (unsigned int k = 0; k < count && k < handles.size(); ++k) {
      nvmlGpuInstanceInfo_t info{};
      if (Call(api.nvmlGpuInstanceGetInfo, handles[k], &info) != NVML_SUCCESS) continue;
      GpuInstanceInfo gi = DescribeGpuInstance(info, p.profile);
      gi.compute_instances = ReadComputeInstances(api, handles[k], p.profile);
      if (auto it = uuids.find(info.id); it != uuids.end()) gi.uuid = it->second;
      out.push_back(std::move(gi));
    }
  }
  std::sort(out.begin(), out.end(), [](const GpuInstanceInfo& a, const GpuInstanceInfo& b) {
    return a.start != b.start ? a.start < b.start : a.id < b.id;
  });
  return out;
}

// The index of the GPU an event names; nullopt when it cannot be attributed.
std::optional<int> DeviceIndex(const NvmlApi& api, unsigned int device_count,
                               nvmlDevice_t device) {
  if (device == nullptr) return std::nullopt;
  unsigned int index = 0;
  if (Call(api.nvmlDeviceGetIndex, device, &index) == NVML_SUCCESS) return static_cast<int>(index);
  for (unsigned int i = 0; i < device_count; ++i) {
    nvmlDevice_t candidate = nullptr;
    if (api.nvmlDeviceGetHandleByIndex_v2(i, &candidate) == NVML_SUCCESS && candidate == device) {
      return static_cast<int>(i);
    }
  }
  return std::nullopt;
}

// Union-find over PCI bus ids (GPUs and the NVSwitches or peers their links reach).
std::string FindRoot(std::map<std::string, std::string>& parent, const std::string& id) {
  std::string root = id;
  for (auto it = parent.find(root); it != parent.end() && it->second != root;
       it = parent.find(root)) {
    root = it->second;
  }
  for (std::string at = id; at != root;) {
    auto it = parent.find(at);
    at = std::exchange(it->second, root);
  }
  return root;
}

}  // namespace

// ---- Pure helpers. ----
namespace nvidia_internal {

std::string NvmlLibraryPath(absl::string_view configured) {
  if (!configured.empty()) return std::string(configured);
  const char* env = std::getenv(kNvmlLibraryEnv);
  if (env != nullptr && *env != '\0') return env;
  return kDefaultNvmlLibrary;
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

std::string CanonicalPciBusId(absl::string_view bus_id) {
  const size_t last = bus_id.find_last_not_of(absl::string_view(" \t\n\0", 4));
  bus_id = last == absl::string_view::npos ? absl::string_view() : bus_id.substr(0, last + 1);
  std::string id = absl::AsciiStrToLower(absl::StripLeadingAsciiWhitespace(bus_id));
  const size_t colon = id.find(':');
  if (colon == std::string::npos) return id;
  size_t zeros = 0;
  while (colon - zeros > 4 && id[zeros] == '0') ++zeros;
  return id.substr(zeros);
}

std::optional<int> ReadSysfsNumaNode(absl::string_view pci_bus_id,
                                     const std::string& pci_devices_dir) {
  const std::string id = CanonicalPciBusId(pci_bus_id);
  // Only a well-formed bus id becomes a path, so a bad one cannot reach outside the directory.
  const bool well_formed =
      absl::StrContains(id, ':') && std::all_of(id.begin(), id.end(), [](char c) {
        return absl::ascii_isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
      });
  if (!well_formed) return std::nullopt;
  std::ifstream in(absl::StrCat(pci_devices_dir, "/", id, "/numa_node"));
  std::string text;
  int node = 0;
  if (!(in >> text) || !absl::SimpleAtoi(text, &node)) return std::nullopt;
  return node;
}

void AssignNvLinkIslands(std::vector<DiscoveredGpu>& gpus) {
  auto key = [](const DiscoveredGpu& gpu) {
    // A GPU whose bus id is unknown still needs a node of its own in the graph.
    return gpu.pci_bus_id.empty() ? absl::StrCat("#gpu", gpu.index)
                                  : CanonicalPciBusId(gpu.pci_bus_id);
  };
  std::map<std::string, std::string> parent;
  std::set<std::string> linked;  // every endpoint some active link touches
  for (const DiscoveredGpu& gpu : gpus) {
    for (const NvLinkPeer& peer : gpu.nvlink_peers) {
      const std::string self = key(gpu);
      const std::string other = CanonicalPciBusId(peer.peer_pci_bus_id);
      linked.insert(self);
      linked.insert(other);
      const std::string a = FindRoot(parent, self);
      const std::string b = FindRoot(parent, other);
      if (a != b) parent[a] = b;
    }
  }
  std::map<std::string, std::string> island_of_root;
  for (DiscoveredGpu& gpu : gpus) {
    const std::string self = key(gpu);
    if (!linked.contains(self)) {
      gpu.nvlink_island = absl::StrCat("gpu", gpu.index);
      continue;
    }
    const std::string root = FindRoot(parent, self);
    auto it = island_of_root.find(root);
    if (it == island_of_root.end()) {
      it = island_of_root.emplace(root, absl::StrCat("nvl", island_of_root.size())).first;
    }
    gpu.nvlink_island = it->second;
  }
}

}  // namespace nvidia_internal

// ---- Opening and closing. ----

absl::StatusOr<std::unique_ptr<NvidiaDriver>> NvidiaDriver::Open(NvidiaDriverOptions options) {
  const std::string path = nvidia_internal::NvmlLibraryPath(options.nvml_library);
  Loaded loaded;
  dlerror();  // clear any stale error so the message below is this call's
  loaded.nvml_library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (loaded.nvml_library == nullptr) {
    std::string why = DlError();
    if (!absl::StrContains(why, path)) why = absl::StrCat(path, ": ", why);
    return absl::UnavailableError(absl::StrCat("NVIDIA driver not found: ", why));
  }
  absl::Status status = ResolveNvml(loaded.nvml_library, path, loaded.api);
  if (status.ok()) {
    const nvmlReturn_t init = loaded.api.nvmlInit_v2();
    if (init != NVML_SUCCESS) status = InitError(loaded.api, init, path);
  }
  if (!status.ok()) {
    dlclose(loaded.nvml_library);
    return status;
  }
  const nvmlReturn_t counted = loaded.api.nvmlDeviceGetCount_v2(&loaded.device_count);
  if (counted != NVML_SUCCESS) {
    status = nvidia_internal::NvmlResultToStatus(counted, "nvmlDeviceGetCount_v2",
                                                 ErrorText(loaded.api, counted));
    loaded.api.nvmlShutdown();
    dlclose(loaded.nvml_library);
    return absl::UnavailableError(absl::StrCat("NVIDIA driver unusable: ", status.message()));
  }
  loaded.cuda_library = LoadCudaDevices(
      options.cuda_library.empty() ? kDefaultCudaLibrary : options.cuda_library,
      loaded.cuda_devices);
  loaded.xid_events = RegisterXidEvents(loaded.api, loaded.device_count);
  std::string node_name = options.node_name.empty() ? HostName() : options.node_name;
  return std::unique_ptr<NvidiaDriver>(
      new NvidiaDriver(std::move(options), std::move(node_name), std::move(loaded)));
}

void* NvidiaDriver::LoadCudaDevices(const std::string& path,
                                    std::map<std::string, CudaDeviceFacts>& devices) {
  // RTLD_NODELETE: cuInit leaves driver threads and state behind that no handle accounts for, so
  // the library must stay mapped even after this driver closes its handle.
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
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
    devices[nvidia_internal::CanonicalPciBusId(FromBuffer(id, sizeof id))] = facts;
  }
  return library;
}

bool NvidiaDriver::DriverPresent() {
  const std::string path = nvidia_internal::NvmlLibraryPath("");
  void* library = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (library == nullptr) return false;
  dlclose(library);
  return true;
}

NvidiaDriver::NvidiaDriver(NvidiaDriverOptions options, std::string node_name, Loaded loaded)
    : options_(std::move(options)), node_name_(std::move(node_name)), loaded_(std::move(loaded)) {}

NvidiaDriver::~NvidiaDriver() {
  if (loaded_.xid_events != nullptr) Call(api().nvmlEventSetFree, loaded_.xid_events);
  api().nvmlShutdown();
  dlclose(loaded_.nvml_library);
  if (loaded_.cuda_library != nullptr) dlclose(loaded_.cuda_library);
}

// ---- Shared steps. ----

absl::StatusOr<nvmlDevice_t> NvidiaDriver::Handle(const GpuRef& gpu) const {
  if (gpu.node != node_name_) {
    return absl::NotFoundError(absl::StrCat("GPU ", GpuName(gpu), " not found: this NVIDIA driver ",
                                            "manages node '", node_name_, "'"));
  }
  if (gpu.index < 0 || static_cast<unsigned int>(gpu.index) >= loaded_.device_count) {
    return absl::NotFoundError(absl::StrCat("GPU ", GpuName(gpu), " not found: node '", node_name_,
                                            "' has ", loaded_.device_count, " NVIDIA GPUs"));
  }
  nvmlDevice_t device = nullptr;
  const nvmlReturn_t result =
      api().nvmlDeviceGetHandleByIndex_v2(static_cast<unsigned int>(gpu.index), &device);
  if (result != NVML_SUCCESS) return NvmlError(result, "nvmlDeviceGetHandleByIndex_v2", gpu);
  return device;
}

absl::Status NvidiaDriver::NvmlError(nvmlReturn_t result, absl::string_view call,
                                     const GpuRef& gpu) const {
  return nvidia_internal::NvmlResultToStatus(
      result, absl::StrCat(call, " on GPU ", GpuName(gpu)), ErrorText(api(), result));
}

absl::Status NvidiaDriver::RequirePartitioning(absl::string_view operation,
                                               const GpuRef& gpu) const {
  if (options_.allow_partitioning) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      operation, " on GPU ", GpuName(gpu), " refused: MIG partitioning changes shared hardware "
      "and is disabled for this NVIDIA driver (enable NvidiaDriverOptions::allow_partitioning "
      "on a host whose GPUs the pool owns)"));
}

absl::Status NvidiaDriver::RequireMigEnabled(nvmlDevice_t device, const GpuRef& gpu) const {
  switch (ReadMigMode(api(), device, nullptr)) {
    case MigMode::kEnabled:
      return absl::OkStatus();
    case MigMode::kDisabled:
      return absl::FailedPreconditionError(absl::StrCat(
          "MIG mode is disabled on GPU ", GpuName(gpu), "; enable it first (nvidia-smi -i ",
          gpu.index, " -mig 1, which takes effect after a GPU reset)"));
    case MigMode::kUnsupported:
      break;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("GPU ", GpuName(gpu), " does not support MIG (or its driver cannot say)"));
}

absl::StatusOr<const GpuModel*> NvidiaDriver::MigModel(nvmlDevice_t device,
                                                       const GpuRef& gpu) const {
  DiscoveredGpu facts;
  ReadIdentity(api(), device, facts);
  const GpuModel* model = MatchDriverReportedModel(facts.name, facts.memory_mib);
  if (model == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GPU ", GpuName(gpu), " ('", facts.name, "', ", facts.memory_mib,
        " MiB) is not in the GPU catalogue, so its MIG profiles are unknown (known models: ",
        KnownGpuModelNames(), ")"));
  }
  if (!model->SupportsMig()) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU ", GpuName(gpu), " is a ", model->name, ", which has no MIG"));
  }
  return model;
}

absl::StatusOr<nvmlGpuInstance_t> NvidiaDriver::GpuInstance(nvmlDevice_t device,
                                                            int gpu_instance_id,
                                                            const GpuRef& gpu) const {
  if (gpu_instance_id < 0) {
    return absl::NotFoundError(
        absl::StrCat("GPU instance ", gpu_instance_id, " not found on GPU ", GpuName(gpu)));
  }
  nvmlGpuInstance_t instance = nullptr;
  const nvmlReturn_t result = Call(api().nvmlDeviceGetGpuInstanceById, device,
                                   static_cast<unsigned int>(gpu_instance_id), &instance);
  if (result != NVML_SUCCESS) {
    return NvmlError(result, absl::StrCat("nvmlDeviceGetGpuInstanceById(", gpu_instance_id, ")"),
                     gpu);
  }
  return instance;
}

// ---- Discovery. ----

absl::StatusOr<std::vector<DiscoveredNode>> NvidiaDriver::Discover() {
  DiscoveredNode node;
  node.name = node_name_;
  node.labels = NodeLabels(api());
  for (unsigned int i = 0; i < loaded_.device_count; ++i) {
    node.gpus.push_back(DescribeGpu(static_cast<int>(i)));
  }
  nvidia_internal::AssignNvLinkIslands(node.gpus);
  std::vector<DiscoveredNode> nodes;
  nodes.push_back(std::move(node));
  return nodes;
}

DiscoveredGpu NvidiaDriver::DescribeGpu(int index) {
  DiscoveredGpu gpu;
  gpu.index = index;
  absl::StatusOr<nvmlDevice_t> device = Handle(GpuRef{node_name_, index});
  if (!device.ok()) {
    // NVML counted the GPU but cannot reach it. Reporting it lost, rather than leaving it out,
    // lets the pool revoke its leases instead of forgetting it.
    gpu.health = HealthState::kLost;
    gpu.labels["nvidia.error"] = std::string(device.status().message());
    absl::MutexLock lock(&mu_);
    last_health_[index] = HealthState::kLost;
    return gpu;
  }
  ReadIdentity(api(), *device, gpu);
  const GpuModel* model = MatchDriverReportedModel(gpu.name, gpu.memory_mib);
  if (model != nullptr) gpu.model = model->name;
  gpu.mig_mode = ReadMigMode(api(), *device, &gpu.labels);
  // With MIG on, CUDA enumerates MIG devices that share the parent's bus id: their SM count is
  // an instance's, not the GPU's, so it is not used.
  if (gpu.mig_mode != MigMode::kEnabled) {
    auto it = loaded_.cuda_devices.find(nvidia_internal::CanonicalPciBusId(gpu.pci_bus_id));
    if (!gpu.pci_bus_id.empty() && it != loaded_.cuda_devices.end()) {
      gpu.sm_count = it->second.sm_count;
      if (gpu.compute_capability_major == 0) {
        gpu.compute_capability_major = it->second.cc_major;
        gpu.compute_capability_minor = it->second.cc_minor;
      }
    }
  }
  if (gpu.mig_mode == MigMode::kEnabled) gpu.instances = ReadMigInstances(api(), *device, model);
  gpu.numa_node = NumaNode(api(), *device, gpu.pci_bus_id);
  gpu.nvlink_peers = ReadNvLinkPeers(api(), *device);

  GpuHealthReading reading = ReadCounters(*device);
  absl::MutexLock lock(&mu_);
  DrainEventsLocked();
  // Discover only looks at pending XIDs: ReadHealth still hands them out.
  if (auto it = pending_xids_.find(index); it != pending_xids_.end()) reading.xids = it->second;
  gpu.health = AssessLocked(index, reading);
  return gpu;
}

// ---- Health. ----

absl::StatusOr<GpuHealthReading> NvidiaDriver::ReadHealth(const GpuRef& gpu) {
  GpuHealthReading reading;
  absl::StatusOr<nvmlDevice_t> device = Handle(gpu);
  if (device.ok()) {
    reading = ReadCounters(*device);
  } else if (absl::IsUnavailable(device.status())) {
    reading.reachable = false;  // it exists (Handle checked the index) but cannot be reached
  } else {
    return device.status();
  }
  absl::MutexLock lock(&mu_);
  DrainEventsLocked();
  if (auto it = pending_xids_.find(gpu.index); it != pending_xids_.end()) {
    reading.xids = std::move(it->second);
    pending_xids_.erase(it);
  }
  AssessLocked(gpu.index, reading);
  return reading;
}

GpuHealthReading NvidiaDriver::ReadCounters(nvmlDevice_t device) const {
  const NvmlApi& api = this->api();
  GpuHealthReading r;
  LostWatch watch;

  nvmlEnableState_t ecc_current = NVML_FEATURE_DISABLED;
  nvmlEnableState_t ecc_pending = NVML_FEATURE_DISABLED;
  const bool ecc_mode_known =
      watch.Ok(Call(api.nvmlDeviceGetEccMode, device, &ecc_current, &ecc_pending));
  // Counters of a GPU with ECC off mean nothing; when the mode is unknown, the counters' own
  // answer (NOT_SUPPORTED) decides.
  if (!ecc_mode_known || ecc_current == NVML_FEATURE_ENABLED) {
    unsigned long long count = 0;
    if (watch.Ok(Call(api.nvmlDeviceGetTotalEccErrors, device, NVML_MEMORY_ERROR_TYPE_CORRECTED,
                      NVML_VOLATILE_ECC, &count))) {
      r.ecc_correctable = static_cast<int64_t>(count);
    }
    if (watch.Ok(Call(api.nvmlDeviceGetTotalEccErrors, device,
                      NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &count))) {
      r.ecc_uncorrectable = static_cast<int64_t>(count);
    }
  }

  for (nvmlPageRetirementCause_t cause : {NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                                          NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR}) {
    unsigned int pages = 0;
    // Without a buffer NVML only counts; it answers INSUFFICIENT_SIZE when there are pages.
    const nvmlReturn_t result = Call(api.nvmlDeviceGetRetiredPages, device, cause, &pages,
                                     static_cast<unsigned long long*>(nullptr));
    if (watch.Ok(result) || result == NVML_ERROR_INSUFFICIENT_SIZE) {
      r.retired_pages = std::max<int64_t>(r.retired_pages, 0) + pages;
    }
  }
  nvmlEnableState_t retirement_pending = NVML_FEATURE_DISABLED;
  if (watch.Ok(Call(api.nvmlDeviceGetRetiredPagesPendingStatus, device, &retirement_pending))) {
    r.retirement_pending = retirement_pending == NVML_FEATURE_ENABLED;
  }

  unsigned int corrected = 0;
  unsigned int uncorrected = 0;
  unsigned int remap_pending = 0;
  unsigned int remap_failed = 0;
  if (watch.Ok(Call(api.nvmlDeviceGetRemappedRows, device, &corrected, &uncorrected,
                    &remap_pending, &remap_failed))) {
    r.remapped_rows_correctable = corrected;
    r.remapped_rows_uncorrectable = uncorrected;
    r.remap_pending = remap_pending != 0;
    r.remap_failed = remap_failed != 0;
  }

  unsigned long long reasons = 0;
  if (watch.Ok(Call(api.nvmlDeviceGetCurrentClocksEventReasons, device, &reasons))) {
    r.throttle_reasons = reasons;  // NVML's bit values are ThrottleReason's
  }
  unsigned int temperature = 0;
  if (watch.Ok(Call(api.nvmlDeviceGetTemperature, device, NVML_TEMPERATURE_GPU, &temperature))) {
    r.temperature_c = static_cast<int>(temperature);
  }
  r.reachable = !watch.lost();
  return r;
}

void NvidiaDriver::DrainEventsLocked() {
  if (loaded_.xid_events == nullptr) return;
  for (int n = 0; n < kMaxEventsPerDrain; ++n) {
    nvmlEventData_t event{};
    // A zero timeout returns at once; TIMEOUT means the set is empty. Other failures (a lost GPU)
    // end the drain too: the per-GPU reads report them.
    if (Call(api().nvmlEventSetWait_v2, loaded_.xid_events, &event, 0U) != NVML_SUCCESS) return;
    if ((event.eventType & nvmlEventTypeXidCriticalError) == 0) continue;
    // An event no GPU can be named for has nowhere to be reported, so it is dropped.
    const std::optional<int> index = DeviceIndex(api(), loaded_.device_count, event.device);
    if (!index.has_value()) continue;
    std::vector<int>& xids = pending_xids_[*index];
    if (xids.size() >= kMaxPendingXidsPerGpu) xids.erase(xids.begin());
    xids.push_back(static_cast<int>(event.eventData));
  }
}

HealthState NvidiaDriver::AssessLocked(int index, const GpuHealthReading& reading) {
  auto it = last_health_.find(index);
  const HealthState previous = it == last_health_.end() ? HealthState::kHealthy : it->second;
  const HealthState state = AssessHealth(reading, previous).state;
  last_health_[index] = state;
  return state;
}

// ---- MIG partitioning. ----

absl::StatusOr<GpuInstanceInfo> NvidiaDriver::CreateGpuInstance(const GpuRef& gpu,
                                                                absl::string_view profile_name,
                                                                std::optional<int> start) {
  if (absl::Status s = RequirePartitioning("CreateGpuInstance", gpu); !s.ok()) return s;
  absl::StatusOr<nvmlDevice_t> device = Handle(gpu);
  if (!device.ok()) return device.status();
  absl::StatusOr<const GpuModel*> model = MigModel(*device, gpu);
  if (!model.ok()) return model.status();
  const MigProfile* profile = (*model)->FindMigProfile(profile_name);
  if (profile == nullptr) {
    std::vector<absl::string_view> known;
    for (const MigProfile& p : (*model)->mig_profiles) known.push_back(p.name);
    return absl::InvalidArgumentError(absl::StrCat("no MIG profile '", profile_name, "' on ",
                                                   (*model)->name, " (known: ",
                                                   absl::StrJoin(known, ", "), ")"));
  }
  if (start.has_value() && std::find(profile->allowed_starts.begin(), profile->allowed_starts.end(),
                                     *start) == profile->allowed_starts.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MIG profile ", profile->name, " cannot start at memory slice ", *start, " on ",
        (*model)->name, " (allowed: ", absl::StrJoin(profile->allowed_starts, ", "), ")"));
  }
  if (absl::Status s = RequireMigEnabled(*device, gpu); !s.ok()) return s;

  nvmlGpuInstanceProfileInfo_t info{};
  nvmlReturn_t result = Call(api().nvmlDeviceGetGpuInstanceProfileInfo, *device,
                             static_cast<unsigned int>(profile->nvml_profile), &info);
  if (result != NVML_SUCCESS) {
    return NvmlError(result, absl::StrCat("nvmlDeviceGetGpuInstanceProfileInfo(", profile->name, ")"),
                     gpu);
  }
  nvmlGpuInstance_t instance = nullptr;
  if (start.has_value()) {
    const nvmlGpuInstancePlacement_t placement{static_cast<unsigned int>(*start),
                                               static_cast<unsigned int>(profile->memory_slices)};
    result = Call(api().nvmlDeviceCreateGpuInstanceWithPlacement, *device, info.id, &placement,
                  &instance);
    if (result != NVML_SUCCESS) {
      return NvmlError(result,
                       absl::StrCat("nvmlDeviceCreateGpuInstanceWithPlacement(", profile->name,
                                    " at slice ", *start, ")"),
                       gpu);
    }
  } else {
    result = Call(api().nvmlDeviceCreateGpuInstance, *device, info.id, &instance);
    if (result != NVML_SUCCESS) {
      return NvmlError(result, absl::StrCat("nvmlDeviceCreateGpuInstance(", profile->name, ")"),
                       gpu);
    }
  }
  nvmlGpuInstanceInfo_t created{};
  result = Call(api().nvmlGpuInstanceGetInfo, instance, &created);
  if (result != NVML_SUCCESS) {
    return NvmlError(result, "nvmlGpuInstanceGetInfo (of the instance just created)", gpu);
  }
  return DescribeGpuInstance(created, *profile);
}

absl::Status NvidiaDriver::DestroyGpuInstance(const GpuRef& gpu, int gpu_instance_id) {
  if (absl::Status s = RequirePartitioning("DestroyGpuInstance", gpu); !s.ok()) return s;
  absl::StatusOr<nvmlDevice_t> device = Handle(gpu);
  if (!device.ok()) return device.status();
  absl::StatusOr<nvmlGpuInstance_t> instance = GpuInstance(*device, gpu_instance_id, gpu);
  if (!instance.ok()) return instance.status();
  const nvmlReturn_t result = Call(api().nvmlGpuInstanceDestroy, *instance);
  absl::Status status =
      NvmlError(result, absl::StrCat("nvmlGpuInstanceDestroy(", gpu_instance_id, ")"), gpu);
  if (result == NVML_ERROR_IN_USE) {
    return absl::FailedPreconditionError(
        absl::StrCat(status.message(), "; destroy its compute instances first"));
  }
  return status;
}

absl::StatusOr<ComputeInstanceInfo> NvidiaDriver::CreateComputeInstance(const GpuRef& gpu,
                                                                        int gpu_instance_id,
                                                                        int compute_slices) {
  if (absl::Status s = RequirePartitioning("CreateComputeInstance", gpu); !s.ok()) return s;
  absl::StatusOr<nvmlDevice_t> device = Handle(gpu);
  if (!device.ok()) return device.status();
  absl::StatusOr<const GpuModel*> model = MigModel(*device, gpu);
  if (!model.ok()) return model.status();
  absl::StatusOr<nvmlGpuInstance_t> instance = GpuInstance(*device, gpu_instance_id, gpu);
  if (!instance.ok()) return instance.status();
  nvmlGpuInstanceInfo_t gi_info{};
  nvmlReturn_t result = Call(api().nvmlGpuInstanceGetInfo, *instance, &gi_info);
  if (result != NVML_SUCCESS) return NvmlError(result, "nvmlGpuInstanceGetInfo", gpu);

  // The instance's profile, from its NVML profile id, names the compute profiles it offers.
  std::optional<MigProfile> gi_profile;
  for (GiProfile& p : GpuInstanceProfiles(api(), *device, *model)) {
    if (p.id == gi_info.profileId) gi_profile = std::move(p.profile);
  }
  if (!gi_profile.has_value()) {
    return absl::InternalError(absl::StrCat("GPU instance ", gpu_instance_id, " on GPU ",
                                            GpuName(gpu), " has NVML profile id ",
                                            gi_info.profileId, ", which the driver does not list"));
  }
  std::optional<unsigned int> ci_index;
  std::vector<int> offered;
  for (const ComputeInstanceProfile& c : (*model)->ComputeProfilesFor(*gi_profile)) {
    offered.push_back(c.compute_slices);
    if (c.compute_slices == compute_slices) ci_index = static_cast<unsigned int>(c.nvml_profile);
  }
  if (!ci_index.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", gi_profile->name, " GPU instance offers compute instances of ",
        absl::StrJoin(offered, ", "), " compute slices, not ", compute_slices));
  }
  nvmlComputeInstanceProfileInfo_t ci_info{};
  result = Call(api().nvmlGpuInstanceGetComputeInstanceProfileInfo, *instance, *ci_index,
                NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_info);
  if (result != NVML_SUCCESS) {
    return NvmlError(result, "nvmlGpuInstanceGetComputeInstanceProfileInfo", gpu);
  }
  nvmlComputeInstance_t compute = nullptr;
  result = Call(api().nvmlGpuInstanceCreateComputeInstance, *instance, ci_info.id, &compute);
  if (result != NVML_SUCCESS) {
    return NvmlError(result,
                     absl::StrCat("nvmlGpuInstanceCreateComputeInstance(", compute_slices,
                                  " slices in GPU instance ", gpu_instance_id, ")"),
                     gpu);
  }
  nvmlComputeInstanceInfo_t created{};
  result = Call(api().nvmlComputeInstanceGetInfo_v2, compute, &created);
  if (result != NVML_SUCCESS) {
    return NvmlError(result, "nvmlComputeInstanceGetInfo_v2 (of the instance just created)", gpu);
  }
  return ComputeInstanceInfo{static_cast<int>(created.id),
                             GpuModel::ComputeProfileName(*gi_profile, compute_slices),
                             compute_slices};
}

absl::Status NvidiaDriver::DestroyComputeInstance(const GpuRef& gpu, int gpu_instance_id,
                                                  int compute_instance_id) {
  if (absl::Status s = RequirePartitioning("DestroyComputeInstance", gpu); !s.ok()) return s;
  absl::StatusOr<nvmlDevice_t> device = Handle(gpu);
  if (!device.ok()) return device.status();
  absl::StatusOr<nvmlGpuInstance_t> instance = GpuInstance(*device, gpu_instance_id, gpu);
  if (!instance.ok()) return instance.status();
  if (compute_instance_id < 0) {
    return absl::NotFoundError(absl::StrCat("compute instance ", compute_instance_id,
                                            " not found in GPU instance ", gpu_instance_id,
                                            " on GPU ", GpuName(gpu)));
  }
  nvmlComputeInstance_t compute = nullptr;
  nvmlReturn_t result = Call(api().nvmlGpuInstanceGetComputeInstanceById, *instance,
                             static_cast<unsigned int>(compute_instance_id), &compute);
  if (result != NVML_SUCCESS) {
    return NvmlError(result,
                     absl::StrCat("nvmlGpuInstanceGetComputeInstanceById(", compute_instance_id,
                                  " in GPU instance ", gpu_instance_id, ")"),
                     gpu);
  }
  result = Call(api().nvmlComputeInstanceDestroy, compute);
  return NvmlError(result, absl::StrCat("nvmlComputeInstanceDestroy(", compute_instance_id, ")"),
                   gpu);
}

}  // namespace gpupool::pool
