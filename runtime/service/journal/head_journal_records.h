// File: runtime/service/journal/head_journal_records.h
//
// What the head's journal (head_journal.h) stores: plain values, one struct per kind of fact the
// head must not lose. The journal knows nothing of the scheduler's types: requests, leases and
// inventories travel as opaque bytes (the head stores their Cap'n Proto encodings), and only the
// columns the journal itself queries (ids, teams, accounting fields, times) are spelled out.
//
// Times are seconds since the Unix epoch (wall clock), not pool time: pool time restarts with the
// head, the journal's times must not.
#ifndef GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_RECORDS_H_
#define GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_RECORDS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace gpupool::runtime {

// A job connected to the head (one session). Recorded again to move `last_seen_s`.
struct JobRecord {
  std::string job_id;
  std::string team;
  std::string project;
  double connected_s = 0;
  double last_seen_s = 0;

  bool operator==(const JobRecord&) const = default;
};

// A node agent and what it offers. Recorded again on each heartbeat worth keeping.
struct NodeRecord {
  std::string node;
  std::string agent_address;
  std::string inventory;  // opaque bytes (the agent's serialized inventory)
  double last_heartbeat_s = 0;

  bool operator==(const NodeRecord&) const = default;
};

// A lease request waiting in the queue. Leaves the journal when granted (RecordLease consumes it)
// or withdrawn (RemoveRequest).
struct RequestRecord {
  std::string request_id;
  std::string job_id;
  std::string team;
  std::string request;  // opaque bytes (the LeaseRequest's Cap'n Proto encoding)
  double submitted_s = 0;

  bool operator==(const RequestRecord&) const = default;
};

// Who a lease is charged to and for what: copied into the ledger when the lease closes, and what
// Usage groups by.
struct LeaseAccount {
  std::string team;
  std::string project;
  std::string workload_class;
  std::string priority_class;
  std::string gpu_model;
  double gpus = 0;  // GPU equivalents held: slot count × fraction of a GPU per slot (0.25, 1, ...)

  bool operator==(const LeaseAccount&) const = default;
};

// A live lease. Leaves the journal when closed (released, revoked, lost), into the ledger.
struct LeaseRecord {
  std::string lease_id;
  std::string request_id;
  std::string job_id;
  std::string node;
  LeaseAccount account;
  std::string lease;  // opaque bytes (the lease's Cap'n Proto encoding)
  double granted_s = 0;

  bool operator==(const LeaseRecord&) const = default;
};

// One closed lease in the accounting ledger. Append-only.
struct LedgerEntry {
  std::string lease_id;
  LeaseAccount account;
  double start_s = 0;
  double end_s = 0;
  std::string end_cause;  // as given to CloseLease: "released", "revoked", "lost", ...
  std::string job;        // the job the lease served (kJobOfRequestSql); empty if closed before schema 4
  double busy_gpu_s = -1; // pool seconds x GPUs its tasks ran, as the job said at release; -1: unknown

  bool operator==(const LedgerEntry&) const = default;
};

// One committed checkpoint of a task. Every version is kept (history) until the task is forgotten.
struct CheckpointRecord {
  std::string task_key;
  std::string job_id;
  int64_t version = 0;
  std::string path;
  int64_t step = 0;
  double committed_s = 0;

  bool operator==(const CheckpointRecord&) const = default;
};

// Everything a restarting head needs, as last committed.
struct HeadState {
  std::vector<JobRecord> jobs;                // by job id
  std::vector<NodeRecord> nodes;              // by node name
  std::vector<RequestRecord> requests;        // in the order first recorded: the queue's order
  std::vector<LeaseRecord> leases;            // by grant time
  std::vector<CheckpointRecord> checkpoints;  // the newest version per task key, by task key
};

enum class UsageGroup { kTeam, kProject, kWorkloadClass, kPriorityClass, kGpuModel };

struct UsageRow {
  std::string group;  // the team, project, ... named by the UsageGroup asked for
  double gpu_hours = 0;
  int64_t leases = 0;  // leases that overlap the period

  bool operator==(const UsageRow&) const = default;
};

// One row of the pool's history (sampled by the head every minute): the pool as a whole
// (scope "pool") or one team (scope = the team's name) at time t_s (Unix seconds).
struct HistoryRow {
  double t_s = 0;
  std::string scope;
  double allocated_gpus = 0;  // slice-weighted
  double capacity_gpus = 0;   // the pool: GPUs that could be leased (healthy or degraded); a team: its nominal quota
  double borrowed_gpus = 0;
  int64_t pending = 0;
  bool operator==(const HistoryRow&) const = default;
};

// One transition of a GPU's health (pool/health_machine.h), as the head journals every one: when
// (Unix seconds), which GPU, from and to which state, why, and who: "agent" (a reading),
// "diagnostic", "pool" (its leases gone), "health-check" (the operators' program) or an operator.
struct HealthEventRow {
  double t_s = 0;
  std::string node;
  int64_t gpu = 0;
  std::string from_state;
  std::string to_state;
  std::string reason;
  std::string actor;
  // The GPU as it is after the event, so that a restarted head takes it back as it was (a failed
  // GPU stays failed): all its reasons, and the operator's drain if any.
  std::vector<std::string> reasons;
  std::string drained_by;
  std::string drain_reason;
  bool operator==(const HealthEventRow&) const = default;
};

// GPU-hours of one combination of the accounting columns over a period (HeadJournal::UsageCells):
// the finest grain the ledger has, which chargeback regroups and prices.
struct UsageCell {
  std::string team;
  std::string project;
  std::string workload_class;
  std::string priority_class;
  std::string gpu_model;
  std::string job;       // the job (kJobOfRequestSql); empty if closed before the ledger kept it (schema 4)
  double gpu_hours = 0;  // slice-weighted, clipped to the period
  // Of gpu_hours, those of leases whose job said how long they were busy, and that busy time
  // (each lease's prorated to the part of it inside the period): efficiency is their ratio.
  double measured_gpu_hours = 0;
  double busy_gpu_hours = 0;
  int64_t leases = 0;    // leases that overlap the period
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_RECORDS_H_
