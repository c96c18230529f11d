// File: runtime/service/availability_log.h
//
// When each GPU could not be used (lost, or drained by health or an operator), in Unix seconds:
// chargeback's `unavailable` line (capacity the pool could not offer is nobody's idle time).
// Kept in memory by PoolService: a restarted head knows the downtime since its own start only;
// `usage` reads it for the time the journal's history samples do not cover
// (sampled_unavailability.h), the history for the rest.
// Bounded: the oldest closed intervals are forgotten past kMaxClosed.
//
//   AvailabilityLog log;
//   log.Set("node-0/1", "H100-80GB", /*available=*/false, now);
//   std::map<std::string, double> hours = log.UnavailableGpuHours(from, to, now);  // by model
//
// Not thread-safe: its owner's lock guards it.
#ifndef GPUPOOL_RUNTIME_SERVICE_AVAILABILITY_LOG_H_
#define GPUPOOL_RUNTIME_SERVICE_AVAILABILITY_LOG_H_

#include <cstddef>
#include <deque>
#include <map>
#include <string>

namespace gpupool::runtime {

class AvailabilityLog {
 public:
  static constexpr size_t kMaxClosed = 100000;

  // GPU `gpu` (of model `model`) is available or not from `now_s` on. Idempotent.
  void Set(const std::string& gpu, const std::string& model, bool available, double now_s);
  // GPU-hours unavailable in [from_s, to_s), per model; open intervals run until `now_s`.
  std::map<std::string, double> UnavailableGpuHours(double from_s, double to_s, double now_s) const;

 private:
  struct Interval {
    std::string model;
    double start_s = 0;
    double end_s = 0;
  };
  std::map<std::string, Interval> open_;  // by GPU: down since start_s
  std::deque<Interval> closed_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_AVAILABILITY_LOG_H_
