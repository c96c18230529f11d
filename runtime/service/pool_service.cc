#include "runtime/service/pool_service.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pool/devices/driver_selection.h"
#include "pool/health.h"
#include "pool/scheduler/wait_reason.h"

namespace gpupool::runtime {

namespace {

// The configuration's text: the file's, or the inline text ("" for the default configuration).
absl::StatusOr<std::string> ConfigText(const PoolServiceOptions& options) {
  if (options.pool.config_path.empty()) return options.config_text;
  std::ifstream in(options.pool.config_path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read the pool configuration '", options.pool.config_path, "'"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PoolService>> PoolService::Start(const PoolServiceOptions& options) {
  if (!(options.clock_speed > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clock speed must be positive (got ", options.clock_speed, ")"));
  }
  if (absl::Status policy = pool::ValidPlacementPolicy(options.placement_policy); !policy.ok()) return policy;
  std::unique_ptr<PoolService> p(new PoolService());
  absl::StatusOr<std::string> config_text = ConfigText(options);
  if (!config_text.ok()) return config_text.status();
  p->config_text_ = *std::move(config_text);
  if (!p->config_text_.empty()) {
    absl::StatusOr<pool::PoolConfig> config = pool::ParsePoolConfig(
        p->config_text_, options.pool.config_path.empty() ? "<inline configuration>" : options.pool.config_path);
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
    pool::DriverChoice choice{.driver = options.pool.driver,
                              .simulation_spec = options.pool.simulate,
                              .node_count = options.pool.node_count,
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
  // A spare reserve is checked against the GPUs found (the file alone knows them only when it
  // declares its nodes): refused when the teams' nominal quotas no longer fit beside it.
  if (!p->config_.scheduling.reserves.empty()) {
    std::map<std::string, int> gpus_per_model;
    for (const pool::InventoryGpu& gpu : p->inventory_.gpus()) {
      ++gpus_per_model[gpu.model != nullptr ? gpu.model->name : gpu.device.name];  // as PoolTopology names it
    }
    if (absl::Status s = pool::CheckSpareReserves(p->config_.scheduling, gpus_per_model); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.pool.config_path.empty() ? "<inline configuration>" : options.pool.config_path, ": ", s.message()));
    }
  }
  p->clock_speed_ = options.clock_speed;
  p->health_interval_ = options.health_interval;
  p->start_ = std::chrono::steady_clock::now();
  {
    // No other thread sees the service yet; the lock is for the analysis (the fields are guarded).
    MutexLock lock(&p->mu_);
    p->diagnostics_ = DiagnosticHolds(static_cast<uint64_t>(WallSeconds()));  // ids unique across head runs
    p->scheduler_ = std::make_unique<pool::Scheduler>(p->inventory_, p->config_.scheduling,
                                                      pool::SchedulerOptions{.placement_policy = options.placement_policy});
    p->liveness_ = std::make_unique<NodeLiveness>(p->inventory_, /*remote=*/p->driver_ == nullptr);
    p->health_book_ = std::make_unique<GpuHealthBook>(p->inventory_, options.health_policy, WallSeconds());
    // Health as discovered, so the first poll only reports changes; remote nodes are unreachable
    // until their agents say otherwise.
    p->PollHealth();
    p->ApplyHealth(p->liveness_->InitialChanges());
    p->outbox_.Clear();  // nobody listens yet
  }
  p->thread_ = std::thread([raw = p.get()] { raw->Loop(); });
  return p;
}

PoolService::~PoolService() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
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
    MutexLock lock(&mu_);
    int64_t now = NowSeconds();
    absl::StatusOr<std::string> submitted =
        waited_s > 0 ? scheduler_->Resubmit(std::move(request), now,
                                            now - static_cast<int64_t>(waited_s * clock_speed_))
                     : scheduler_->Submit(std::move(request), now);
    if (!submitted.ok()) return submitted.status();
    metrics_.Submitted(id, Now() - waited_s * clock_speed_);
    request_listeners_[id] = listener;
    dirty_ = true;
  }
  WakeForCycle();
  return absl::OkStatus();
}

absl::Status PoolService::Withdraw(const std::string& request_id) {
  MutexLock lock(&mu_);
  absl::Status s = scheduler_->Cancel(request_id);
  if (s.ok()) request_listeners_.erase(request_id);
  if (s.ok()) metrics_.Withdrawn(request_id);
  return s;
}

absl::Status PoolService::Release(const std::string& lease_id) {
  {
    MutexLock lock(&mu_);
    if (leases_.Find(lease_id) == nullptr) {
      return absl::NotFoundError(absl::StrCat("lease '", lease_id, "' is not held"));
    }
    absl::Status s = scheduler_->Release(lease_id, NowSeconds());
    if (!s.ok()) return s;
    CloseLease(lease_id, /*lost=*/false);
    dirty_ = true;
  }
  WakeForCycle();
  return absl::OkStatus();
}

void PoolService::Checkpointed(const std::string& lease_id, const CheckpointNote&) {
  MutexLock lock(&mu_);
  if (scheduler_->RecordCheckpoint(lease_id, NowSeconds()).ok()) metrics_.Checkpointed(lease_id, Now());
  // (NotFound: it ended meanwhile)
}

absl::Status PoolService::Adopt(const pool::Lease& lease, LeaseListener* listener) {
  return WithDeliveries([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (absl::Status st = scheduler_->Adopt(lease, NowSeconds()); !st.ok()) return st;
    OpenLease(scheduler_->leases().at(lease.id), listener);
    InterruptDiagnostics();
    dirty_ = true;
    return absl::OkStatus();
  });
}

void PoolService::OwnerSchedules() { owner_schedules_.store(true); }

void PoolService::WakeForCycle() {
  if (!owner_schedules_.load()) cv_.NotifyAll();
}

size_t PoolService::pending_requests() const {
  MutexLock lock(&mu_);
  return scheduler_->pending_count();
}

void PoolService::ScheduleNow() {
  {
    MutexLock lock(&mu_);
    if (!dirty_) return;
    dirty_ = false;
    Absorb(TimedSchedule());
    QuarantineEmpty();
  }
  outbox_.Deliver();
}

std::map<std::string, LedgerTeam> PoolService::Ledger() const {
  MutexLock lock(&mu_);
  return leases_.Totals(Now());
}

void PoolService::OpenLease(const pool::Lease& lease, LeaseListener* listener) {
  leases_.Open(lease.id, LeaseBook::Lease{.listener = listener,
                                          .team = lease.request.team,
                                          .gpus = static_cast<double>(lease.milli) / 1000.0,
                                          .borrowing = lease.borrowing,
                                          .started_s = Now()});
  const pool::InventoryGpu* gpu = lease.gpus.empty() ? nullptr : inventory_.Find(lease.gpus[0]);
  metrics_.Granted(lease, gpu == nullptr ? std::string() : gpu->device.model, Now());
}

void PoolService::CloseLease(const std::string& lease_id, bool lost) {
  leases_.Close(lease_id, Now());
  metrics_.Closed(lease_id, Now(), lost);
}

pool::CycleResult PoolService::TimedSchedule() {
  auto start = std::chrono::steady_clock::now();
  pool::CycleResult result = scheduler_->Schedule(NowSeconds());
  metrics_.CycleTook(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return result;
}

PoolSnapshot PoolService::Snapshot() const {
  PoolSnapshot s;
  MutexLock lock(&mu_);
  s.pool_time_s = Now();
  std::map<std::string, size_t> position;  // "node/index" -> s.gpus
  for (const pool::InventoryNode& node : inventory_.nodes()) s.node_up[node.name] = liveness_->up(node.name);
  for (const pool::InventoryGpu& gpu : inventory_.gpus()) {
    position[absl::StrCat(gpu.ref.node, "/", gpu.ref.index)] = s.gpus.size();
    s.gpus.push_back({.node = gpu.ref.node, .index = gpu.ref.index, .model = gpu.device.model,
                      .health = liveness_->Applied(gpu.ref)});
  }
  // Diagnostics' leases are shown on their GPUs but not counted as allocated: a quarantined GPU
  // under test is not capacity, and the pool's utilisation must not pass 100%.
  const auto add_lease = [&](const std::string& id, const pool::Lease& lease, bool allocates) {
    const std::string& job = lease.request.id;  // a job's request ids name it ("s1/job-vm-1-1a2b3c4d/vision/...")
    const double per_gpu = lease.gpus.empty() ? 0 : static_cast<double>(lease.milli) / 1000.0 / lease.gpus.size();
    for (const pool::GpuRef& ref : lease.gpus) {
      auto it = position.find(absl::StrCat(ref.node, "/", ref.index));
      if (it == position.end()) continue;
      PoolSnapshot::Gpu& g = s.gpus[it->second];
      if (allocates) g.allocated = std::min(1.0, g.allocated + per_gpu);
      g.leases.push_back({.lease = id, .team = lease.request.team, .job = job, .share = per_gpu});
    }
    if (allocates) s.teams[{lease.request.team, lease.group}].allocated_gpus += static_cast<double>(lease.milli) / 1000.0;
  };
  for (const auto& [id, lease] : scheduler_->leases()) add_lease(id, lease, true);
  for (const auto& [id, lease] : diagnostics_.holds()) add_lease(id, lease, false);
  const pool::QuotaLedger& ledger = scheduler_->ledger();
  for (const pool::Team& team : config_.scheduling.teams) {
    for (const pool::TeamQuota& q : team.quotas) {
      PoolSnapshot::TeamGroup& g = s.teams[{team.name, q.group}];
      g.nominal_gpus = static_cast<double>(q.nominal_milli) / 1000.0;
    }
  }
  for (auto& [key, g] : s.teams) g.borrowed_gpus = static_cast<double>(ledger.Borrowed(key.first, key.second)) / 1000.0;
  for (const auto& [key, n] : scheduler_->PendingCounts()) {
    const auto& [team, cls, reason] = key;
    s.pending[{team, cls.empty() ? "training" : cls, std::string(pool::WaitReasonName(reason))}] += n;
  }
  s.counters = metrics_.Take(s.pool_time_s);
  return s;
}

void PoolService::Absorb(const pool::CycleResult& result, const std::string& lost_why) {
  const auto& leases = scheduler_->leases();
  for (const std::string& lease_id : result.granted) {
    auto it = leases.find(lease_id);
    if (it == leases.end()) continue;
    const pool::Lease& lease = it->second;
    auto listener = request_listeners_.find(lease.request.id);
    if (listener == request_listeners_.end()) continue;
    OpenLease(lease, listener->second);
    outbox_.Granted(listener->second, lease);
    request_listeners_.erase(listener);
  }
  for (const pool::Revocation& r : result.revoked) {
    const LeaseBook::Lease* held = leases_.Find(r.lease_id);
    if (held == nullptr) continue;
    metrics_.Revoked(r.lease_id, r.cause);
    outbox_.Revoked(held->listener, r.lease_id, r.cause, static_cast<double>(r.deadline_s));
  }
  for (const std::string& lease_id : result.expired) {
    const LeaseBook::Lease* held = leases_.Find(lease_id);
    if (held == nullptr) continue;
    outbox_.Lost(held->listener, lease_id, lost_why);
    CloseLease(lease_id, /*lost=*/true);
  }
  InterruptDiagnostics();
}

void PoolService::PollHealth() {
  if (driver_ == nullptr) return;  // remote nodes: their agents report
  for (const pool::InventoryGpu& gpu : inventory_.gpus()) {
    absl::StatusOr<pool::GpuHealthReading> reading = driver_->ReadHealth(gpu.ref);
    if (!reading.ok()) continue;  // unreadable this time; the next poll tries again
    // The reading alone (not sticky): the GPU's state machine keeps what must be kept.
    Transitioned(gpu.ref, health_book_->Find(gpu.ref)->OnVerdict(pool::AssessHealth(*reading), WallSeconds()));
  }
}

void PoolService::ApplyHealth(const std::vector<NodeLiveness::Change>& changes, const std::string& lost_why) {
  const double wall_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const NodeLiveness::Change& c : changes) {
    if (!liveness_->Apply(c.gpu, c.state)) continue;
    const pool::InventoryGpu* gpu = inventory_.Find(c.gpu);
    availability_.Set(absl::StrCat(c.gpu.node, "/", c.gpu.index), gpu == nullptr ? "" : gpu->device.model,
                      c.state == pool::HealthState::kHealthy || c.state == pool::HealthState::kDegraded, wall_s);
    Absorb(scheduler_->SetGpuHealth(c.gpu, c.state, NowSeconds()), lost_why);
    dirty_ = true;
  }
}

absl::Status PoolService::NodeUp(const std::string& node) {
  return WithDeliveries([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    absl::StatusOr<std::vector<NodeLiveness::Change>> changes = liveness_->SetUp(node, /*up=*/true);
    if (!changes.ok()) return changes.status();
    ApplyHealth(*changes);
    return absl::OkStatus();
  });
}

absl::Status PoolService::NodeDown(const std::string& node, const std::string& why) {
  return WithDeliveries([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    absl::StatusOr<std::vector<NodeLiveness::Change>> changes = liveness_->SetUp(node, /*up=*/false);
    if (!changes.ok()) return changes.status();
    ApplyHealth(*changes, absl::StrCat("node '", node, "' is gone: ", why));
    return absl::OkStatus();
  });
}

pool::HealthState PoolService::health(const pool::GpuRef& gpu) const {
  MutexLock lock(&mu_);
  return liveness_->Applied(gpu);
}

bool PoolService::node_up(const std::string& node) const {
  MutexLock lock(&mu_);
  return liveness_->up(node);
}

std::vector<pool::Lease> PoolService::Leases() const {
  MutexLock lock(&mu_);
  std::vector<pool::Lease> out;
  for (const auto& [id, lease] : scheduler_->leases()) out.push_back(lease);
  for (const auto& [id, lease] : diagnostics_.holds()) out.push_back(lease);
  return out;
}

std::vector<pool::PendingInfo> PoolService::Pending() const {
  MutexLock lock(&mu_);
  return scheduler_->Pending();
}

std::vector<pool::ReserveStatus> PoolService::Reserves() const {
  MutexLock lock(&mu_);
  return scheduler_->Reserves();
}

std::map<std::string, double> PoolService::UnavailableGpuHours(double from_s, double to_s) const {
  const double wall_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  MutexLock lock(&mu_);
  return availability_.UnavailableGpuHours(from_s, to_s, wall_s);
}

void PoolService::PollHealthNow() {
  (void)WithDeliveries([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    PollHealth();
    return absl::OkStatus();
  });
}

void PoolService::Loop() {
  auto next_health = std::chrono::steady_clock::now() + health_interval_;
  MutexLock lock(&mu_);
  while (!stop_) {
    // Revocation deadlines and ageing move with the clock: run a cycle at least every pool
    // second even when nothing happened, but never more often than every millisecond of real time.
    auto idle = std::chrono::duration<double>(1.0 / clock_speed_);
    auto wait = std::chrono::duration_cast<std::chrono::steady_clock::duration>(idle);
    if (wait < std::chrono::milliseconds(1)) wait = std::chrono::milliseconds(1);
    if (wait > std::chrono::milliseconds(200)) wait = std::chrono::milliseconds(200);
    cv_.WaitFor(&mu_, wait, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || dirty_; });
    if (stop_) break;
    dirty_ = false;
    if (std::chrono::steady_clock::now() >= next_health) {
      PollHealth();
      next_health = std::chrono::steady_clock::now() + health_interval_;
    }
    Absorb(TimedSchedule());
    QuarantineEmpty();
    if (outbox_.empty()) continue;
    lock.Unlock();
    outbox_.Deliver();
    lock.Lock();
  }
}

}  // namespace gpupool::runtime
