// File: runtime/service/journal/head_journal_ops.h
//
// One queued mutation of the head journal: what HeadJournal's Record*/Remove*/Close* calls put in
// the current batch and JournalWriter applies inside the batch's transaction. Internal.
#ifndef GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_OPS_H_
#define GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_OPS_H_

#include <string>
#include <variant>
#include <vector>

#include "runtime/service/journal/head_journal_records.h"

namespace gpupool::runtime {

struct JobRemoval {
  std::string job_id;
};
struct NodeRemoval {
  std::string node;
};
struct RequestRemoval {
  std::string request_id;
};
struct LeaseClosing {
  std::string lease_id;
  double end_s = 0;
  std::string cause;
  double busy_gpu_s = -1;
};
struct CheckpointRemoval {
  std::string task_key;
};
// One sample of the pool's history, and the retention: rows older than keep_after_s go.
struct HistorySample {
  std::vector<HistoryRow> rows;
  double keep_after_s = 0;
};

// The records themselves stand for "insert or replace".
using JournalOp = std::variant<JobRecord, JobRemoval, NodeRecord, NodeRemoval, RequestRecord,
                               RequestRemoval, LeaseRecord, LeaseClosing, CheckpointRecord,
                               CheckpointRemoval, HistorySample, HealthEventRow>;

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_OPS_H_
