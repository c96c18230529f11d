// File: runtime/service/pool_service.h
//
// The pool service's core (DESIGN §3): the real pool scheduler over a pool's GPUs, driven by a
// thread that runs a scheduling cycle whenever something changed, watches GPU health, and tells
// each lease's listener what happened to it. It also keeps the accounting ledger: every lease's
// interval in pool time. It serves jobs in this process directly (it is their PoolClient: an
// embedded pool, where RPC becomes direct calls) and jobs in other processes through PoolServer
// (runtime/service/pool_server.h: mpirun's rank 0, `gpupool head`).
//
// Its pool is this machine's GPUs (or simulated ones), read through the driver, or other
// processes' nodes (PoolServiceOptions::remote_nodes), whose agents report them up and down.
// Pieces of its own: NodeLiveness (what health each GPU has, and why), ListenerOutbox (listener
// calls in the order decided, made outside the lock), LeaseBook (the ledger), DiagnosticHolds
// (diagnostics' leases of team `_pool`, beside the scheduler).
//
// The pool's clock may run faster than real time (`clock_speed`), so the demo can show hours of
// pool time in seconds. The scheduler works in whole pool seconds; the ledger keeps fractions.
//
//   auto pool = PoolService::Start(options);            // StatusOr
//   (*pool)->Request(request, &listener);                 // refused now, or granted later
//   (*pool)->Release(lease_id);                           // the job is done with it
//
// Thread-safe. Listeners are called from the pool's thread (or from the thread calling
// ScheduleNow, PollHealthNow, NodeUp, NodeDown or ReportHealth), one call at a time and in the
// order the pool decided them, never with its lock held; a listener must
// stay valid until Withdraw/Release of its requests, or until the pool stops.
#ifndef GPUPOOL_RUNTIME_SERVICE_POOL_SERVICE_H_
#define GPUPOOL_RUNTIME_SERVICE_POOL_SERVICE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpupool/pool_description.h"
#include "pool/config/pool_config.h"
#include "pool/devices/device_driver.h"
#include "pool/health_machine.h"
#include "pool/inventory.h"
#include "pool/scheduler/scheduler.h"
#include "runtime/client/lease_book.h"
#include "runtime/client/pool_client.h"
#include "runtime/service/availability_log.h"
#include "runtime/service/diagnostic_holds.h"
#include "runtime/service/gpu_health_book.h"
#include "runtime/service/listener_outbox.h"
#include "runtime/service/metrics/pool_metrics.h"
#include "runtime/service/metrics/pool_snapshot.h"
#include "runtime/service/node_liveness.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

struct PoolServiceOptions {
  // This machine's GPUs, as DescribePool finds them. pool.config_path also holds the teams,
  // quotas and priority classes; with neither it nor config_text: an open pool (no teams, no
  // quotas).
  PoolOptions pool;
  std::string config_text;     // YAML given inline; used when pool.config_path is empty
  double clock_speed = 1.0;    // pool seconds per real second; > 0
  std::chrono::milliseconds health_interval{1000};  // real time between health polls
  // A head of other processes' nodes (mpirun rank 0, `gpupool head`): the pool is these nodes,
  // not this machine's, and there is no driver here. Each node is unreachable (its GPUs lost)
  // until its agent reports it up (NodeUp), and its GPUs' health is what the agent reports.
  std::vector<pool::DiscoveredNode> remote_nodes;
  std::string remote_driver = "simulated";  // what the agents' GPUs are: "nvidia" or "simulated"
  // When a quarantined GPU returns and when a GPU is given up (pool/health_machine.h).
  pool::HealthPolicy health_policy;
  // Where the scheduler places single-node requests (pool::SchedulerOptions::placement_policy);
  // Start refuses a name pool::ValidPlacementPolicy refuses.
  std::string placement_policy = "gpupool";
};

// How the head sees one GPU's health, for the views (`status --json`, `status --reasons`).
// Times are Unix seconds.
struct GpuHealthDetails {
  pool::HealthState state = pool::HealthState::kHealthy;  // as applied: lost while the agent is away
  std::vector<std::string> reasons;
  double since_s = 0;
  std::optional<double> last_diagnostic_s;
  pool::DiagnosticResult last_diagnostic = pool::DiagnosticResult::kNone;
  std::string drained_by;
  std::string drain_reason;
};

// One of a node's GPUs as its agent needs to know it (which to diagnose).
struct NodeGpuState {
  int index = 0;
  pool::HealthState state = pool::HealthState::kHealthy;
  bool leased = false;
};

class PoolService final : public PoolClient {
 public:
  static absl::StatusOr<std::unique_ptr<PoolService>> Start(const PoolServiceOptions& options);
  ~PoolService() override;  // stops the thread; listeners are not called afterwards

  // PoolClient. Request's errors are the scheduler's.
  absl::Status Request(pool::LeaseRequest request, LeaseListener* listener) override;
  absl::Status Withdraw(const std::string& request_id) override;
  absl::Status Release(const std::string& lease_id) override;
  void Checkpointed(const std::string& lease_id, const CheckpointNote& note) override;
  // Takes back a lease a previous run of the pool granted (a head restarted from its journal):
  // it holds its GPUs and quota again and `listener` hears of its revocation or loss (see
  // pool::Scheduler::Adopt for what is refused). Its GPUs' health is not looked at: a remote
  // node's GPUs stay unschedulable until its agent is back, without losing the lease.
  absl::Status Adopt(const pool::Lease& lease, LeaseListener* listener);
  // Queues a request a previous run of the pool accepted (a head restarted from its journal),
  // at the place it had: as submitted `waited_s` real seconds ago.
  absl::Status Requeue(pool::LeaseRequest request, double waited_s, LeaseListener* listener);
  double Now() const override;  // pool seconds since Start
  double clock_speed() const { return clock_speed_; }
  const pool::PoolConfig& config() const override { return config_; }
  double capacity_gpus() const override { return static_cast<double>(inventory_.gpu_count()); }
  // Lease GPU-seconds per team so far, open leases counted up to now.
  std::map<std::string, LedgerTeam> Ledger() const override;

  const pool::Inventory& inventory() const { return inventory_; }
  // This machine's driver; null for a head of remote nodes.
  pool::DeviceDriver* driver() { return driver_.get(); }
  const std::string& driver_name() const { return driver_name_; }
  const std::string& notice() const { return notice_; }
  // The configuration as YAML, for jobs in other processes ("" for the default configuration).
  const std::string& config_text() const { return config_text_; }
  // Reads every GPU's health now instead of waiting for the next poll (tests, operators).
  void PollHealthNow();

  // For an owner with a thread of its own that changes the pool in bursts (the pool service's
  // event loop): from now on Request, Withdraw and Release no longer wake the pool's thread, and
  // the owner calls ScheduleNow once after a burst of them. The scheduling cycle then runs on the
  // owner's thread and its listener calls are made there, saving two thread wake-ups per lease
  // round trip. The pool's thread still runs its periodic cycles (clock, deadlines, health), so
  // a change the owner forgot is picked up within 200 ms of real time.
  void OwnerSchedules();
  // Runs a scheduling cycle now on this thread if anything changed since the last, and makes
  // its listener calls before returning. Any thread that is not inside a listener call.
  void ScheduleNow();
  // Requests waiting for a lease now.
  size_t pending_requests() const;

  // A head of remote nodes: the node's agent is up (its GPUs take the health it reports, healthy
  // at first) or gone (its GPUs are lost: their leases are lost and their jobs told). NotFound
  // for a node the pool does not have.
  absl::Status NodeUp(const std::string& node);
  absl::Status NodeDown(const std::string& node, const std::string& why);
  // An agent's health verdict for one of its GPUs (AssessHealth of a reading, not sticky): the
  // GPU's state machine decides what it means (pool/health_machine.h). Source:
  // pool_service_health.cc, as are the health methods below.
  absl::Status ReportHealth(const pool::GpuRef& gpu, pool::HealthState state,
                            std::vector<std::string> reasons = {});
  // A diagnostic's outcome on `gpu` (NotFound for a GPU the pool does not have).
  absl::Status ReportDiagnostic(const pool::GpuRef& gpu, bool passed, const std::string& detail);
  // An operator's word on `gpu`, or on every GPU of `node` when `gpu` is nullopt: one line per
  // GPU saying what changed ("node-0/1: healthy -> draining"). NotFound naming an unknown node or
  // GPU; FailedPrecondition when the machine refuses (resume of a failed GPU), naming the GPU.
  // Nothing changes unless every GPU accepts.
  absl::StatusOr<std::vector<std::string>> Operate(const std::string& node, std::optional<int> gpu,
                                                   pool::OperatorAction action, const std::string& who,
                                                   const std::string& reason);
  // Called with every health transition, under the pool's lock (queue it; never call back into
  // the pool): the head journals them. Replaces the previous observer.
  // `after` is the GPU's machine once the transition is made. An operator's word that changes no
  // state (a drain of a quarantined GPU) comes as a transition from a state to itself.
  using HealthObserver = std::function<void(const pool::GpuRef&, const pool::HealthTransition&,
                                            const pool::GpuHealthMachine& after)>;
  void SetHealthObserver(HealthObserver observer);
  // Takes back a GPU's health as a previous run of the head journaled it (the last event's
  // `after`), without journaling it again. NotFound for a GPU the pool does not have.
  absl::Status RestoreHealth(const pool::GpuRef& gpu, pool::HealthState state, std::vector<std::string> reasons,
                             double since_s, std::string drained_by, std::string drain_reason);
  // A lease for a diagnostic on `gpu` (diagnostic_holds.h: team `_pool`, outside quotas, given
  // up at once to any work placed there), granted now. NotFound for a GPU the pool does not
  // have; FailedPrecondition naming why not: work holds or is about to take the GPU, it is
  // draining, lost or failed, or a diagnostic holds it already. `listener` hears OnLost when
  // work placed on the GPU (or its draining) interrupts the test; it must stay valid until then
  // or until EndDiagnostic.
  absl::StatusOr<pool::Lease> BeginDiagnostic(const pool::GpuRef& gpu, LeaseListener* listener);
  // Ends a diagnostic's lease and applies its outcome (`passed`), as ReportDiagnostic; nullopt
  // applies none (its agent went away mid-test). Aborted, applying nothing, when the lease was
  // interrupted (a test that shared its GPU proves nothing) or is not held.
  absl::Status EndDiagnostic(const std::string& lease_id, std::optional<bool> passed, const std::string& detail);
  // The details of one GPU's health; nullopt for a GPU the pool does not have.
  std::optional<GpuHealthDetails> HealthDetails(const pool::GpuRef& gpu) const;
  // The GPUs of `node` with their applied state and whether a lease holds them.
  std::vector<NodeGpuState> NodeGpuStates(const std::string& node) const;
  // A GPU's health as the scheduler applies it now (lost while its node's agent is away).
  pool::HealthState health(const pool::GpuRef& gpu) const;
  // Nodes whose agent is up, for operators.
  bool node_up(const std::string& node) const;
  // Leases held now, for operators (`gpupool status` / `queue`), diagnostics' included.
  std::vector<pool::Lease> Leases() const;
  std::vector<pool::PendingInfo> Pending() const;
  // The configuration's spare reserves with their spare GPUs now (`gpupool status` and `queue`).
  std::vector<pool::ReserveStatus> Reserves() const;
  // GPU-hours in [from_s, to_s) (Unix seconds) that GPUs were unavailable (lost or draining), per
  // model: known since this service started (availability_log.h). `usage` asks only for the time
  // the journal's history samples do not cover (sampled_unavailability.h).
  std::map<std::string, double> UnavailableGpuHours(double from_s, double to_s) const;
  // Everything /metrics shows, copied under the lock in one go (metrics/pool_snapshot.h). Any
  // thread; holds the pool's lock for a copy of the leases and a count of the queue.
  PoolSnapshot Snapshot() const;

 private:
  PoolService() = default;
  void Loop();
  int64_t NowSeconds() const { return static_cast<int64_t>(Now()); }
  // Request and Requeue: `waited_s` real seconds before now (0: a new request).
  absl::Status Queue(pool::LeaseRequest request, double waited_s, LeaseListener* listener);
  // `lease` (the scheduler's) is open from now, and `listener` hears of it. Holds mu_.
  void OpenLease(const pool::Lease& lease, LeaseListener* listener) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `lease_id` ended now: its time goes to the ledger and the metrics (`lost`: taken back).
  void CloseLease(const std::string& lease_id, bool lost) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies a cycle's outcome to the ledger and queues the listener calls; a lease lost in it is
  // lost for `lost_why`. Holds mu_.
  void Absorb(const pool::CycleResult& result, const std::string& lost_why = kLeaseLost)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a change that calls for a cycle (dirty_ set): wakes the pool's thread, unless the
  // owner runs the cycle (OwnerSchedules).
  void WakeForCycle();
  void PollHealth() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets GPUs' health as the scheduler sees it, where it changed. Holds mu_.
  void ApplyHealth(const std::vector<NodeLiveness::Change>& changes, const std::string& lost_why = kLeaseLost)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies a health machine's transition on `gpu` (if any): journals it through the observer,
  // and gives the scheduler the GPU's new state (through NodeLiveness: a remote node's GPU stays
  // lost while its agent is away). A GPU that starts draining with no lease is quarantined at once.
  void Transitioned(const pool::GpuRef& gpu, const std::optional<pool::HealthTransition>& t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives the scheduler `gpu`'s new state (see Transitioned).
  void ApplyMachineState(const pool::GpuRef& gpu, pool::HealthState state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the diagnostics' leases whose GPU work now holds or is reserved for, or that left
  // service, telling their holders. After every change to the scheduler's state.
  void InterruptDiagnostics() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Quarantines every draining GPU that no lease holds any more.
  void QuarantineEmpty() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static double WallSeconds();
  // Runs `f` under mu_, then delivers what it queued and wakes the loop.
  template <typename F>
  absl::Status WithDeliveries(F&& f) ABSL_LOCKS_EXCLUDED(mu_);

  static constexpr char kLeaseLost[] = "its GPU was lost or it outlived its revocation deadline";

  // Constant after Start.
  std::unique_ptr<pool::DeviceDriver> driver_;
  pool::Inventory inventory_;
  pool::PoolConfig config_;
  std::string driver_name_;
  std::string notice_;
  std::string config_text_;
  double clock_speed_ = 1;
  std::chrono::steady_clock::time_point start_;
  std::chrono::milliseconds health_interval_{1000};

  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;  // something changed since the last cycle
  std::atomic<bool> owner_schedules_{false};  // see OwnerSchedules
  // Listener calls not made yet, in the order the pool decided them (queued with mu_ held).
  ListenerOutbox outbox_;
  std::unique_ptr<pool::Scheduler> scheduler_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, LeaseListener*> request_listeners_ ABSL_GUARDED_BY(mu_);  // by request id
  LeaseBook leases_ ABSL_GUARDED_BY(mu_);
  DiagnosticHolds diagnostics_ ABSL_GUARDED_BY(mu_);  // diagnostics' leases, beside the scheduler's
  std::unique_ptr<NodeLiveness> liveness_ ABSL_GUARDED_BY(mu_);  // over inventory_
  std::unique_ptr<GpuHealthBook> health_book_ ABSL_GUARDED_BY(mu_);  // over inventory_, Unix seconds
  HealthObserver health_observer_ ABSL_GUARDED_BY(mu_);
  AvailabilityLog availability_ ABSL_GUARDED_BY(mu_);  // in Unix seconds, for chargeback
  PoolMetrics metrics_ ABSL_GUARDED_BY(mu_);  // in pool seconds
  // Runs a scheduling cycle, timing it for the metrics.
  pool::CycleResult TimedSchedule() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::thread thread_;
};

// In the header: pool_service.cc and pool_service_health.cc both use it.
template <typename F>
absl::Status PoolService::WithDeliveries(F&& f) {
  absl::Status st;
  {
    MutexLock lock(&mu_);
    st = f();
  }
  cv_.NotifyAll();
  outbox_.Deliver();
  return st;
}

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_POOL_SERVICE_H_
