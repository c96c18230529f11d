// The NVIDIA driver's core: opening and closing, discovery and health. Loading the libraries is
// in nvml_library.cc, MIG listing and partitioning in nvidia_mig.cc.
#include "pool/devices/nvidia_driver.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <fstream>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "pool/devices/nvidia_mig.h"
#include "pool/devices/nvml_library.h"

namespace gpupool::pool {

// nvml_api.h keeps NVIDIA's own names (NVML_SUCCESS, nvmlDevice_t) so that each call reads like
// NVIDIA's reference; they live in their own namespace and only the NVIDIA driver's source files
// import them.
using namespace nvml;  // NOLINT(build/namespaces)
using nvidia_internal::Call;
using nvidia_internal::FromBuffer;
using nvidia_internal::GpuName;
using nvidia_internal::NvmlErrorText;

namespace {

constexpr uint64_t kMiB = 1024 * 1024;
// Bounds one drain so that an event storm cannot stall a health read; the rest waits in NVML.
constexpr int kMaxEventsPerDrain = 256;
// XIDs kept for a GPU nobody reads; beyond this the oldest are dropped.
constexpr size_t kMaxPendingXidsPerGpu = 1024;

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

// nvmlInit failing means the driver as a whole cannot be used: kUnavailable, except that a
// permission refusal is the operator's to fix and keeps its own code.
absl::Status InitError(const NvmlApi& api, nvmlReturn_t result, const std::string& path) {
  absl::Status status = nvidia_internal::NvmlResultToStatus(
      result, absl::StrCat("nvmlInit_v2 (", path, ")"), NvmlErrorText(api, result));
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
  return nvidia_internal::OnlyNumaNode().value_or(-1);
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

std::optional<int> OnlyNumaNode(const std::string& nodes_dir) {
  std::ifstream in(nodes_dir + "/online");
  std::string text;
  int node = 0;
  // A range ("0-1") or a list ("0,2") means several nodes; SimpleAtoi refuses both.
  if (!(in >> text) || !absl::SimpleAtoi(text, &node) || node < 0) return std::nullopt;
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

std::string GpuName(const GpuRef& gpu) { return absl::StrCat(gpu.node, "/", gpu.index); }

}  // namespace nvidia_internal

// ---- Opening and closing. ----

absl::StatusOr<std::unique_ptr<NvidiaDriver>> NvidiaDriver::Open(NvidiaDriverOptions options) {
  const std::string path = nvidia_internal::NvmlLibraryPath(options.nvml_library);
  Loaded loaded;
  absl::StatusOr<void*> library = nvidia_internal::LoadNvmlLibrary(path, loaded.api);
  if (!library.ok()) return library.status();
  loaded.nvml_library = *library;
  const nvmlReturn_t init = loaded.api.nvmlInit_v2();
  if (init != NVML_SUCCESS) {
    absl::Status status = InitError(loaded.api, init, path);  // before dlclose: it asks NVML
    dlclose(loaded.nvml_library);
    return status;
  }
  const nvmlReturn_t counted = loaded.api.nvmlDeviceGetCount_v2(&loaded.device_count);
  if (counted != NVML_SUCCESS) {
    absl::Status status = nvidia_internal::NvmlResultToStatus(
        counted, "nvmlDeviceGetCount_v2", NvmlErrorText(loaded.api, counted));
    loaded.api.nvmlShutdown();
    dlclose(loaded.nvml_library);
    return absl::UnavailableError(absl::StrCat("NVIDIA driver unusable: ", status.message()));
  }
  std::vector<nvidia_internal::CudaDeviceFacts> cuda_devices;
  loaded.cuda_library = nvidia_internal::LoadCudaLibrary(options.cuda_library, cuda_devices);
  for (nvidia_internal::CudaDeviceFacts& facts : cuda_devices) {
    std::string id = nvidia_internal::CanonicalPciBusId(facts.pci_bus_id);
    loaded.cuda_devices[std::move(id)] = std::move(facts);
  }
  loaded.xid_events = RegisterXidEvents(loaded.api, loaded.device_count);
  std::string node_name = options.node_name.empty() ? HostName() : options.node_name;
  return std::unique_ptr<NvidiaDriver>(
      new NvidiaDriver(std::move(options), std::move(node_name), std::move(loaded)));
}

bool NvidiaDriver::DriverPresent() {
  return nvidia_internal::LibraryLoadable(nvidia_internal::NvmlLibraryPath(""));
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
      result, absl::StrCat(call, " on GPU ", GpuName(gpu)), NvmlErrorText(api(), result));
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

// ---- Discovery. ----

absl::StatusOr<std::vector<DiscoveredNode>> NvidiaDriver::Discover() {
  DiscoveredNode node;
  node.name = node_name_;
  node.labels = NodeLabels(api());
  // The host's CPUs and memory, which requests' CPU and memory count against on a real node.
  if (long cpus = sysconf(_SC_NPROCESSORS_ONLN); cpus > 0) node.cpu_milli = int64_t{cpus} * 1000;
  if (long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE); pages > 0 && page > 0) {
    node.memory_mib = static_cast<int64_t>(pages) * page / (1024 * 1024);
  }
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
  gpu.mig_mode = nvidia_internal::ReadMigMode(api(), *device, &gpu.labels);
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
  if (gpu.mig_mode == MigMode::kEnabled) {
    gpu.instances = nvidia_internal::ReadMigInstances(api(), *device, model);
  }
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
  // The driver's recovery action: absent (NOT_SUPPORTED per field) before R550.
  nvml::nvmlFieldValue_t field{};
  field.fieldId = nvml::NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
  if (watch.Ok(Call(api.nvmlDeviceGetFieldValues, device, 1, &field)) && field.nvmlReturn == nvml::NVML_SUCCESS) {
    r.recovery_action = static_cast<int>(field.value.uiVal);
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
    last_xid_[*index] = static_cast<int>(event.eventData);
  }
}

HealthState NvidiaDriver::AssessLocked(int index, const GpuHealthReading& reading) {
  auto it = last_health_.find(index);
  const HealthState previous = it == last_health_.end() ? HealthState::kHealthy : it->second;
  const HealthState state = AssessHealth(reading, previous).state;
  last_health_[index] = state;
  return state;
}

}  // namespace gpupool::pool
