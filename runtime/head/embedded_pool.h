// File: runtime/head/embedded_pool.h
//
// The pool service living inside the program (DESIGN §3 "embedded"): the real pool scheduler over
// this machine's GPUs (or simulated ones), driven by a thread that runs a scheduling cycle whenever
// something changed, watches GPU health through the driver, and tells each lease's listener what
// happened to it. It also keeps the accounting ledger: every lease's interval in pool time.
//
// The pool's clock may run faster than real time (`clock_speed`), so the demo can show hours of
// pool time in seconds. The scheduler works in whole pool seconds; the ledger keeps fractions.
//
//   auto pool = EmbeddedPool::Start(options);            // StatusOr
//   (*pool)->Request(request, &listener);                 // refused now, or granted later
//   (*pool)->Release(lease_id);                           // the job is done with it
//
// Thread-safe. Listeners are called from the pool's thread, never with its lock held; a listener
// must stay valid until Withdraw/Release of its requests, or until the pool stops.
#ifndef GPUPOOL_RUNTIME_HEAD_EMBEDDED_POOL_H_
#define GPUPOOL_RUNTIME_HEAD_EMBEDDED_POOL_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pool/config/pool_config.h"
#include "pool/devices/device_driver.h"
#include "pool/inventory.h"
#include "pool/scheduler/scheduler.h"

namespace gpupool::runtime {

class LeaseListener {
 public:
  virtual ~LeaseListener() = default;
  virtual void OnGranted(const pool::Lease& lease) = 0;
  // Stop at a safe point before `deadline_s` (pool time), then Release.
  virtual void OnRevoked(const std::string& lease_id, pool::RevokeCause cause, double deadline_s) = 0;
  // The lease is gone (its GPU failed, or the revocation's deadline passed): stop using it now.
  // The pool has already taken it back; do not Release it.
  virtual void OnLost(const std::string& lease_id, const std::string& why) = 0;
};

struct EmbeddedPoolOptions {
  std::string driver;          // as pool::DriverChoice
  std::string simulate;
  int node_count = 1;
  std::string config_path;     // empty: an open pool (no teams, no quotas)
  std::string config_text;     // YAML given inline; used when config_path is empty
  double clock_speed = 1.0;    // pool seconds per real second; > 0
  std::chrono::milliseconds health_interval{1000};  // real time between health polls
};

struct LedgerTeam {
  double leased_gpu_s = 0;
  double borrowed_gpu_s = 0;
  uint64_t leases = 0;
};

class EmbeddedPool {
 public:
  static absl::StatusOr<std::unique_ptr<EmbeddedPool>> Start(const EmbeddedPoolOptions& options);
  ~EmbeddedPool();  // stops the thread; listeners are not called afterwards

  // Queues a lease request; the listener hears of the grant. Errors are the scheduler's: the
  // request is malformed or can never be admitted (nothing is queued then).
  absl::Status Request(pool::LeaseRequest request, LeaseListener* listener);
  // Withdraws a request that was not granted yet; NotFound when it is not pending.
  absl::Status Withdraw(const std::string& request_id);
  // Gives a lease back; NotFound for an unknown (or already lost) lease.
  absl::Status Release(const std::string& lease_id);

  double Now() const;  // pool seconds since Start
  const pool::Inventory& inventory() const { return inventory_; }
  pool::DeviceDriver& driver() { return *driver_; }
  const pool::PoolConfig& config() const { return config_; }
  const std::string& notice() const { return notice_; }
  double capacity_gpus() const { return static_cast<double>(inventory_.gpu_count()); }
  // Lease GPU-seconds per team so far, open leases counted up to now.
  std::map<std::string, LedgerTeam> Ledger() const;
  // Reads every GPU's health now instead of waiting for the next poll (tests, operators).
  void PollHealthNow();

 private:
  EmbeddedPool() = default;
  struct OpenLease {
    LeaseListener* listener = nullptr;
    std::string team;
    double gpus = 0;       // compute share, in GPUs
    bool borrowing = false;
    double started_s = 0;
  };
  struct Delivery {  // a listener call, made after the lock is dropped
    LeaseListener* listener;
    enum Kind { kGranted, kRevoked, kLost } kind;
    pool::Lease lease;
    pool::RevokeCause cause = pool::RevokeCause::kReclaim;
    double deadline_s = 0;
    std::string why;
  };
  void Loop();
  int64_t NowSeconds() const { return static_cast<int64_t>(Now()); }
  // Applies a cycle's outcome to the ledger and queues the listener calls. Holds mu_.
  void Absorb(const pool::CycleResult& result, std::vector<Delivery>& out);
  void CloseLease(const std::string& lease_id);  // ledger; holds mu_
  void Deliver(std::vector<Delivery>& deliveries);
  void PollHealth(std::vector<Delivery>& out);   // holds mu_

  // Constant after Start.
  std::unique_ptr<pool::DeviceDriver> driver_;
  pool::Inventory inventory_;
  pool::PoolConfig config_;
  std::string notice_;
  double clock_speed_ = 1;
  std::chrono::steady_clock::time_point start_;
  std::chrono::milliseconds health_interval_{1000};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;     // guarded by mu_
  bool dirty_ = false;    // guarded by mu_: something changed since the last cycle
  std::unique_ptr<pool::Scheduler> scheduler_;             // guarded by mu_
  std::map<std::string, LeaseListener*> request_listeners_;  // guarded by mu_: by request id
  std::map<std::string, OpenLease> open_leases_;           // guarded by mu_
  std::map<std::string, LedgerTeam> ledger_;               // guarded by mu_: closed leases
  std::map<std::string, pool::HealthState> health_;        // guarded by mu_: "node/index"
  std::thread thread_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_HEAD_EMBEDDED_POOL_H_
