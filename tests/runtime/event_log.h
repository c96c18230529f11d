// The runtime's events as a test records them (RuntimeOptions::on_event is called from the
// runtime's threads).
#ifndef GPUPOOL_TESTS_RUNTIME_EVENT_LOG_H_
#define GPUPOOL_TESTS_RUNTIME_EVENT_LOG_H_

#include <mutex>
#include <string>
#include <vector>

#include "gpupool/gpupool.h"

namespace gpupool::testing {

struct EventLog {
  std::mutex mu;
  std::vector<RuntimeEvent> events;

  void Add(const RuntimeEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(e);
  }
  // The position of the first event of `kind` for `team`; -1 when there is none.
  int IndexOf(const std::string& kind, const std::string& team) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < events.size(); ++i) {
      if (events[i].kind == kind && events[i].team == team) return static_cast<int>(i);
    }
    return -1;
  }
  // The detail of the first event of `kind` (any team); empty when there is none.
  std::string Detail(const std::string& kind) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& e : events) {
      if (e.kind == kind) return e.detail;
    }
    return "";
  }
  // Where `team`'s first lease was granted ("node-0/GPU 1 whole").
  std::string LeaseDetail(const std::string& team) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& e : events) {
      if (e.kind == "lease-granted" && e.team == team) return e.detail;
    }
    return "";
  }
};

}  // namespace gpupool::testing

#endif  // GPUPOOL_TESTS_RUNTIME_EVENT_LOG_H_
