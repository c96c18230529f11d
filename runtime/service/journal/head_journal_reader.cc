#include "runtime/service/journal/head_journal_reader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "runtime/service/journal/head_journal_schema.h"

namespace gpupool::runtime {
namespace {

// Each SELECT names its columns, and the matching *At function reads them in that order.
constexpr char kAccountColumns[] = "team, project, workload_class, priority_class, gpu_model, gpus";

LeaseAccount AccountAt(const sqlite::Statement& s, int first) {
  return {.team = s.Text(first),
          .project = s.Text(first + 1),
          .workload_class = s.Text(first + 2),
          .priority_class = s.Text(first + 3),
          .gpu_model = s.Text(first + 4),
          .gpus = s.Double(first + 5)};
}

JobRecord JobAt(const sqlite::Statement& s) {
  return {.job_id = s.Text(0),
          .team = s.Text(1),
          .project = s.Text(2),
          .connected_s = s.Double(3),
          .last_seen_s = s.Double(4)};
}

NodeRecord NodeAt(const sqlite::Statement& s) {
  return {.node = s.Text(0),
          .agent_address = s.Text(1),
          .inventory = s.Blob(2),
          .last_heartbeat_s = s.Double(3)};
}

RequestRecord RequestAt(const sqlite::Statement& s) {
  return {.request_id = s.Text(0),
          .job_id = s.Text(1),
          .team = s.Text(2),
          .request = s.Blob(3),
          .submitted_s = s.Double(4)};
}

LeaseRecord LeaseAt(const sqlite::Statement& s) {
  return {.lease_id = s.Text(0),
          .request_id = s.Text(1),
          .job_id = s.Text(2),
          .node = s.Text(3),
          .account = AccountAt(s, 4),
          .lease = s.Blob(10),
          .granted_s = s.Double(11)};
}

LedgerEntry LedgerAt(const sqlite::Statement& s) {
  return {.lease_id = s.Text(0),
          .account = AccountAt(s, 1),
          .start_s = s.Double(7),
          .end_s = s.Double(8),
          .end_cause = s.Text(9),
          .job = s.Text(10),
          .busy_gpu_s = s.Double(11)};
}

CheckpointRecord CheckpointAt(const sqlite::Statement& s) {
  return {.task_key = s.Text(0),
          .job_id = s.Text(1),
          .version = s.Int(2),
          .path = s.Text(3),
          .step = s.Int(4),
          .committed_s = s.Double(5)};
}

UsageRow UsageAt(const sqlite::Statement& s) {
  return {.group = s.Text(0), .gpu_hours = s.Double(1), .leases = s.Int(2)};
}

// Prepares `sql`, lets `bind` bind its parameters, and reads every row with `row`.
template <typename T, typename Bind>
absl::StatusOr<std::vector<T>> Query(const sqlite::Db& db, const std::string& sql,
                                     absl::string_view what, Bind bind,
                                     T (*row)(const sqlite::Statement&)) {
  absl::StatusOr<sqlite::Statement> st = db.Prepare(sql);
  if (!st.ok()) return st.status();
  bind(*st);
  std::vector<T> out;
  for (;;) {
    absl::StatusOr<bool> more = st->Step(what);
    if (!more.ok()) return more.status();
    if (!*more) return out;
    out.push_back(row(*st));
  }
}

template <typename T>
absl::StatusOr<std::vector<T>> QueryAll(const sqlite::Db& db, const std::string& sql,
                                        absl::string_view what,
                                        T (*row)(const sqlite::Statement&)) {
  return Query(db, sql, what, [](sqlite::Statement&) {}, row);
}

absl::Status CheckPeriod(double from_s, double to_s) {
  if (from_s < to_s) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("usage period [", from_s, ", ", to_s, ") is empty: `from` must precede `to`"));
}

const char* GroupColumn(UsageGroup group) {
  switch (group) {
    case UsageGroup::kTeam: return "team";
    case UsageGroup::kProject: return "project";
    case UsageGroup::kWorkloadClass: return "workload_class";
    case UsageGroup::kPriorityClass: return "priority_class";
    case UsageGroup::kGpuModel: return "gpu_model";
  }
  return "team";
}

}  // namespace

absl::StatusOr<std::unique_ptr<JournalReader>> JournalReader::Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<sqlite::Db>> db = sqlite::Db::Open(path, /*read_only=*/true);
  if (!db.ok()) return db.status();
  if (absl::Status st = (*db)->Exec("PRAGMA busy_timeout = 10000", "setting busy_timeout");
      !st.ok()) {
    return st;
  }
  return std::unique_ptr<JournalReader>(new JournalReader(*std::move(db)));
}

absl::StatusOr<HeadState> JournalReader::Load() {
  absl::MutexLock lock(&mu_);
  const sqlite::Db& db = *db_;
  // One read transaction: every table as of the same commit.
  if (absl::Status st = db_->Exec("BEGIN", "starting to load"); !st.ok()) return st;
  HeadState state;
  absl::Status st = [&]() -> absl::Status {
    auto jobs = QueryAll(db, "SELECT job_id, team, project, connected_s, last_seen_s FROM jobs "
                         "ORDER BY job_id", "loading jobs", JobAt);
    if (!jobs.ok()) return jobs.status();
    auto nodes = QueryAll(db, "SELECT node, agent_address, inventory, last_heartbeat_s FROM nodes "
                          "ORDER BY node", "loading nodes", NodeAt);
    if (!nodes.ok()) return nodes.status();
    auto requests = QueryAll(db, "SELECT request_id, job_id, team, request, submitted_s "
                             "FROM requests ORDER BY seq", "loading requests", RequestAt);
    if (!requests.ok()) return requests.status();
    auto leases = QueryAll(db, absl::StrCat("SELECT lease_id, request_id, job_id, node, ",
                                            kAccountColumns, ", lease, granted_s FROM leases "
                                            "ORDER BY granted_s, lease_id"),
                           "loading leases", LeaseAt);
    if (!leases.ok()) return leases.status();
    auto checkpoints = QueryAll(
        db, "SELECT task_key, job_id, version, path, step, committed_s FROM checkpoints c "
            "WHERE version = (SELECT MAX(version) FROM checkpoints WHERE task_key = c.task_key) "
            "ORDER BY task_key", "loading checkpoints", CheckpointAt);
    if (!checkpoints.ok()) return checkpoints.status();
    state = {.jobs = *std::move(jobs), .nodes = *std::move(nodes),
             .requests = *std::move(requests), .leases = *std::move(leases),
             .checkpoints = *std::move(checkpoints)};
    return absl::OkStatus();
  }();
  absl::Status end = db_->Exec("COMMIT", "finishing the load");
  if (!st.ok()) return st;
  if (!end.ok()) return end;
  return state;
}

absl::StatusOr<std::vector<UsageRow>> JournalReader::Usage(double from_s, double to_s,
                                                           UsageGroup group_by) {
  if (absl::Status st = CheckPeriod(from_s, to_s); !st.ok()) return st;
  const char* group = GroupColumn(group_by);
  // Closed leases from the ledger and live ones (running until `to`), each clipped to the period
  // and weighted by the GPU equivalents it held.
  std::string sql = absl::StrCat(
      "SELECT g, SUM((MIN(end_s, ?2) - MAX(start_s, ?1)) * gpus) / 3600.0, COUNT(*) FROM ("
      " SELECT ", group, " AS g, start_s, end_s, gpus FROM ledger WHERE end_s > ?1 AND start_s < ?2"
      " UNION ALL"
      " SELECT ", group, ", granted_s, ?2, gpus FROM leases WHERE granted_s < ?2"
      ") GROUP BY g ORDER BY g");
  absl::MutexLock lock(&mu_);
  return Query(
      *db_, sql, absl::StrCat("summing usage by ", group),
      [&](sqlite::Statement& st) { st.BindDouble(1, from_s).BindDouble(2, to_s); }, UsageAt);
}

absl::StatusOr<std::vector<HealthEventRow>> JournalReader::HealthEvents(double from_s, double to_s) {
  if (absl::Status st = CheckPeriod(from_s, to_s); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  return Query(
      *db_,
      "SELECT t_s, node, gpu, from_state, to_state, reason, actor, reasons, drained_by, drain_reason "
      "FROM health_events WHERE t_s >= ?1 AND t_s < ?2 ORDER BY seq",
      "reading the GPUs' health events",
      [&](sqlite::Statement& st) { st.BindDouble(1, from_s).BindDouble(2, to_s); },
      +[](const sqlite::Statement& s) {
        const std::string reasons = s.Text(7);
        return HealthEventRow{.t_s = s.Double(0), .node = s.Text(1), .gpu = s.Int(2), .from_state = s.Text(3),
                              .to_state = s.Text(4), .reason = s.Text(5), .actor = s.Text(6),
                              .reasons = reasons.empty() ? std::vector<std::string>{}
                                                         : std::vector<std::string>(absl::StrSplit(reasons, '\n')),
                              .drained_by = s.Text(8), .drain_reason = s.Text(9)};
      });
}

absl::StatusOr<std::vector<HistoryRow>> JournalReader::History(double from_s, double to_s) {
  return HistoryWhere(from_s, to_s, "");
}

absl::StatusOr<std::vector<HistoryRow>> JournalReader::PoolWideHistory(double from_s, double to_s) {
  // The scopes runtime/service/history_sampler.h writes for the whole pool and for each model.
  return HistoryWhere(from_s, to_s, " AND (scope = 'pool' OR scope LIKE 'model:%')");
}

absl::StatusOr<std::vector<HistoryRow>> JournalReader::HistoryWhere(double from_s, double to_s,
                                                                    const char* scopes) {
  if (absl::Status st = CheckPeriod(from_s, to_s); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  return Query(
      *db_,
      absl::StrCat("SELECT t_s, scope, allocated_gpus, capacity_gpus, borrowed_gpus, pending FROM history "
                   "WHERE t_s >= ?1 AND t_s < ?2", scopes, " ORDER BY t_s, scope"),
      "reading the pool's history",
      [&](sqlite::Statement& st) { st.BindDouble(1, from_s).BindDouble(2, to_s); },
      +[](const sqlite::Statement& s) {
        return HistoryRow{.t_s = s.Double(0), .scope = s.Text(1), .allocated_gpus = s.Double(2),
                          .capacity_gpus = s.Double(3), .borrowed_gpus = s.Double(4), .pending = s.Int(5)};
      });
}

absl::StatusOr<std::vector<UsageCell>> JournalReader::UsageCells(double from_s, double to_s) {
  if (absl::Status st = CheckPeriod(from_s, to_s); !st.ok()) return st;
  constexpr char kCells[] = "team, project, workload_class, priority_class, gpu_model, job";
  constexpr char kLeaseCells[] = "team, project, workload_class, priority_class, gpu_model, ";
  // A lease's busy time is for the whole lease: the part inside the period is prorated.
  std::string sql = absl::StrCat(
      "SELECT ", kCells, ", SUM((MIN(end_s, ?2) - MAX(start_s, ?1)) * gpus) / 3600.0, COUNT(*),"
      " SUM(CASE WHEN busy >= 0 THEN (MIN(end_s, ?2) - MAX(start_s, ?1)) * gpus ELSE 0 END) / 3600.0,"
      " SUM(CASE WHEN busy >= 0 AND end_s > start_s"
      "     THEN busy * (MIN(end_s, ?2) - MAX(start_s, ?1)) / (end_s - start_s) ELSE 0 END) / 3600.0 FROM ("
      " SELECT ", kCells, ", start_s, end_s, gpus, busy_gpu_s AS busy FROM ledger WHERE end_s > ?1 AND start_s < ?2"
      " UNION ALL"
      // A live lease's job comes from its request id, as the ledger's will when it closes; its
      // busy time is known only once the job gives it back.
      " SELECT ", kLeaseCells, kJobOfRequestSql, ", granted_s, ?2, gpus, -1 FROM leases WHERE granted_s < ?2"
      ") GROUP BY ", kCells, " ORDER BY ", kCells);
  absl::MutexLock lock(&mu_);
  return Query(
      *db_, sql, "summing usage by every accounting column",
      [&](sqlite::Statement& st) { st.BindDouble(1, from_s).BindDouble(2, to_s); },
      +[](const sqlite::Statement& s) {
        return UsageCell{.team = s.Text(0), .project = s.Text(1), .workload_class = s.Text(2),
                         .priority_class = s.Text(3), .gpu_model = s.Text(4), .job = s.Text(5),
                         .gpu_hours = s.Double(6), .measured_gpu_hours = s.Double(8),
                         .busy_gpu_hours = s.Double(9), .leases = s.Int(7)};
      });
}

absl::StatusOr<std::vector<LedgerEntry>> JournalReader::Ledger(double from_s, double to_s) {
  if (absl::Status st = CheckPeriod(from_s, to_s); !st.ok()) return st;
  std::string sql = absl::StrCat("SELECT lease_id, ", kAccountColumns,
                                 ", start_s, end_s, end_cause, job, busy_gpu_s FROM ledger "
                                 "WHERE end_s > ?1 AND start_s < ?2 ORDER BY end_s, seq");
  absl::MutexLock lock(&mu_);
  return Query(
      *db_, sql, "reading the ledger",
      [&](sqlite::Statement& st) { st.BindDouble(1, from_s).BindDouble(2, to_s); }, LedgerAt);
}

absl::StatusOr<std::vector<CheckpointRecord>> JournalReader::CheckpointHistory(
    const std::string& task_key) {
  absl::MutexLock lock(&mu_);
  return Query(
      *db_,
      "SELECT task_key, job_id, version, path, step, committed_s FROM checkpoints "
      "WHERE task_key = ?1 ORDER BY version",
      absl::StrCat("reading the checkpoints of ", task_key),
      [&](sqlite::Statement& st) { st.BindText(1, task_key); }, CheckpointAt);
}

absl::Status JournalReader::CheckIntegrity() {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::vector<std::string>> problems = QueryAll<std::string>(
      *db_, "PRAGMA integrity_check(10)", "checking integrity",
      [](const sqlite::Statement& s) { return s.Text(0); });
  if (!problems.ok()) return problems.status();
  if (problems->size() == 1 && problems->front() == "ok") return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("head journal ", db_->path(), ": integrity check: ",
                                          absl::StrJoin(*problems, "; ")));
}

}  // namespace gpupool::runtime
