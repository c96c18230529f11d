// File: tests/pool/scheduler_pool.h
//
// A pool from YAML (nodes + teams) with its scheduler, for the scheduler's tests: the simulated
// driver discovers the nodes, as the head does at start.
#ifndef GPUPOOL_TESTS_POOL_SCHEDULER_POOL_H_
#define GPUPOOL_TESTS_POOL_SCHEDULER_POOL_H_

#include <memory>
#include <string>
#include <vector>

#include "pool/config/pool_config.h"
#include "pool/devices/simulated_driver.h"
#include "pool/scheduler/scheduler.h"

namespace gpupool::pool {

class Pool {
 public:
  explicit Pool(const std::string& yaml, SchedulerOptions options = {}) {
    config_ = ParsePoolConfig(yaml, "test.yaml").value();
    auto driver = SimulatedDriver::Create(*config_.simulated_nodes).value();
    inventory_ = std::make_unique<Inventory>(Inventory::FromDiscovery(driver->Discover().value()).value());
    scheduler_ = std::make_unique<Scheduler>(*inventory_, config_.scheduling, options);
  }
  Scheduler& s() { return *scheduler_; }

  absl::StatusOr<std::string> Submit(const std::string& id, const std::string& team, int gpus,
                                     const std::string& cls = "training", int64_t now = 0) {
    LeaseRequest r;
    r.id = id;
    r.team = team;
    r.priority_class = cls;
    r.slot_count = gpus;
    return scheduler_->Submit(r, now);
  }
  // The seam for tests that build a layout: a lease for `r` on exactly these GPUs, granted at
  // `now` (through Scheduler::Adopt, as a head restarted from its journal takes its leases back),
  // instead of relying on where the placement policy would put it.
  absl::Status Place(const LeaseRequest& r, const std::vector<GpuRef>& gpus, int64_t now = 0) {
    Lease lease;
    lease.id = r.id + "#placed";
    lease.request = r;
    lease.gpus = gpus;
    const int g = scheduler_->topology().Find(gpus.at(0));
    if (g < 0) return absl::NotFoundError("no such GPU");
    lease.group = scheduler_->topology().gpus()[g].group;
    return scheduler_->Adopt(std::move(lease), now);
  }
  WaitReason ReasonOf(const std::string& id) {
    for (const PendingInfo& p : scheduler_->Pending()) {
      if (p.request_id == id) return p.reason;
    }
    return WaitReason::kNone;
  }
  std::string LeaseOf(const std::string& request_id) {
    for (const auto& [id, lease] : scheduler_->leases()) {
      if (lease.request.id == request_id) return id;
    }
    return "";
  }

 private:
  PoolConfig config_;
  std::unique_ptr<Inventory> inventory_;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_TESTS_POOL_SCHEDULER_POOL_H_
