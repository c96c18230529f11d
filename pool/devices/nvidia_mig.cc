#include "pool/devices/nvidia_mig.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pool/devices/nvidia_driver.h"
#include "pool/devices/nvml_library.h"

namespace gpupool::pool {

// nvml_api.h keeps NVIDIA's own names (NVML_SUCCESS, nvmlDevice_t) so that each call reads like
// NVIDIA's reference; they live in their own namespace and only the NVIDIA driver's source files
// import them.
using namespace nvml;  // NOLINT(build/namespaces)
using nvidia_internal::Call;
using nvidia_internal::FromBuffer;
using nvidia_internal::GpuName;

namespace {

// No GPU has more MIG instances of one profile than this; NVML's own count is used when larger.
constexpr unsigned int kMinInstanceBuffer = 8;

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

// The UUIDs ("MIG-...") of one GPU's MIG devices. A MIG device is one compute instance.
struct MigDeviceUuids {
  // By (GPU instance id, compute instance id).
  std::map<std::pair<unsigned int, unsigned int>, std::string> by_compute_instance;
  // By GPU instance id: (compute instance id, UUID) of its lowest-numbered compute instance. A
  // device whose compute instance id NVML cannot report counts as number 0 here and is absent
  // above: its GPU instance still gets a UUID, and no compute instance is given a guessed one.
  std::map<unsigned int, std::pair<unsigned int, std::string>> by_gpu_instance;

  // The UUID of compute instance `ci_id` in GPU instance `gi_id`; empty when NVML reported none.
  std::string Find(unsigned int gi_id, int ci_id) const {
    if (ci_id < 0) return "";
    auto it = by_compute_instance.find({gi_id, static_cast<unsigned int>(ci_id)});
    return it != by_compute_instance.end() ? it->second : "";
  }
};

MigDeviceUuids ReadMigDeviceUuids(const NvmlApi& api, nvmlDevice_t device) {
  MigDeviceUuids uuids;
  unsigned int max_devices = 0;
  if (Call(api.nvmlDeviceGetMaxMigDeviceCount, device, &max_devices) != NVML_SUCCESS) {
    return uuids;
  }
  for (unsigned int i = 0; i < max_devices; ++i) {
    nvmlDevice_t mig = nullptr;
    unsigned int gi_id = 0;
    unsigned int ci_id = 0;
    char buffer[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    // NOT_FOUND: no MIG device in this slot.
    if (Call(api.nvmlDeviceGetMigDeviceHandleByIndex, device, i, &mig) != NVML_SUCCESS ||
        Call(api.nvmlDeviceGetGpuInstanceId, mig, &gi_id) != NVML_SUCCESS ||
        Call(api.nvmlDeviceGetUUID, mig, buffer, NVML_DEVICE_UUID_V2_BUFFER_SIZE) !=
            NVML_SUCCESS) {
      continue;
    }
    std::string uuid = FromBuffer(buffer, sizeof buffer);
    if (Call(api.nvmlDeviceGetComputeInstanceId, mig, &ci_id) == NVML_SUCCESS) {
      uuids.by_compute_instance.try_emplace({gi_id, ci_id}, uuid);
    } else {
      ci_id = 0;
    }
    auto [it, inserted] = uuids.by_gpu_instance.try_emplace(gi_id, ci_id, uuid);
    if (!inserted && ci_id < it->second.first) it->second = {ci_id, std::move(uuid)};
  }
  return uuids;
}

// The compute instances of GPU instance `gi_id`, by id, with their MIG device UUIDs.
std::vector<ComputeInstanceInfo> ReadComputeInstances(const NvmlApi& api,
                                                      nvmlGpuInstance_t instance,
                                                      unsigned int gi_id,
                                                      const MigProfile& gi_profile,
                                                      const MigDeviceUuids& uuids) {
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
      const int id = static_cast<int>(ci.id);
      out.push_back({id, GpuModel::ComputeProfileName(gi_profile, slices), slices,
                     uuids.Find(gi_id, id)});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ComputeInstanceInfo& a, const ComputeInstanceInfo& b) { return a.id < b.id; });
  return out;
}

}  // namespace

// ---- Reading MIG state. ----
namespace nvidia_internal {

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

std::vector<GpuInstanceInfo> ReadMigInstances(const NvmlApi& api, nvmlDevice_t device,
                                              const GpuModel* model) {
  const MigDeviceUuids uuids = ReadMigDeviceUuids(api, device);
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
      gi.compute_instances = ReadComputeInstances(api, handles[k], info.id, p.profile, uuids);
      if (auto it = uuids.by_gpu_instance.find(info.id); it != uuids.by_gpu_instance.end()) {
        gi.uuid = it->second.second;
      }
      out.push_back(std::move(gi));
    }
  }
  std::sort(out.begin(), out.end(), [](const GpuInstanceInfo& a, const GpuInstanceInfo& b) {
    return a.start != b.start ? a.start < b.start : a.id < b.id;
  });
  return out;
}

}  // namespace nvidia_internal

// ---- Partitioning. ----

absl::Status NvidiaDriver::RequirePartitioning(absl::string_view operation,
                                               const GpuRef& gpu) const {
  if (options_.allow_partitioning) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      operation, " on GPU ", GpuName(gpu), " refused: MIG partitioning changes shared hardware "
      "and is disabled for this NVIDIA driver (enable NvidiaDriverOptions::allow_partitioning "
      "on a host whose GPUs the pool owns)"));
}

absl::Status NvidiaDriver::RequireMigEnabled(nvmlDevice_t device, const GpuRef& gpu) const {
  switch (nvidia_internal::ReadMigMode(api(), device, nullptr)) {
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
    return NvmlError(
        result, absl::StrCat("nvmlDeviceGetGpuInstanceProfileInfo(", profile->name, ")"), gpu);
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
  ComputeInstanceInfo ci;
  ci.id = static_cast<int>(created.id);
  ci.profile = GpuModel::ComputeProfileName(*gi_profile, compute_slices);
  ci.compute_slices = compute_slices;
  // NVML makes the MIG device together with the compute instance; a driver that cannot report
  // its UUID leaves it empty.
  ci.uuid = ReadMigDeviceUuids(api(), *device).Find(gi_info.id, ci.id);
  return ci;
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
