#include "absl/strings/string_view.h"
#include "pool/devices/simulated_driver.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pool/mig_planner.h"

namespace gpupool::pool {
namespace {

// FNV-1a over `bytes`, continuing from `h`. absl::Hash would not do: it is seeded per process, and
// the UUIDs must agree between processes (a head and its agents, `gpupool devices` and a scrape).
uint64_t Fnv1a(absl::string_view bytes, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// A stable, UUID-shaped identifier derived from the node name and index, so the same spec gives
// the same UUIDs on every run and in every process (tests and simulations can refer to them).
std::string SimulatedUuid(absl::string_view prefix, absl::string_view node, int index, int sub) {
  uint64_t a = Fnv1a(absl::StrCat(node, "/", index, "/", sub));
  a ^= a >> 29;  // FNV's low bits mix poorly; fold the high ones in
  uint64_t b = Fnv1a(prefix, a * 0x9e3779b97f4a7c15ull);
  b ^= b >> 31;
  return absl::StrFormat("%s-%08x-%04x-%04x-%04x-%012x", prefix, static_cast<uint32_t>(a >> 32),
                         static_cast<uint32_t>(a >> 16) & 0xffff, static_cast<uint32_t>(a) & 0xffff,
                         static_cast<uint32_t>(b >> 48) & 0xffff, b & 0xffffffffffffull);
}

// What a healthy GPU of `model` reports: ECC on with zero counts, row remapping (Ampere and later)
// or page retirement (older) with nothing remapped or retired, idle temperature.
GpuHealthReading CleanReading(const GpuModel& model) {
  GpuHealthReading r;
  r.ecc_correctable = 0;
  r.ecc_uncorrectable = 0;
  if (model.compute_capability_major >= 8) {
    r.remapped_rows_correctable = 0;
    r.remapped_rows_uncorrectable = 0;
  } else {
    r.retired_pages = 0;
  }
  r.temperature_c = 40;
  return r;
}

// A data-centre GPU's typical idle board draw (an idle H100 SXM reads near 70 W, an L4 near 16 W);
// the catalogue has no power figures, so every simulated model idles at this.
constexpr double kIdleWatts = 60.0;

GpuTelemetry IdleActivity() {
  return GpuTelemetry{.utilization_percent = 0, .fb_used_mib = 0, .power_watts = kIdleWatts};
}

// A GPU instance's UUID is its first compute instance's, as the NVIDIA driver reports it; a GPU
// instance without compute instances is no MIG device and has none.
void RefreshInstanceUuid(GpuInstanceInfo& gi) {
  const ComputeInstanceInfo* first = nullptr;
  for (const ComputeInstanceInfo& ci : gi.compute_instances) {
    if (first == nullptr || ci.id < first->id) first = &ci;
  }
  gi.uuid = first != nullptr ? first->uuid : "";
}

int NextFreeId(const std::vector<int>& used) {
  int id = 1;
  while (std::find(used.begin(), used.end(), id) != used.end()) ++id;
  return id;
}

}  // namespace

SimulatedDriver::SimulatedDriver(std::vector<SimNode> nodes) : nodes_(std::move(nodes)) {}

absl::StatusOr<std::unique_ptr<SimulatedDriver>> SimulatedDriver::Create(SimulatedPoolSpec spec) {
  std::vector<SimNode> nodes;
  for (const SimulatedNodeSpec& ns : spec.nodes) {
    SimNode node;
    node.info.name = ns.name;
    node.info.labels = ns.labels;
    node.info.cpu_milli = ns.cpu_milli;
    node.info.memory_mib = ns.memory_mib;
    for (size_t i = 0; i < ns.gpus.size(); ++i) {
      const SimulatedGpuSpec& gs = ns.gpus[i];
      SimGpu gpu;
      gpu.model = gs.model;
      gpu.health = CleanReading(*gs.model);
      gpu.activity = IdleActivity();
      DiscoveredGpu& d = gpu.device;
      d.index = static_cast<int>(i);
      d.name = gs.model->marketing_name;
      d.model = gs.model->name;
      d.uuid = SimulatedUuid("GPU", ns.name, d.index, 0);
      d.memory_mib = gs.model->memory_mib;
      d.compute_capability_major = gs.model->compute_capability_major;
      d.compute_capability_minor = gs.model->compute_capability_minor;
      d.sm_count = gs.model->sm_count;
      d.pci_bus_id = absl::StrFormat("00000000:%02X:00.0", 0x18 + 0x10 * d.index);
      d.numa_node = d.index < static_cast<int>(ns.gpus.size() + 1) / 2 ? 0 : 1;
      d.nvlink_island = gs.nvlink_island;
      d.labels = gs.labels;
      d.mig_mode = gs.model->SupportsMig() ? (gs.mig_enabled ? MigMode::kEnabled : MigMode::kDisabled)
                                           : MigMode::kUnsupported;
      if (gs.mig_enabled) {
        gpu.layout = std::make_unique<MigLayout>(*gs.model);
        absl::StatusOr<std::vector<MigPlacement>> plan =
            PlanMigLayout(*gpu.layout, gs.mig_profiles);
        if (!plan.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("node ", ns.name, " GPU ", i,
                                                         ": initial MIG layout: ",
                                                         plan.status().message()));
        }
        for (const MigPlacement& p : *plan) {
          absl::StatusOr<GpuInstanceInfo> gi = AddInstance(gpu, *p.profile, p.start);
          if (!gi.ok()) return gi.status();
          // nvidia-smi's usual setup: one compute instance spanning each GPU instance.
          GpuInstanceInfo& created = gpu.device.instances.back();
          ComputeInstanceInfo ci{0, p.profile->name, p.profile->compute_slices,
                                 SimulatedUuid("MIG", d.uuid, d.index, created.id * 100)};
          created.compute_instances.push_back(ci);
          RefreshInstanceUuid(created);
        }
      }
      node.gpus.push_back(std::move(gpu));
    }
    // NVLink peers: every other GPU of the same island on the node.
    for (SimGpu& gpu : node.gpus) {
      if (gpu.device.nvlink_island.empty()) continue;
      for (const SimGpu& other : node.gpus) {
        if (&other == &gpu || other.device.nvlink_island != gpu.device.nvlink_island) continue;
        gpu.device.nvlink_peers.push_back({other.device.pci_bus_id, gpu.model->nvlink.links});
      }
    }
    nodes.push_back(std::move(node));
  }
  return std::unique_ptr<SimulatedDriver>(new SimulatedDriver(std::move(nodes)));
}

absl::StatusOr<SimulatedDriver::SimGpu*> SimulatedDriver::FindGpu(const GpuRef& ref) {
  for (SimNode& node : nodes_) {
    if (node.info.name != ref.node) continue;
    if (ref.index < 0 || ref.index >= static_cast<int>(node.gpus.size())) {
      return absl::NotFoundError(absl::StrCat("node ", ref.node, " has no GPU ", ref.index,
                                              " (it has ", node.gpus.size(), ")"));
    }
    return &node.gpus[ref.index];
  }
  return absl::NotFoundError(absl::StrCat("no node named '", ref.node, "'"));
}

absl::StatusOr<SimulatedDriver::SimGpu*> SimulatedDriver::FindReachableMigGpu(const GpuRef& ref) {
  absl::StatusOr<SimGpu*> gpu = FindGpu(ref);
  if (!gpu.ok()) return gpu;
  if (!(*gpu)->health.reachable) {
    return absl::UnavailableError(absl::StrCat("GPU ", ref.index, " on ", ref.node,
                                               " has fallen off the bus"));
  }
  if ((*gpu)->layout == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "MIG mode is ", MigModeName((*gpu)->device.mig_mode), " on GPU ", ref.index, " of ",
        ref.node, " (", (*gpu)->model->name, ")"));
  }
  return gpu;
}

absl::StatusOr<GpuInstanceInfo> SimulatedDriver::AddInstance(SimGpu& gpu, const MigProfile& profile,
                                                             std::optional<int> start) {
  int chosen = 0;
  if (start.has_value()) {
    if (absl::Status s = gpu.layout->CanAdd(profile, *start); !s.ok()) return s;
    chosen = *start;
  } else {
    // Without a placement the driver picks one; ours is the planner's choice.
    const MigProfile* wanted[] = {&profile};
    absl::StatusOr<std::vector<MigPlacement>> plan = PlanMigLayout(*gpu.layout, wanted);
    if (!plan.ok()) return plan.status();
    chosen = plan->front().start;
  }
  if (absl::Status s = gpu.layout->Add(profile, chosen); !s.ok()) return s;
  std::vector<int> used;
  for (const GpuInstanceInfo& gi : gpu.device.instances) used.push_back(gi.id);
  GpuInstanceInfo info;
  info.id = NextFreeId(used);
  info.profile = profile.name;
  info.start = chosen;
  info.size = profile.memory_slices;
  gpu.device.instances.push_back(info);
  return info;
}

absl::StatusOr<std::vector<DiscoveredNode>> SimulatedDriver::Discover() {
  absl::MutexLock lock(&mu_);
  std::vector<DiscoveredNode> out;
  for (const SimNode& node : nodes_) {
    DiscoveredNode d = node.info;
    for (const SimGpu& gpu : node.gpus) {
      DiscoveredGpu g = gpu.device;
      g.health = AssessHealth(gpu.health, gpu.device.health).state;
      d.gpus.push_back(std::move(g));
    }
    out.push_back(std::move(d));
  }
  return out;
}

absl::StatusOr<GpuHealthReading> SimulatedDriver::ReadHealth(const GpuRef& ref) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> gpu = FindGpu(ref);
  if (!gpu.ok()) return gpu.status();
  GpuHealthReading reading = (*gpu)->health;
  // Remember the verdict so a drained GPU stays drained after its XIDs have been read.
  (*gpu)->device.health = AssessHealth(reading, (*gpu)->device.health).state;
  (*gpu)->health.xids.clear();
  return reading;
}

absl::StatusOr<GpuTelemetry> SimulatedDriver::ReadTelemetry(const GpuRef& ref) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> found = FindGpu(ref);
  if (!found.ok()) return found.status();
  const SimGpu& gpu = **found;
  if (!gpu.health.reachable) return GpuTelemetry{.reachable = false, .last_xid = gpu.last_xid};
  GpuTelemetry t = gpu.activity;
  t.fb_free_mib = static_cast<int64_t>(gpu.device.memory_mib) - t.fb_used_mib;
  t.temperature_c = gpu.health.temperature_c;
  t.last_xid = gpu.last_xid;
  return t;
}

absl::Status SimulatedDriver::SetActivity(const GpuRef& ref, int utilization_percent, int64_t fb_used_mib,
                                          double power_watts) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> gpu = FindGpu(ref);
  if (!gpu.ok()) return gpu.status();
  if (utilization_percent < 0 || utilization_percent > 100 || fb_used_mib < 0 ||
      fb_used_mib > static_cast<int64_t>((*gpu)->device.memory_mib) || !(power_watts >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "activity of GPU ", ref.index, " of ", ref.node, ": utilisation must be 0..100 % (got ", utilization_percent,
        "), memory in use 0..", (*gpu)->device.memory_mib, " MiB (got ", fb_used_mib, "), power >= 0 W (got ",
        power_watts, ")"));
  }
  (*gpu)->activity = GpuTelemetry{.utilization_percent = utilization_percent, .fb_used_mib = fb_used_mib,
                                  .power_watts = power_watts};
  return absl::OkStatus();
}

absl::StatusOr<GpuInstanceInfo> SimulatedDriver::CreateGpuInstance(const GpuRef& ref,
                                                                   absl::string_view profile_name,
                                                                   std::optional<int> start) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> gpu = FindReachableMigGpu(ref);
  if (!gpu.ok()) return gpu.status();
  std::string names[] = {std::string(profile_name)};
  absl::StatusOr<std::vector<const MigProfile*>> profile = ResolveMigProfiles(*(*gpu)->model, names);
  if (!profile.ok()) return profile.status();
  return AddInstance(**gpu, *profile->front(), start);
}

absl::Status SimulatedDriver::DestroyGpuInstance(const GpuRef& ref, int gpu_instance_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> gpu = FindReachableMigGpu(ref);
  if (!gpu.ok()) return gpu.status();
  auto& instances = (*gpu)->device.instances;
  auto it = std::find_if(instances.begin(), instances.end(),
                         [&](const GpuInstanceInfo& gi) { return gi.id == gpu_instance_id; });
  if (it == instances.end()) {
    return absl::NotFoundError(absl::StrCat("no GPU instance ", gpu_instance_id, " on GPU ",
                                            ref.index, " of ", ref.node));
  }
  if (!it->compute_instances.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GPU instance ", gpu_instance_id, " still has ", it->compute_instances.size(),
        " compute instance(s); destroy them first"));
  }
  if (absl::Status s = (*gpu)->layout->Remove(it->start); !s.ok()) return s;
  instances.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<ComputeInstanceInfo> SimulatedDriver::CreateComputeInstance(const GpuRef& ref,
                                                                           int gpu_instance_id,
                                                                           int compute_slices) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> gpu = FindReachableMigGpu(ref);
  if (!gpu.ok()) return gpu.status();
  for (GpuInstanceInfo& gi : (*gpu)->device.instances) {
    if (gi.id != gpu_instance_id) continue;
    const MigProfile& profile = *(*gpu)->model->FindMigProfile(gi.profile);
    std::vector<ComputeInstanceProfile> allowed = (*gpu)->model->ComputeProfilesFor(profile);
    if (std::none_of(allowed.begin(), allowed.end(),
                     [&](const ComputeInstanceProfile& c) { return c.compute_slices == compute_slices; })) {
      return absl::InvalidArgumentError(absl::StrCat("no ", compute_slices,
                                                     "-slice compute instance profile inside ",
                                                     gi.profile));
    }
    int used = 0;
    std::vector<int> ids;
    for (const ComputeInstanceInfo& ci : gi.compute_instances) {
      used += ci.compute_slices;
      ids.push_back(ci.id);
    }
    if (used + compute_slices > profile.compute_slices) {
      return absl::FailedPreconditionError(absl::StrCat(
          "GPU instance ", gi.id, " (", gi.profile, ") has ", profile.compute_slices - used,
          " free compute slices, ", compute_slices, " asked"));
    }
    // Compute-instance ids start at 0, as NVML numbers them.
    int id = 0;
    while (std::find(ids.begin(), ids.end(), id) != ids.end()) ++id;
    ComputeInstanceInfo ci{id, GpuModel::ComputeProfileName(profile, compute_slices), compute_slices,
                           SimulatedUuid("MIG", (*gpu)->device.uuid, (*gpu)->device.index,
                                         gi.id * 100 + id)};
    gi.compute_instances.push_back(ci);
    RefreshInstanceUuid(gi);
    return ci;
  }
  return absl::NotFoundError(absl::StrCat("no GPU instance ", gpu_instance_id, " on GPU ",
                                          ref.index, " of ", ref.node));
}

absl::Status SimulatedDriver::DestroyComputeInstance(const GpuRef& ref, int gpu_instance_id,
                                                     int compute_instance_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> gpu = FindReachableMigGpu(ref);
  if (!gpu.ok()) return gpu.status();
  for (GpuInstanceInfo& gi : (*gpu)->device.instances) {
    if (gi.id != gpu_instance_id) continue;
    auto& cis = gi.compute_instances;
    auto it = std::find_if(cis.begin(), cis.end(), [&](const ComputeInstanceInfo& ci) {
      return ci.id == compute_instance_id;
    });
    if (it == cis.end()) {
      return absl::NotFoundError(absl::StrCat("no compute instance ", compute_instance_id,
                                              " in GPU instance ", gpu_instance_id));
    }
    cis.erase(it);
    RefreshInstanceUuid(gi);
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("no GPU instance ", gpu_instance_id, " on GPU ",
                                          ref.index, " of ", ref.node));
}

absl::Status SimulatedDriver::SetMigMode(const GpuRef& ref, bool enabled) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> found = FindGpu(ref);
  if (!found.ok()) return found.status();
  SimGpu& gpu = **found;
  if (!gpu.model->SupportsMig()) {
    return absl::FailedPreconditionError(absl::StrCat(gpu.model->name, " does not support MIG"));
  }
  if (!gpu.device.instances.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GPU ", ref.index, " of ", ref.node, " still has ", gpu.device.instances.size(),
        " MIG instance(s); destroy them before changing MIG mode"));
  }
  gpu.device.mig_mode = enabled ? MigMode::kEnabled : MigMode::kDisabled;
  gpu.layout = enabled ? std::make_unique<MigLayout>(*gpu.model) : nullptr;
  return absl::OkStatus();
}

absl::Status SimulatedDriver::InjectXid(const GpuRef& ref, int xid) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> gpu = FindGpu(ref);
  if (!gpu.ok()) return gpu.status();
  GpuHealthReading& h = (*gpu)->health;
  h.xids.push_back(xid);
  (*gpu)->last_xid = xid;
  if (xid == 79) h.reachable = false;
  if (xid == 48 || xid == 94 || xid == 95) h.ecc_uncorrectable = std::max<int64_t>(h.ecc_uncorrectable, 0) + 1;
  return absl::OkStatus();
}

absl::Status SimulatedDriver::InjectEccError(const GpuRef& ref, EccErrorKind kind, int count) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> gpu = FindGpu(ref);
  if (!gpu.ok()) return gpu.status();
  GpuHealthReading& h = (*gpu)->health;
  const bool remaps_rows = (*gpu)->model->compute_capability_major >= 8;  // Ampere and later
  if (kind == EccErrorKind::kSingleBit) {
    h.ecc_correctable = std::max<int64_t>(h.ecc_correctable, 0) + count;
    return absl::OkStatus();
  }
  h.ecc_uncorrectable = std::max<int64_t>(h.ecc_uncorrectable, 0) + count;
  h.xids.push_back(48);
  (*gpu)->last_xid = 48;
  if (remaps_rows) {
    h.remapped_rows_uncorrectable = std::max<int64_t>(h.remapped_rows_uncorrectable, 0) + count;
    h.remap_pending = true;
  } else {
    h.retired_pages = std::max<int64_t>(h.retired_pages, 0) + count;
    h.retirement_pending = true;
  }
  return absl::OkStatus();
}

absl::Status SimulatedDriver::InjectSilentCorruption(const GpuRef& ref) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> gpu = FindGpu(ref);
  if (!gpu.ok()) return gpu.status();
  (*gpu)->corrupts_data = true;
  return absl::OkStatus();
}

absl::Status SimulatedDriver::SetThermalState(const GpuRef& ref, uint64_t throttle_reasons,
                                              int temperature_c) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> gpu = FindGpu(ref);
  if (!gpu.ok()) return gpu.status();
  (*gpu)->health.throttle_reasons = throttle_reasons;
  (*gpu)->health.temperature_c = temperature_c;
  return absl::OkStatus();
}

absl::Status SimulatedDriver::Repair(const GpuRef& ref) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> gpu = FindGpu(ref);
  if (!gpu.ok()) return gpu.status();
  (*gpu)->health = CleanReading(*(*gpu)->model);
  (*gpu)->activity = IdleActivity();
  (*gpu)->last_xid = 0;
  (*gpu)->corrupts_data = false;
  (*gpu)->device.health = HealthState::kHealthy;
  return absl::OkStatus();
}

absl::Status SimulatedDriver::RunMemoryTest(const GpuRef& ref) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SimGpu*> gpu = FindGpu(ref);
  if (!gpu.ok()) return gpu.status();
  if (!(*gpu)->health.reachable) {
    return absl::UnavailableError(absl::StrCat("GPU ", ref.index, " on ", ref.node,
                                               " has fallen off the bus"));
  }
  if ((*gpu)->corrupts_data) {
    (*gpu)->health.data_corruption_detected = true;
    return absl::DataLossError(absl::StrCat("memory pattern test on GPU ", ref.index, " of ",
                                            ref.node, " read back altered data"));
  }
  return absl::OkStatus();
}

bool SimulatedDriver::CorruptsData(const GpuRef& ref) const {
  absl::MutexLock lock(&mu_);
  auto* self = const_cast<SimulatedDriver*>(this);
  absl::StatusOr<SimGpu*> gpu = self->FindGpu(ref);
  return gpu.ok() && (*gpu)->corrupts_data;
}

}  // namespace gpupool::pool
