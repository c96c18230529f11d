#include "runtime/service/pool_service.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pool/devices/driver_selection.h"
#include "pool/health.h"

namespace gpupool::runtime {

absl::StatusOr<std::unique_ptr<PoolService>> PoolService::Start(const PoolServiceOptions& options) {
  if (!(options.clock_speed > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clock speed must be positive (got ", options.clock_speed, ")"));
  }
  std::unique_ptr<PoolService> p(new PoolService());
  if (!options.config_path.empty()) {
    std::ifstream in(options.config_path);
    if (!in) {
      return absl::NotFoundError(absl::StrCat("cannot read the pool configuration '", options.config_path, "'"));
    }
    std::stringstream text;
    text << in.rdbuf();
    p->config_text_ = text.str();
  } else {
    p->config_text_ = options.config_text;
  }
  if (!p->config_text_.empty()) {
    absl::StatusOr<pool::PoolConfig> config = pool::ParsePoolConfig(
        p->config_text_, options.config_path.empty() ? "<inline configuration>" : options.config_path);
    if (!config.ok()) return config.status();
    p->config_ = *std::move(config);
  } else {
    p->config_.scheduling = pool::DefaultSchedulingConfig();
  }
  std::vector<pool::DiscoveredNode> nodes;
  if (!options.remote_nodes.empty()) {
    nodes = options.remote_nodes;
    p->driver_name_ = options.remote_driver;
  } else {
    pool::DriverChoice choice{.driver = options.driver,
                              .simulation_spec = options.simulate,
                              .node_count = options.node_count,
                              .config = p->config_text_.empty() ? nullptr : &p->config_};
    absl::StatusOr<pool::SelectedDriver> selected = pool::SelectDriver(choice);
    if (!selected.ok()) return selected.status();
    p->driver_ = std::move(selected->driver);
    p->driver_name_ = std::string(p->driver_->name());
    p->notice_ = std::move(selected->notice);
    absl::StatusOr<std::vector<pool::DiscoveredNode>> discovered = p->driver_->Discover();
    if (!discovered.ok()) return discovered.status();
    nodes = *std::move(discovered);
  }
  absl::StatusOr<pool::Inventory> inventory = pool::Inventory::FromDiscovery(nodes);
  if (!inventory.ok()) return inventory.status();
  p->inventory_ = *std::move(inventory);
  p->clock_speed_ = options.clock_speed;
  p->health_interval_ = options.health_interval;
  p->scheduler_ = std::make_unique<pool::Scheduler>(p->inventory_, p->config_.scheduling);
  p->start_ = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(p->mu_);
    if (p->driver_ != nullptr) {
      p->PollHealth();  // health as discovered, so the first poll only reports changes
    } else {
      // Remote nodes are unreachable until their agents say otherwise.
      for (const pool::InventoryNode& node : p->inventory_.nodes()) p->nodes_up_[node.name] = false;
      for (const pool::InventoryGpu& gpu : p->inventory_.gpus()) {
        p->reported_[absl::StrCat(gpu.ref.node, "/", gpu.ref.index)] = pool::HealthState::kHealthy;
        p->ApplyHealth(gpu.ref, pool::HealthState::kLost);
      }
    }
    p->outbox_.clear();  // nobody listens yet
  }
  p->thread_ = std::thread([raw = p.get()] { raw->Loop(); });
  return p;
}

PoolService::~PoolService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

double PoolService::Now() const {
  std::chrono::duration<double> real = std::chrono::steady_clock::now() - start_;
  return real.count() * clock_speed_;
}

absl::Status PoolService::Request(pool::LeaseRequest request, LeaseListener* listener) {
  return Queue(std::move(request), 0, listener);
}

absl::Status PoolService::Requeue(pool::LeaseRequest request, double waited_s, LeaseListener* listener) {
  return Queue(std::move(request), std::max(0.0, waited_s), listener);
}

absl::Status PoolService::Queue(pool::LeaseRequest request, double waited_s, LeaseListener* listener) {
  std::string id = request.id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t now = NowSeconds();
    absl::StatusOr<std::string> submitted =
        waited_s > 0 ? scheduler_->Resubmit(std::move(request), now,
                                            now - static_cast<int64_t>(waited_s * clock_speed_))
                     : scheduler_->Submit(std::move(request), now);
    if (!submitted.ok()) return submitted.status();
    request_listeners_[id] = listener;
    dirty_ = true;
  }
  WakeForCycle();
  return absl::OkStatus();
}

absl::Status PoolService::Withdraw(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status s = scheduler_->Cancel(request_id);
  if (s.ok()) request_listeners_.erase(request_id);
  return s;
}

absl::Status PoolService::Release(const std::string& lease_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leases_.Find(lease_id) == nullptr) {
      return absl::NotFoundError(absl::StrCat("lease '", lease_id, "' is not held"));
    }
    absl::Status s = scheduler_->Release(lease_id, NowSeconds());
    if (!s.ok()) return s;
    leases_.Close(lease_id, Now());
    dirty_ = true;
  }
  WakeForCycle();
  return absl::OkStatus();
}

void PoolService::Checkpointed(const std::string& lease_id, const CheckpointNote&) {
  std::lock_guard<std::mutex> lock(mu_);
  (void)scheduler_->RecordCheckpoint(lease_id, NowSeconds());  // NotFound: it ended meanwhile
}

absl::Status PoolService::Adopt(const pool::Lease& lease, LeaseListener* listener) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status st = scheduler_->Adopt(lease, NowSeconds()); !st.ok()) return st;
  OpenLease(scheduler_->leases().at(lease.id), listener);
  dirty_ = true;
  return absl::OkStatus();
}

void PoolService::OwnerSchedules() { owner_schedules_.store(true); }

void PoolService::WakeForCycle() {
  if (!owner_schedules_.load()) cv_.notify_all();
}

size_t PoolService::pending_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return scheduler_->pending_count();
}

void PoolService::ScheduleNow() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!dirty_) return;
    dirty_ = false;
    Absorb(scheduler_->Schedule(NowSeconds()));
  }
  Deliver();
}

std::map<std::string, LedgerTeam> PoolService::Ledger() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leases_.Totals(Now());
}

void PoolService::OpenLease(const pool::Lease& lease, LeaseListener* listener) {
  leases_.Open(lease.id, LeaseBook::Lease{.listener = listener,
                                          .team = lease.request.team,
                                          .gpus = static_cast<double>(lease.milli) / 1000.0,
                                          .borrowing = lease.borrowing,
                                          .started_s = Now()});
}

void PoolService::Absorb(const pool::CycleResult& result) {
  const auto& leases = scheduler_->leases();
  for (const std::string& lease_id : result.granted) {
    auto it = leases.find(lease_id);
    if (it == leases.end()) continue;
    const pool::Lease& lease = it->second;
    auto listener = request_listeners_.find(lease.request.id);
    if (listener == request_listeners_.end()) continue;
    OpenLease(lease, listener->second);
    outbox_.push_back(Delivery{listener->second, Delivery::kGranted, lease});
    request_listeners_.erase(listener);
  }
  for (const pool::Revocation& r : result.revoked) {
    const LeaseBook::Lease* held = leases_.Find(r.lease_id);
    if (held == nullptr) continue;
    Delivery d{held->listener, Delivery::kRevoked, pool::Lease{}};
    d.lease.id = r.lease_id;
    d.cause = r.cause;
    d.deadline_s = static_cast<double>(r.deadline_s);
    outbox_.push_back(std::move(d));
  }
  for (const std::string& lease_id : result.expired) {
    const LeaseBook::Lease* held = leases_.Find(lease_id);
    if (held == nullptr) continue;
    Delivery d{held->listener, Delivery::kLost, pool::Lease{}};
    d.lease.id = lease_id;
    d.why = "its GPU was lost or it outlived its revocation deadline";
    outbox_.push_back(std::move(d));
    leases_.Close(lease_id, Now());
  }
}

void PoolService::PollHealth() {
  if (driver_ == nullptr) return;  // remote nodes: their agents report
  for (const pool::InventoryGpu& gpu : inventory_.gpus()) {
    absl::StatusOr<pool::GpuHealthReading> reading = driver_->ReadHealth(gpu.ref);
    if (!reading.ok()) continue;  // unreadable this time; the next poll tries again
    std::string key = absl::StrCat(gpu.ref.node, "/", gpu.ref.index);
    auto known = health_.find(key);
    pool::HealthState previous = known == health_.end() ? gpu.health : known->second;
    ApplyHealth(gpu.ref, pool::AssessHealth(*reading, previous).state);
  }
}

void PoolService::ApplyHealth(const pool::GpuRef& gpu, pool::HealthState state) {
  std::string key = absl::StrCat(gpu.node, "/", gpu.index);
  auto known = health_.find(key);
  if (known != health_.end() && known->second == state) return;
  health_[key] = state;
  Absorb(scheduler_->SetGpuHealth(gpu, state, NowSeconds()));
  dirty_ = true;
}

template <typename F>
absl::Status PoolService::WithDeliveries(F&& f) {
  absl::Status st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st = f();
  }
  cv_.notify_all();
  Deliver();
  return st;
}

absl::Status PoolService::NodeUp(const std::string& node) {
  return WithDeliveries([&]() -> absl::Status {
    auto up = nodes_up_.find(node);
    if (up == nodes_up_.end()) {
      return absl::NotFoundError(absl::StrCat("node '", node, "' is not in this pool"));
    }
    up->second = true;
    for (const pool::InventoryGpu& gpu : inventory_.gpus()) {
      if (gpu.ref.node != node) continue;
      ApplyHealth(gpu.ref, reported_[absl::StrCat(node, "/", gpu.ref.index)]);
    }
    return absl::OkStatus();
  });
}

absl::Status PoolService::NodeDown(const std::string& node, const std::string& why) {
  return WithDeliveries([&]() -> absl::Status {
    auto up = nodes_up_.find(node);
    if (up == nodes_up_.end()) {
      return absl::NotFoundError(absl::StrCat("node '", node, "' is not in this pool"));
    }
    up->second = false;
    size_t first = outbox_.size();
    for (const pool::InventoryGpu& gpu : inventory_.gpus()) {
      if (gpu.ref.node == node) ApplyHealth(gpu.ref, pool::HealthState::kLost);
    }
    for (size_t i = first; i < outbox_.size(); ++i) {
      if (outbox_[i].kind == Delivery::kLost) outbox_[i].why = absl::StrCat("node '", node, "' is gone: ", why);
    }
    return absl::OkStatus();
  });
}

absl::Status PoolService::ReportHealth(const pool::GpuRef& gpu, pool::HealthState state) {
  return WithDeliveries([&]() -> absl::Status {
    std::string key = absl::StrCat(gpu.node, "/", gpu.index);
    auto reported = reported_.find(key);
    if (reported == reported_.end()) {
      return absl::NotFoundError(absl::StrCat("GPU ", key, " is not a remote GPU of this pool"));
    }
    reported->second = state;
    if (nodes_up_[gpu.node]) ApplyHealth(gpu, state);
    return absl::OkStatus();
  });
}

pool::HealthState PoolService::health(const pool::GpuRef& gpu) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = health_.find(absl::StrCat(gpu.node, "/", gpu.index));
  if (it != health_.end()) return it->second;
  const pool::InventoryGpu* known = inventory_.Find(gpu);
  return known != nullptr ? known->health : pool::HealthState::kLost;
}

bool PoolService::node_up(const std::string& node) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (driver_ != nullptr) return inventory_.gpu_count() > 0;  // this machine's own nodes
  auto it = nodes_up_.find(node);
  return it != nodes_up_.end() && it->second;
}

std::vector<pool::Lease> PoolService::Leases() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<pool::Lease> out;
  for (const auto& [id, lease] : scheduler_->leases()) out.push_back(lease);
  return out;
}

std::vector<pool::PendingInfo> PoolService::Pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return scheduler_->Pending();
}

void PoolService::PollHealthNow() {
  (void)WithDeliveries([this] {
    PollHealth();
    return absl::OkStatus();
  });
}

void PoolService::Deliver() {
  std::unique_lock<std::mutex> lock(mu_);
  // A listener that calls back into a delivering method: the loop below delivers what it added.
  if (delivering_ && deliverer_ == std::this_thread::get_id()) return;
  // Another thread is delivering: wait for it, so that what this call queued is delivered, in
  // order, before it returns.
  delivered_cv_.wait(lock, [this] { return !delivering_; });
  delivering_ = true;
  deliverer_ = std::this_thread::get_id();
  while (!outbox_.empty()) {
    std::vector<Delivery> batch;
    batch.swap(outbox_);
    lock.unlock();
    for (Delivery& d : batch) {
      switch (d.kind) {
        case Delivery::kGranted: d.listener->OnGranted(d.lease); break;
        case Delivery::kRevoked: d.listener->OnRevoked(d.lease.id, d.cause, d.deadline_s); break;
        case Delivery::kLost: d.listener->OnLost(d.lease.id, d.why); break;
      }
    }
    lock.lock();
  }
  delivering_ = false;
  deliverer_ = std::thread::id();
  lock.unlock();
  delivered_cv_.notify_all();
}

void PoolService::Loop() {
  auto next_health = std::chrono::steady_clock::now() + health_interval_;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // Revocation deadlines and ageing move with the clock: run a cycle at least every pool
    // second even when nothing happened, but never more often than every millisecond of real time.
    auto idle = std::chrono::duration<double>(1.0 / clock_speed_);
    auto wait = std::chrono::duration_cast<std::chrono::steady_clock::duration>(idle);
    if (wait < std::chrono::milliseconds(1)) wait = std::chrono::milliseconds(1);
    if (wait > std::chrono::milliseconds(200)) wait = std::chrono::milliseconds(200);
    cv_.wait_for(lock, wait, [this] { return stop_ || dirty_; });
    if (stop_) break;
    dirty_ = false;
    if (std::chrono::steady_clock::now() >= next_health) {
      PollHealth();
      next_health = std::chrono::steady_clock::now() + health_interval_;
    }
    Absorb(scheduler_->Schedule(NowSeconds()));
    if (outbox_.empty()) continue;
    lock.unlock();
    Deliver();
    lock.lock();
  }
}

}  // namespace gpupool::runtime
