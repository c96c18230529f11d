// File: runtime/service/sampled_unavailability.h
//
// Chargeback's `unavailable` (GPUs down or drained) from the pool's history (history_sampler.h:
// the journal's "pool" row and "model:<name>" rows of each sample), so that it survives a restart
// of the head. Each sample stands for the time after it: until the next sample when that comes
// within two intervals (the head sampled without a break), else for one interval (the last sample
// before the head stopped, or the newest). In that time, per model, (declared GPUs - schedulable
// GPUs of the sample, at least 0) were unavailable. `unsampled` are the parts of the period that no
// sample covers (before the first, across a restart, after the newest): the head's in-memory
// figure (AvailabilityLog) fills those.
//
//   std::vector<HistoryRow> rows = journal->PoolWideHistory(from - 2 * interval, to);
//   SampledUnavailability u = UnavailableFromHistory(rows, declared, from, to, interval);
//   for (auto [a, b] : u.unsampled) ... pool.UnavailableGpuHours(a, b) ...
//
// A pure function of its arguments: thread-safe.
#ifndef GPUPOOL_RUNTIME_SERVICE_SAMPLED_UNAVAILABILITY_H_
#define GPUPOOL_RUNTIME_SERVICE_SAMPLED_UNAVAILABILITY_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/service/journal/head_journal_records.h"

namespace gpupool::runtime {

struct SampledUnavailability {
  std::map<std::string, double> gpu_hours;               // per GPU model, inside [from_s, to_s)
  std::vector<std::pair<double, double>> unsampled;      // [start, end) in order, inside [from_s, to_s)
};

// `rows`: pool-wide history rows ordered by time (HeadJournal::PoolWideHistory), from at least two
// intervals before `from_s`; team rows, if any, are ignored. `declared`: the GPUs of each model the
// pool declares (capacity counts every one for the whole period). A sample written before the
// history had per-model rows (a "pool" row with schedulable GPUs but no "model:" row) covers
// nothing. With interval_s <= 0 (the head samples no history) every part is unsampled.
SampledUnavailability UnavailableFromHistory(const std::vector<HistoryRow>& rows,
                                             const std::map<std::string, int>& declared, double from_s,
                                             double to_s, double interval_s);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_SAMPLED_UNAVAILABILITY_H_
