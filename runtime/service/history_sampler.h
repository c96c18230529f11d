// File: runtime/service/history_sampler.h
//
// The pool's history (HeadJournal::RecordHistory, read back by /api/v1/history): what one sample
// holds, taken from the snapshot a scrape would see. The head samples every minute of real time
// (PoolServerOptions::history_interval) on its loop thread; the journal queues the rows into its
// next batch, so a sample never waits for the disk and never delays an acknowledgement.
//
//   std::vector<HistoryRow> rows = HistoryRowsOf(pool.Snapshot(), WallSeconds());
//
// A pure function: thread-safe.
#ifndef GPUPOOL_RUNTIME_SERVICE_HISTORY_SAMPLER_H_
#define GPUPOOL_RUNTIME_SERVICE_HISTORY_SAMPLER_H_

#include <vector>

#include "runtime/service/journal/head_journal_records.h"
#include "runtime/service/metrics/pool_snapshot.h"

namespace gpupool::runtime {

// Scopes of per-model rows: "model:H100-80GB". Team names cannot start with it (pool config).
inline constexpr char kModelScopePrefix[] = "model:";

// One "pool" row (allocated GPUs, schedulable GPUs, pending requests), one row per GPU model
// ("model:<model>": allocated and schedulable GPUs of that model; pool-wide, as the "pool" row),
// and one row per team that has a quota, a lease or a pending request (allocated, nominal quota,
// borrowed, pending).
std::vector<HistoryRow> HistoryRowsOf(const PoolSnapshot& snapshot, double t_s);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_HISTORY_SAMPLER_H_
