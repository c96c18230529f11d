#include "absl/strings/string_view.h"
#include "runtime/rpc/label_codec.h"
#include "runtime/rpc/inventory_codec.h"

#include <algorithm>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include "absl/strings/str_cat.h"
#include "runtime/rpc/pool_inventory.capnp.h"

namespace gpupool::rpc {
namespace {

// The wire's enums and the public ones. A value a newer peer sent that this build does not know
// reads as the safest state: no MIG, GPU lost.
MigMode ToWire(gpupool::MigMode mode) {
  switch (mode) {
    case gpupool::MigMode::kUnsupported: return MigMode::UNSUPPORTED;
    case gpupool::MigMode::kDisabled: return MigMode::DISABLED;
    case gpupool::MigMode::kEnabled: return MigMode::ENABLED;
  }
  return MigMode::UNSUPPORTED;
}

gpupool::MigMode FromWire(MigMode mode) {
  switch (mode) {
    case MigMode::UNSUPPORTED: return gpupool::MigMode::kUnsupported;
    case MigMode::DISABLED: return gpupool::MigMode::kDisabled;
    case MigMode::ENABLED: return gpupool::MigMode::kEnabled;
  }
  return gpupool::MigMode::kUnsupported;
}

Health ToWire(gpupool::HealthState state) {
  switch (state) {
    case gpupool::HealthState::kHealthy: return Health::HEALTHY;
    case gpupool::HealthState::kDegraded: return Health::DEGRADED;
    case gpupool::HealthState::kDraining: return Health::DRAINING;
    case gpupool::HealthState::kQuarantined: return Health::QUARANTINED;
    case gpupool::HealthState::kFailed: return Health::FAILED;
    case gpupool::HealthState::kLost: return Health::LOST;
  }
  return Health::LOST;
}

gpupool::HealthState FromWire(Health state) {
  switch (state) {
    case Health::HEALTHY: return gpupool::HealthState::kHealthy;
    case Health::DEGRADED: return gpupool::HealthState::kDegraded;
    case Health::DRAINING: return gpupool::HealthState::kDraining;
    case Health::QUARANTINED: return gpupool::HealthState::kQuarantined;
    case Health::FAILED: return gpupool::HealthState::kFailed;
    case Health::LOST: return gpupool::HealthState::kLost;
  }
  return gpupool::HealthState::kLost;
}

std::map<std::string, std::string> DecodeLabels(capnp::List<Label>::Reader in) {
  std::map<std::string, std::string> labels;
  for (Label::Reader l : in) labels[l.getKey()] = l.getValue();
  return labels;
}

void EncodeGpu(const GpuInfo& g, Gpu::Builder out) {
  out.setIndex(g.index);
  out.setModel(g.model);
  out.setName(g.name);
  out.setUuid(g.uuid);
  out.setMemoryMib(g.memory_mib);
  out.setComputeCapabilityMajor(g.compute_capability_major);
  out.setComputeCapabilityMinor(g.compute_capability_minor);
  out.setSmCount(g.sm_count);
  out.setMigMode(ToWire(g.mig_mode));
  auto instances = out.initInstances(g.instances.size());
  for (unsigned i = 0; i < g.instances.size(); ++i) {
    const gpupool::MigInstance& mi = g.instances[i];
    auto b = instances[i];
    b.setId(mi.id);
    b.setProfile(mi.profile);
    b.setStart(mi.start);
    b.setSize(mi.size);
    b.setUuid(mi.uuid);
    auto cis = b.initComputeInstances(mi.compute_instances.size());
    for (unsigned j = 0; j < mi.compute_instances.size(); ++j) {
      cis[j].setId(mi.compute_instances[j].id);
      cis[j].setProfile(mi.compute_instances[j].profile);
    }
  }
  out.setNvlinkIsland(g.nvlink_island);
  out.setPciBusId(g.pci_bus_id);
  out.setNumaNode(g.numa_node);
  out.setHealth(ToWire(g.health));
  auto reasons = out.initHealthReasons(g.health_reasons.size());
  for (unsigned i = 0; i < g.health_reasons.size(); ++i) reasons.set(i, g.health_reasons[i]);
  out.setTemperatureC(g.temperature_c);
  out.setPricePerHour(g.price_per_hour);
  EncodeLabels(g.labels, out.initLabels(g.labels.size()));
}

GpuInfo DecodeGpu(Gpu::Reader in) {
  GpuInfo g;
  g.index = static_cast<int>(in.getIndex());
  g.model = in.getModel();
  g.name = in.getName();
  g.uuid = in.getUuid();
  g.memory_mib = in.getMemoryMib();
  g.compute_capability_major = in.getComputeCapabilityMajor();
  g.compute_capability_minor = in.getComputeCapabilityMinor();
  g.sm_count = static_cast<int>(in.getSmCount());
  g.mig_mode = FromWire(in.getMigMode());
  for (MigInstance::Reader r : in.getInstances()) {
    gpupool::MigInstance mi;
    mi.id = static_cast<int>(r.getId());
    mi.profile = r.getProfile();
    mi.start = r.getStart();
    mi.size = r.getSize();
    mi.uuid = r.getUuid();
    for (ComputeInstance::Reader c : r.getComputeInstances()) {
      mi.compute_instances.push_back({static_cast<int>(c.getId()), c.getProfile()});
    }
    g.instances.push_back(std::move(mi));
  }
  g.nvlink_island = in.getNvlinkIsland();
  g.pci_bus_id = in.getPciBusId();
  g.numa_node = in.getNumaNode();
  g.health = FromWire(in.getHealth());
  for (capnp::Text::Reader r : in.getHealthReasons()) g.health_reasons.push_back(r);
  g.temperature_c = in.getTemperatureC();
  g.price_per_hour = in.getPricePerHour();
  g.labels = DecodeLabels(in.getLabels());
  return g;
}

}  // namespace

std::string EncodeInventory(const PoolDescription& pool) {
  capnp::MallocMessageBuilder message;
  PoolInventory::Builder root = message.initRoot<PoolInventory>();
  root.setDriver(pool.driver);
  auto nodes = root.initNodes(pool.nodes.size());
  for (unsigned n = 0; n < pool.nodes.size(); ++n) {
    const NodeInfo& node = pool.nodes[n];
    nodes[n].setName(node.name);
    EncodeLabels(node.labels, nodes[n].initLabels(node.labels.size()));
    auto gpus = nodes[n].initGpus(node.gpus.size());
    for (unsigned g = 0; g < node.gpus.size(); ++g) EncodeGpu(node.gpus[g], gpus[g]);
  }
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  kj::ArrayPtr<const char> bytes = words.asChars();
  return std::string(bytes.begin(), bytes.end());
}

absl::StatusOr<PoolDescription> DecodeInventory(absl::string_view bytes) {
  if (bytes.size() > kMaxInventoryBytes) {
    return absl::InvalidArgumentError(absl::StrCat("inventory message of ", bytes.size(),
                                                   " bytes exceeds the limit of ",
                                                   kMaxInventoryBytes));
  }
  if (bytes.size() % sizeof(capnp::word) != 0 || bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inventory message of ", bytes.size(), " bytes is not a whole number of 8-byte words"));
  }
  // Copy into word-aligned storage: the caller's buffer may not be 8-byte aligned.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  memcpy(words.begin(), bytes.data(), bytes.size());
  // Cap'n Proto reports malformed input with kj::Exception; it stops at this boundary.
  PoolDescription pool;
  kj::Maybe<kj::Exception> failure = kj::runCatchingExceptions([&]() {
    // Bounded by what was sent, not only by the largest inventory: Cap'n Proto lets pointers
    // share data, so a few hundred bytes could otherwise be read as a huge inventory (the agent
    // fuzz test found a 584-byte registration that held the head's loop for 2.5 s). An honest
    // message is traversed a few times at most (each getter call counts again).
    capnp::ReaderOptions options;
    options.traversalLimitInWords =
        std::min<uint64_t>(kMaxInventoryBytes / sizeof(capnp::word), 8 * words.size() + 1024);
    capnp::FlatArrayMessageReader reader(words, options);
    PoolInventory::Reader root = reader.getRoot<PoolInventory>();
    pool.driver = root.getDriver();
    for (Node::Reader n : root.getNodes()) {
      NodeInfo node;
      node.name = n.getName();
      node.labels = DecodeLabels(n.getLabels());
      for (Gpu::Reader g : n.getGpus()) node.gpus.push_back(DecodeGpu(g));
      pool.nodes.push_back(std::move(node));
    }
  });
  KJ_IF_MAYBE(e, failure) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed inventory message: ", e->getDescription().cStr()));
  }
  return pool;
}

}  // namespace gpupool::rpc
