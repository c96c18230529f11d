// File: tests/runtime/lease_recorder.h
//
// A LeaseListener for tests: records what it heard, in order, and waits for an event with a
// generous timeout (tests on a loaded 2-core machine).
#ifndef GPUPOOL_TESTS_RUNTIME_LEASE_RECORDER_H_
#define GPUPOOL_TESTS_RUNTIME_LEASE_RECORDER_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/client/pool_client.h"

namespace gpupool::runtime {

// Records what a listener heard; waits on a condition with a generous timeout.
class Recorder : public LeaseListener {
 public:
  void OnGranted(const pool::Lease& lease) override { Add("granted " + lease.id, &lease); }
  void OnRevoked(const std::string& id, pool::RevokeCause cause, double deadline_s) override {
    std::lock_guard<std::mutex> lock(mu_);
    revoke_deadline_s = deadline_s;
    revoke_cause = cause;
    events_.push_back("revoked " + id);
    cv_.notify_all();
  }
  void OnLost(const std::string& id, const std::string& why) override { Add("lost " + id + ": " + why, nullptr); }
  void OnRequestFailed(const std::string& id, const absl::Status& why) override {
    Add("request failed " + id + ": " + std::string(why.message()), nullptr);
  }

  bool WaitFor(const std::string& prefix, int count = 1,
               std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      int n = 0;
      for (const auto& e : events_) n += e.rfind(prefix, 0) == 0;
      return n >= count;
    });
  }
  pool::Lease last_lease() {
    std::lock_guard<std::mutex> lock(mu_);
    return lease_;
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  double revoke_deadline_s = -1;
  pool::RevokeCause revoke_cause = pool::RevokeCause::kDrain;

 private:
  void Add(std::string e, const pool::Lease* lease) {
    std::lock_guard<std::mutex> lock(mu_);
    if (lease) lease_ = *lease;
    events_.push_back(std::move(e));
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> events_;
  pool::Lease lease_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_TESTS_RUNTIME_LEASE_RECORDER_H_
