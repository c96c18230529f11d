// The head's durable journal on real SQLite files in a temporary directory, with real fsyncs: every
// record kind through close and reopen, the ledger and usage arithmetic, refusals (schema version,
// garbage, foreign databases, a second head), commit failure (an RLIMIT_FSIZE child), and a child
// process killed with SIGKILL under load that must lose nothing it acknowledged.
#include "runtime/service/journal/head_journal.h"

#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/service/journal/head_journal_schema.h"

namespace gpupool::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

class HeadJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr ? tmp : "/tmp") + "/head_journal_test.XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    path_ = dir_ + "/head.db";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<HeadJournal> OpenJournal(JournalOptions options = {}) {
    absl::StatusOr<std::unique_ptr<HeadJournal>> journal = HeadJournal::Open(path_, options);
    EXPECT_TRUE(journal.ok()) << journal.status();
    return journal.ok() ? *std::move(journal) : nullptr;
  }

  HeadState LoadFresh() {  // through a close and a reopen
    std::unique_ptr<HeadJournal> journal = OpenJournal();
    absl::StatusOr<HeadState> state = journal->Load();
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *state : HeadState{};
  }

  // Runs SQL on the file directly, as another program (a newer gpupool) would.
  void RawSql(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << error;
    sqlite3_free(error);
    sqlite3_close(db);
  }
  // The first column of the first row `sql` returns ("" when none).
  std::string RawSqlText(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    std::string out;
    if (sqlite3_open(path.c_str(), &db) == SQLITE_OK) {
      sqlite3_exec(
          db, sql.c_str(),
          +[](void* text, int, char** values, char**) {
            if (values[0] != nullptr) *static_cast<std::string*>(text) = values[0];
            return 0;
          },
          &out, nullptr);
    }
    sqlite3_close(db);
    return out;
  }

  std::string dir_;
  std::string path_;
};

LeaseRecord Lease(const std::string& id, const std::string& team, double gpus, double granted_s,
                  const std::string& request_id = "") {
  return {.lease_id = id,
          .request_id = request_id.empty() ? "req-" + id : request_id,
          .job_id = "job-" + team,
          .node = "node-1",
          .account = {.team = team,
                      .project = "proj-" + team,
                      .workload_class = "training",
                      .priority_class = "batch",
                      .gpu_model = "H100-80GB",
                      .gpus = gpus},
          .lease = std::string("lease\0bytes\xff", 12),
          .granted_s = granted_s};
}

RequestRecord Request(const std::string& id, const std::string& bytes = "request-bytes") {
  return {.request_id = id, .job_id = "job-1", .team = "team-a", .request = bytes,
          .submitted_s = 1700000000.5};
}

CheckpointRecord Checkpoint(const std::string& task, int64_t version) {
  return {.task_key = task, .job_id = "job-1", .version = version,
          .path = "/ckpt/" + task + "/v" + std::to_string(version), .step = version * 100,
          .committed_s = 1700000100.0 + version};
}

TEST_F(HeadJournalTest, EveryRecordKindSurvivesCloseAndReopen) {
  const JobRecord job{.job_id = "job-1", .team = "team-a", .project = "vision",
                      .connected_s = 1700000000.25, .last_seen_s = 1700000042.75};
  const NodeRecord node{.node = "node-1", .agent_address = "10.0.0.7:7001",
                        .inventory = std::string("\0inv\xfe\xff", 6),
                        .last_heartbeat_s = 1700000040.0};
  const LeaseRecord lease = Lease("lease-1", "team-a", 0.25, 1700000010.0, "req-granted");
  {
    std::unique_ptr<HeadJournal> journal = OpenJournal();
    journal->RecordJob(job);
    journal->RecordNode(node);
    journal->RecordRequest(Request("req-granted"));
    journal->RecordRequest(Request("req-waiting"));
    journal->RecordLease(lease);
    journal->RecordCheckpoint(Checkpoint("task-a", 1));
    journal->RecordCheckpoint(Checkpoint("task-a", 2));
    journal->RecordCheckpoint(Checkpoint("task-b", 1));
    ASSERT_TRUE(journal->Flush().ok());
  }
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  absl::StatusOr<HeadState> state = journal->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_THAT(state->jobs, ElementsAre(job));
  EXPECT_THAT(state->nodes, ElementsAre(node));
  EXPECT_THAT(state->requests, ElementsAre(Request("req-waiting")));  // the grant consumed the other
  EXPECT_THAT(state->leases, ElementsAre(lease));
  EXPECT_THAT(state->checkpoints, ElementsAre(Checkpoint("task-a", 2), Checkpoint("task-b", 1)));
  absl::StatusOr<std::vector<CheckpointRecord>> history = journal->CheckpointHistory("task-a");
  ASSERT_TRUE(history.ok()) << history.status();
  EXPECT_THAT(*history, ElementsAre(Checkpoint("task-a", 1), Checkpoint("task-a", 2)));
  EXPECT_TRUE(journal->CheckIntegrity().ok());
}

TEST_F(HeadJournalTest, ARequestRecordedAgainKeepsItsPlaceInTheQueue) {
  {
    std::unique_ptr<HeadJournal> journal = OpenJournal();
    journal->RecordRequest(Request("r1"));
    journal->RecordRequest(Request("r2"));
    journal->RecordRequest(Request("r3"));
    journal->RecordRequest(Request("r1", "updated"));
    ASSERT_TRUE(journal->Flush().ok());
  }
  EXPECT_THAT(LoadFresh().requests,
              ElementsAre(Request("r1", "updated"), Request("r2"), Request("r3")));
}

TEST_F(HeadJournalTest, RemovalsDeleteWhatIsThereAndIgnoreWhatIsNot) {
  {
    std::unique_ptr<HeadJournal> journal = OpenJournal();
    journal->RecordJob({.job_id = "job-1", .team = "t"});
    journal->RecordNode({.node = "node-1"});
    journal->RecordRequest(Request("r1"));
    journal->RecordCheckpoint(Checkpoint("task-a", 1));
    journal->RecordCheckpoint(Checkpoint("task-a", 2));
    journal->RemoveJob("job-1");
    journal->RemoveNode("node-1");
    journal->RemoveRequest("r1");
    journal->RemoveCheckpoints("task-a");
    journal->RemoveJob("never-recorded");
    journal->RemoveRequest("never-recorded");
    journal->CloseLease("never-granted", 5.0, "released");
    ASSERT_TRUE(journal->Flush().ok());
    absl::StatusOr<std::vector<LedgerEntry>> ledger = journal->Ledger(0, 1e12);
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    EXPECT_TRUE(ledger->empty()) << "closing an unknown lease must not invent a ledger row";
  }
  HeadState state = LoadFresh();
  EXPECT_TRUE(state.jobs.empty());
  EXPECT_TRUE(state.nodes.empty());
  EXPECT_TRUE(state.requests.empty());
  EXPECT_TRUE(state.checkpoints.empty());
}

TEST_F(HeadJournalTest, CloseLeaseMovesTheLeaseIntoTheLedger) {
  const LeaseRecord lease = Lease("lease-1", "team-a", 0.5, 1000.0);
  {
    std::unique_ptr<HeadJournal> journal = OpenJournal();
    journal->RecordLease(lease);
    journal->RecordLease(Lease("lease-2", "team-b", 1, 1100.0));
    journal->CloseLease("lease-1", 4600.0, "revoked");
    journal->CloseLease("lease-1", 9999.0, "released");  // a replayed close: nothing to move
    ASSERT_TRUE(journal->Flush().ok());
  }
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  absl::StatusOr<HeadState> state = journal->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->leases.size(), 1u);
  EXPECT_EQ(state->leases[0].lease_id, "lease-2");
  absl::StatusOr<std::vector<LedgerEntry>> ledger = journal->Ledger(0, 1e12);
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  EXPECT_THAT(*ledger, ElementsAre(LedgerEntry{.lease_id = "lease-1", .account = lease.account,
                                               .start_s = 1000.0, .end_s = 4600.0,
                                               .end_cause = "revoked", .job = "req-lease-1"}));
}

TEST_F(HeadJournalTest, UsageClipsLeasesToThePeriodAndGroupsThem) {
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  // The period is [0, 7200): two hours.
  journal->RecordLease(Lease("a-whole", "team-a", 1.0, 0));      // [0, 7200): 2 GPU-h
  journal->CloseLease("a-whole", 7200, "released");
  journal->RecordLease(Lease("a-half", "team-a", 0.5, 3600));    // [3600, 10800) clipped: 0.5
  journal->CloseLease("a-half", 10800, "released");
  journal->RecordLease(Lease("b-early", "team-b", 2.0, -3600));  // [-3600, 1800) clipped: 1
  journal->CloseLease("b-early", 1800, "lost");
  journal->RecordLease(Lease("b-live", "team-b", 1.0, 5400));    // live, until 7200: 0.5
  journal->RecordLease(Lease("b-before", "team-b", 8.0, -7200));  // ends at the period's start
  journal->CloseLease("b-before", 0, "released");
  journal->RecordLease(Lease("c-after", "team-c", 8.0, 7200));   // starts at the period's end
  ASSERT_TRUE(journal->Flush().ok());

  absl::StatusOr<std::vector<UsageRow>> by_team = journal->Usage(0, 7200, UsageGroup::kTeam);
  ASSERT_TRUE(by_team.ok()) << by_team.status();
  EXPECT_THAT(*by_team, ElementsAre(UsageRow{.group = "team-a", .gpu_hours = 2.5, .leases = 2},
                                    UsageRow{.group = "team-b", .gpu_hours = 1.5, .leases = 2}));
  absl::StatusOr<std::vector<UsageRow>> by_project =
      journal->Usage(0, 7200, UsageGroup::kProject);
  ASSERT_TRUE(by_project.ok()) << by_project.status();
  EXPECT_THAT(*by_project,
              ElementsAre(UsageRow{.group = "proj-team-a", .gpu_hours = 2.5, .leases = 2},
                          UsageRow{.group = "proj-team-b", .gpu_hours = 1.5, .leases = 2}));
  absl::StatusOr<std::vector<UsageRow>> by_class =
      journal->Usage(0, 7200, UsageGroup::kWorkloadClass);
  ASSERT_TRUE(by_class.ok()) << by_class.status();
  EXPECT_THAT(*by_class, ElementsAre(UsageRow{.group = "training", .gpu_hours = 4, .leases = 4}));
}

TEST_F(HeadJournalTest, UsageRefusesAnEmptyPeriod) {
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  EXPECT_EQ(journal->Usage(10, 10, UsageGroup::kTeam).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(journal->Ledger(10, 5).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(HeadJournalTest, RefusesANewerSchemaNamingBothVersions) {
  OpenJournal().reset();
  RawSql(path_, "UPDATE meta SET value = '7' WHERE key = 'schema_version'");
  absl::StatusOr<std::unique_ptr<HeadJournal>> journal = HeadJournal::Open(path_);
  ASSERT_FALSE(journal.ok());
  EXPECT_EQ(journal.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(journal.status().message(), HasSubstr(path_));
  EXPECT_THAT(journal.status().message(), HasSubstr("schema version 7"));
  EXPECT_THAT(journal.status().message(),
              HasSubstr("schema version " + std::to_string(kJournalSchemaVersion)));
}

// A journal of schema version 1 (what gpupool wrote before the history table: today's file with
// that table dropped and the version put back) opens, is migrated in place, and keeps its ledger.
TEST_F(HeadJournalTest, AVersion1JournalIsMigratedInPlaceKeepingItsLedger) {
  {
    std::unique_ptr<HeadJournal> journal = OpenJournal();
    journal->RecordLease(Lease("old", "team-a", 1.0, 0));
    journal->CloseLease("old", 3600, "released");
    ASSERT_TRUE(journal->Flush().ok());
  }
  RawSql(path_,
         "DROP TABLE history; DROP TABLE health_events; ALTER TABLE ledger DROP COLUMN job; "
         "ALTER TABLE ledger DROP COLUMN busy_gpu_s; UPDATE meta SET value = '1' WHERE key = 'schema_version'");
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  absl::StatusOr<std::vector<UsageRow>> usage = journal->Usage(0, 3600, UsageGroup::kTeam);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_THAT(*usage, ElementsAre(UsageRow{.group = "team-a", .gpu_hours = 1, .leases = 1}));
  journal->RecordHistory({HistoryRow{.t_s = 100, .scope = "pool", .allocated_gpus = 1, .capacity_gpus = 2}}, 0);
  ASSERT_TRUE(journal->Flush().ok());
  absl::StatusOr<std::vector<HistoryRow>> history = journal->History(0, 200);
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->size(), 1u);
  EXPECT_EQ((*history)[0].capacity_gpus, 2);
}

// A journal of schema version 2 (before the health events: today's file with that table dropped
// and the version put back) is migrated to 3 in place, keeping its history and ledger, and then
// records GPUs' health transitions that survive a reopen.
TEST_F(HeadJournalTest, AVersion2JournalGainsHealthEventsKeepingItsHistory) {
  {
    std::unique_ptr<HeadJournal> journal = OpenJournal();
    journal->RecordLease(Lease("old", "team-a", 1.0, 0));
    journal->CloseLease("old", 3600, "released");
    journal->RecordHistory({HistoryRow{.t_s = 100, .scope = "pool", .allocated_gpus = 1, .capacity_gpus = 2}}, 0);
    ASSERT_TRUE(journal->Flush().ok());
  }
  RawSql(path_,
         "DROP TABLE health_events; ALTER TABLE ledger DROP COLUMN job; ALTER TABLE ledger DROP COLUMN busy_gpu_s; "
         "UPDATE meta SET value = '2' WHERE key = 'schema_version'");
  {
    std::unique_ptr<HeadJournal> journal = OpenJournal();
    EXPECT_EQ(journal->History(0, 200)->size(), 1u);
    EXPECT_EQ(journal->Usage(0, 3600, UsageGroup::kTeam)->size(), 1u);
    journal->RecordHealthEvent(HealthEventRow{.t_s = 150, .node = "node-0", .gpu = 1, .from_state = "healthy",
                                              .to_state = "draining", .reason = "XID 48", .actor = "agent"});
    journal->RecordHealthEvent(HealthEventRow{.t_s = 151, .node = "node-0", .gpu = 1, .from_state = "draining",
                                              .to_state = "quarantined", .reason = "its leases are gone",
                                              .actor = "pool", .reasons = {"XID 48", "row remap pending"},
                                              .drained_by = "alice", .drain_reason = "fan noise"});
    ASSERT_TRUE(journal->Flush().ok());
  }
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  absl::StatusOr<std::vector<HealthEventRow>> events = journal->HealthEvents(0, 1000);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].reason, "XID 48");
  EXPECT_EQ((*events)[1].to_state, "quarantined");
  EXPECT_EQ((*events)[1].actor, "pool");
  EXPECT_EQ((*events)[1].reasons, (std::vector<std::string>{"XID 48", "row remap pending"}));
  EXPECT_EQ((*events)[1].drained_by, "alice");
  EXPECT_TRUE((*events)[0].reasons.empty());
  EXPECT_EQ(journal->HealthEvents(151, 1000)->size(), 1u);
}

// A journal of schema version 3 (today's file before the ledger kept jobs: those columns dropped
// and the version put back) is upgraded in place: its old rows keep their usage with no job, the rows
// closed after the upgrade name theirs (from the request id "s<N>/<job>/...", never the job's key).
TEST_F(HeadJournalTest, AVersion3JournalGainsJobIdsInPlace) {
  {
    std::unique_ptr<HeadJournal> journal = OpenJournal();
    journal->RecordLease(Lease("old", "team-a", 1.0, 0));
    journal->CloseLease("old", 3600, "released");
    journal->RecordLease(Lease("open", "team-b", 2.0, 0, "s4/job-host-77/team-b/3/0"));  // open across it
    ASSERT_TRUE(journal->Flush().ok());
  }
  RawSql(path_,
         "ALTER TABLE ledger DROP COLUMN job; ALTER TABLE ledger DROP COLUMN busy_gpu_s; "
         "UPDATE meta SET value = '3' WHERE key = 'schema_version'");
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  journal->CloseLease("open", 3600, "released");
  ASSERT_TRUE(journal->Flush().ok());
  absl::StatusOr<std::vector<LedgerEntry>> ledger = journal->Ledger(0, 1e12);
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  ASSERT_EQ(ledger->size(), 2u);
  EXPECT_EQ((*ledger)[0].lease_id, "old");
  EXPECT_EQ((*ledger)[0].job, "") << "closed before the ledger kept jobs";
  EXPECT_EQ((*ledger)[1].job, "job-host-77");
  absl::StatusOr<std::vector<UsageCell>> cells = journal->UsageCells(0, 3600);
  ASSERT_TRUE(cells.ok()) << cells.status();
  ASSERT_EQ(cells->size(), 2u);
  EXPECT_EQ((*cells)[0].job, "");
  EXPECT_EQ((*cells)[0].gpu_hours, 1);
  EXPECT_EQ((*cells)[1].job, "job-host-77");
  EXPECT_EQ((*cells)[1].gpu_hours, 2);
  journal.reset();
  EXPECT_EQ(RawSqlText(path_, "SELECT value FROM meta WHERE key = 'schema_version'"),
            std::to_string(kJournalSchemaVersion));
}

// The busy time a job gives at release is kept with the ledger row, capped at what the lease held,
// and prorated when the period cuts the lease; leases whose busy time is unknown count as leased
// only (efficiency is busy over the measured part).
TEST_F(HeadJournalTest, BusyTimeIsKeptCappedAndProratedToThePeriod) {
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  journal->RecordLease(Lease("half-busy", "team-a", 2.0, 0));  // [0, 3600) on 2 GPUs: 7200 GPU-s
  journal->CloseLease("half-busy", 3600, "released", 3600);
  journal->RecordLease(Lease("boastful", "team-b", 1.0, 0));   // claims more than it held
  journal->CloseLease("boastful", 3600, "released", 99999);
  journal->RecordLease(Lease("silent", "team-c", 1.0, 0));     // an older client: unknown
  journal->CloseLease("silent", 3600, "released");
  ASSERT_TRUE(journal->Flush().ok());
  absl::StatusOr<std::vector<LedgerEntry>> ledger = journal->Ledger(0, 1e12);
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  ASSERT_EQ(ledger->size(), 3u);
  EXPECT_EQ((*ledger)[0].busy_gpu_s, 3600);
  EXPECT_EQ((*ledger)[1].busy_gpu_s, 3600) << "capped at 1 GPU x 3600 s";
  EXPECT_EQ((*ledger)[2].busy_gpu_s, -1);
  // The first half hour only: half of each lease.
  absl::StatusOr<std::vector<UsageCell>> cells = journal->UsageCells(0, 1800);
  ASSERT_TRUE(cells.ok()) << cells.status();
  ASSERT_EQ(cells->size(), 3u);
  EXPECT_DOUBLE_EQ((*cells)[0].gpu_hours, 1);
  EXPECT_DOUBLE_EQ((*cells)[0].measured_gpu_hours, 1);
  EXPECT_DOUBLE_EQ((*cells)[0].busy_gpu_hours, 0.5);
  EXPECT_DOUBLE_EQ((*cells)[1].busy_gpu_hours, 0.5);
  EXPECT_DOUBLE_EQ((*cells)[1].measured_gpu_hours, 0.5);
  EXPECT_DOUBLE_EQ((*cells)[2].gpu_hours, 0.5);
  EXPECT_DOUBLE_EQ((*cells)[2].measured_gpu_hours, 0) << "unknown busy time is not measured";
  EXPECT_DOUBLE_EQ((*cells)[2].busy_gpu_hours, 0);
}

TEST_F(HeadJournalTest, HistoryIsKeptForItsRetentionOnly) {
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  journal->RecordHistory({HistoryRow{.t_s = 60, .scope = "pool", .allocated_gpus = 1},
                          HistoryRow{.t_s = 60, .scope = "vision", .allocated_gpus = 1, .pending = 3}},
                         0);
  journal->RecordHistory({HistoryRow{.t_s = 120, .scope = "pool", .allocated_gpus = 2}}, /*keep_after_s=*/100);
  ASSERT_TRUE(journal->Flush().ok());
  absl::StatusOr<std::vector<HistoryRow>> history = journal->History(0, 1000);
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->size(), 1u) << "the samples before t = 100 are past the retention";
  EXPECT_EQ((*history)[0].t_s, 120);
  journal.reset();
  EXPECT_EQ(OpenJournal()->History(0, 1000)->size(), 1u) << "and the history survives a reopen";
}

// What chargeback's `unavailable` reads: the pool's and the models' rows, never a team's.
TEST_F(HeadJournalTest, PoolWideHistoryLeavesTheTeamsRowsOut) {
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  journal->RecordHistory({HistoryRow{.t_s = 60, .scope = "pool", .capacity_gpus = 2},
                          HistoryRow{.t_s = 60, .scope = "model:L4", .capacity_gpus = 2},
                          HistoryRow{.t_s = 60, .scope = "vision", .capacity_gpus = 1}},
                         0);
  ASSERT_TRUE(journal->Flush().ok());
  absl::StatusOr<std::vector<HistoryRow>> rows = journal->PoolWideHistory(0, 1000);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].scope, "model:L4");
  EXPECT_EQ((*rows)[1].scope, "pool");
  EXPECT_FALSE(journal->PoolWideHistory(10, 10).ok()) << "an empty period is refused";
}

TEST_F(HeadJournalTest, RefusesAFileThatIsNotADatabaseAndLeavesItAlone) {
  std::string garbage(8192, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 131 + 7);
  std::ofstream(path_, std::ios::binary) << garbage;
  absl::StatusOr<std::unique_ptr<HeadJournal>> journal = HeadJournal::Open(path_);
  ASSERT_FALSE(journal.ok());
  EXPECT_EQ(journal.status().code(), absl::StatusCode::kDataLoss) << journal.status();
  EXPECT_THAT(journal.status().message(), HasSubstr(path_));
  std::stringstream after;
  after << std::ifstream(path_, std::ios::binary).rdbuf();
  EXPECT_EQ(after.str(), garbage);
}

TEST_F(HeadJournalTest, ATruncatedJournalIsReportedAsDataLossNamingThePath) {
  {
    std::unique_ptr<HeadJournal> journal = OpenJournal();
    for (int i = 0; i < 300; ++i) {
      LeaseRecord lease = Lease("lease-" + std::to_string(i), "team-a", 1, i);
      lease.lease = std::string(2048, 'l');
      journal->RecordLease(lease);
    }
    ASSERT_TRUE(journal->Flush().ok());
  }  // closing checkpoints everything into the main file
  std::filesystem::resize_file(path_, std::filesystem::file_size(path_) / 2);
  absl::StatusOr<std::unique_ptr<HeadJournal>> journal = HeadJournal::Open(path_);
  absl::Status st = journal.ok() ? (*journal)->Load().status() : journal.status();
  if (st.ok()) st = (*journal)->CheckIntegrity();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(st.message(), HasSubstr(path_));
}

TEST_F(HeadJournalTest, RefusesAnSqliteDatabaseThatIsNotAJournal) {
  RawSql(path_, "CREATE TABLE photos(id INTEGER PRIMARY KEY, name TEXT)");
  absl::StatusOr<std::unique_ptr<HeadJournal>> journal = HeadJournal::Open(path_);
  ASSERT_FALSE(journal.ok());
  EXPECT_EQ(journal.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(journal.status().message(), HasSubstr("not a head journal"));
}

TEST_F(HeadJournalTest, OpenInAMissingDirectoryNamesThePath) {
  std::string missing = dir_ + "/no/such/dir/head.db";
  absl::StatusOr<std::unique_ptr<HeadJournal>> journal = HeadJournal::Open(missing);
  ASSERT_FALSE(journal.ok());
  EXPECT_THAT(journal.status().message(), HasSubstr(missing));
}

TEST_F(HeadJournalTest, OneHeadPerJournal) {
  std::unique_ptr<HeadJournal> first = OpenJournal();
  absl::StatusOr<std::unique_ptr<HeadJournal>> second = HeadJournal::Open(path_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("in use by another head"));
  first.reset();
  EXPECT_TRUE(HeadJournal::Open(path_).ok());
}

TEST_F(HeadJournalTest, OnDurableRunsOnTheJournalThreadAfterTheCommit) {
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  HeadJournal* j = journal.get();  // still readable from callbacks its destructor runs
  struct Seen {
    absl::Mutex mu;
    std::vector<std::string> events;
  } seen;
  const std::thread::id test_thread = std::this_thread::get_id();
  auto note = [&](const std::string& what, const absl::Status& st) {
    // The record must be readable when the callback runs: the commit came first.
    absl::StatusOr<HeadState> state = j->Load();
    bool visible = state.ok() && !state->jobs.empty();
    absl::MutexLock lock(&seen.mu);
    seen.events.push_back(what + (st.ok() ? " ok" : " failed") + (visible ? " visible" : "") +
                          (std::this_thread::get_id() == test_thread ? " on-caller" : ""));
  };
  JournalTicket t = journal->RecordJob({.job_id = "job-1", .team = "t"});
  journal->OnDurable(t, [&](absl::Status st) { note("first", st); });
  ASSERT_TRUE(journal->WaitDurable(t).ok());
  journal->OnDurable(t, [&](absl::Status st) { note("already-durable", st); });
  journal->OnDurable(t + 100, [&](absl::Status st) { note("never-issued", st); });
  journal.reset();  // runs what is left
  // Regression: callbacks registered while the thread ran earlier ones were dropped at shutdown.
  EXPECT_THAT(seen.events,
              UnorderedElementsAre("first ok visible", "already-durable ok visible",
                                   "never-issued failed visible"));
}

TEST_F(HeadJournalTest, WaitDurableInACallbackIsRefusedRatherThanWaitingForItself) {
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  HeadJournal* j = journal.get();
  std::promise<absl::StatusCode> inside;
  JournalTicket t = journal->RecordJob({.job_id = "job-1"});
  journal->OnDurable(t, [&, t](absl::Status) { inside.set_value(j->WaitDurable(t).code()); });
  std::future<absl::StatusCode> code = inside.get_future();
  ASSERT_EQ(code.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(code.get(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(HeadJournalTest, WaitDurableRefusesATicketNeverIssued) {
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  EXPECT_TRUE(journal->WaitDurable(0).ok());
  EXPECT_EQ(journal->WaitDurable(1).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(HeadJournalTest, ConcurrentRecordersAllBecomeDurable) {
  constexpr int kThreads = 8, kEach = 50;
  {
    std::unique_ptr<HeadJournal> journal = OpenJournal({.group_commit_window =
                                                            std::chrono::microseconds(500)});
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          std::string id = "r" + std::to_string(t) + "-" + std::to_string(i);
          if (!journal->WaitDurable(journal->RecordRequest(Request(id))).ok()) ++failures;
        }
      });
    }
    for (std::thread& th : threads) th.join();
    EXPECT_EQ(failures.load(), 0);
  }
  EXPECT_EQ(LoadFresh().requests.size(), static_cast<size_t>(kThreads * kEach));
}

// ---- Failure injection in child processes ----

// Runs `body` in a forked child and returns its exit status; the child reports problems on stderr
// and through a non-zero exit code. The child never returns into the test framework.
template <typename Body>
int InChild(Body body) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST_F(HeadJournalTest, AFailedCommitFailsItsTicketsAndEveryLaterOne) {
  const std::string path = path_;
  int status = InChild([&]() -> int {
    absl::StatusOr<std::unique_ptr<HeadJournal>> journal = HeadJournal::Open(path);
    if (!journal.ok()) return 10;
    HeadJournal& j = **journal;
    if (!j.WaitDurable(j.RecordLease(Lease("kept", "team-a", 1, 0))).ok()) return 11;
    // From now on no file of this process may grow by more than a few KiB: the next big commit
    // fails inside SQLite's writes, as on a full disk.
    signal(SIGXFSZ, SIG_IGN);
    auto size_of = [](const std::string& file) -> uintmax_t {
      std::error_code ec;
      uintmax_t size = std::filesystem::file_size(file, ec);
      return ec ? 0 : size;
    };
    uintmax_t biggest = std::max(size_of(path), size_of(path + "-wal"));
    rlimit limit{.rlim_cur = biggest + 16384, .rlim_max = RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) return 12;
    absl::Status big =
        j.WaitDurable(j.RecordNode({.node = "n", .inventory = std::string(4 << 20, 'x')}));
    if (big.ok()) return 13;
    if (big.message().find(path) == std::string::npos) return 14;
    absl::Status later = j.WaitDurable(j.RecordJob({.job_id = "after-the-failure"}));
    if (later.ok()) return 15;
    std::fprintf(stderr, "failed commit: %s\n", big.ToString().c_str());
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0);
  std::unique_ptr<HeadJournal> journal = OpenJournal();
  absl::StatusOr<HeadState> state = journal->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->leases.size(), 1u);
  EXPECT_EQ(state->leases[0].lease_id, "kept");
  EXPECT_TRUE(state->nodes.empty());
  EXPECT_TRUE(state->jobs.empty());
  EXPECT_TRUE(journal->CheckIntegrity().ok());
}

// What a child acknowledged before it died: each line it wrote after WaitDurable returned OK.
struct Acknowledged {
  std::set<std::string> requests;  // "R id": the request was durable
  std::set<std::string> leases;    // "L id": the lease (granting request req-id) was durable
  std::set<std::string> closes;    // "C id": the lease's close was durable
  size_t total() const { return requests.size() + leases.size() + closes.size(); }
};

// The child: kThreads recorders, each looping request -> grant -> (every 3rd) close, reporting
// every durable step on `fd` (one write of a short line each, atomic on a pipe) until killed.
[[noreturn]] void RecordUntilKilled(const std::string& path, int round, int fd) {
  constexpr int kThreads = 4;
  absl::StatusOr<std::unique_ptr<HeadJournal>> journal = HeadJournal::Open(path);
  if (!journal.ok()) _exit(20);
  HeadJournal& j = **journal;
  auto ack = [fd](char kind, const std::string& id) {
    std::string line = std::string(1, kind) + " " + id + "\n";
    if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(21);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0;; ++i) {
        std::string id = "k" + std::to_string(round) + "-" + std::to_string(t) + "-" +
                         std::to_string(i);
        RequestRecord request = Request("req-" + id, std::string(512, 'q'));
        if (!j.WaitDurable(j.RecordRequest(request)).ok()) _exit(22);
        ack('R', id);
        LeaseRecord lease = Lease(id, "team-" + std::to_string(t), 1, i);
        lease.lease = std::string(1024, 'l');  // fills the WAL so checkpoints happen too
        if (!j.WaitDurable(j.RecordLease(lease)).ok()) _exit(23);
        ack('L', id);
        if (i % 3 == 0) {
          if (!j.WaitDurable(j.CloseLease(id, i + 1.0, "released")).ok()) _exit(24);
          ack('C', id);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  _exit(25);
}

// Starts the child, kills it with SIGKILL `run_for` after its first acknowledgement, and returns
// everything it acknowledged.
Acknowledged RunAndKill(const std::string& path, int round, std::chrono::milliseconds run_for) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    RecordUntilKilled(path, round, fds[1]);
  }
  close(fds[1]);
  std::string received;
  auto read_some = [&](int timeout_ms) {
    pollfd p{.fd = fds[0], .events = POLLIN, .revents = 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[4096];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) return false;
    received.append(buf, static_cast<size_t>(n));
    return true;
  };
  auto first_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (received.empty() && std::chrono::steady_clock::now() < first_deadline) read_some(100);
  auto kill_at = std::chrono::steady_clock::now() + run_for;
  while (std::chrono::steady_clock::now() < kill_at) read_some(10);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child ended by itself with status " << status;
  while (read_some(1000)) {  // what it wrote before dying
  }
  close(fds[0]);

  Acknowledged acked;
  std::istringstream lines(received);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() < 3 || lines.eof()) continue;  // a torn last line cannot happen; skip anyway
    std::set<std::string>* into = line[0] == 'R' ? &acked.requests
                                  : line[0] == 'L' ? &acked.leases
                                                   : &acked.closes;
    into->insert(line.substr(2));
  }
  return acked;
}

TEST_F(HeadJournalTest, Kill9UnderLoadLosesNothingAcknowledged) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Acknowledged acked = RunAndKill(path_, round, std::chrono::milliseconds(500));
    ASSERT_GT(acked.total(), 10u) << "the child acknowledged too little for the test to mean much";

    std::unique_ptr<HeadJournal> journal = OpenJournal();
    ASSERT_NE(journal, nullptr);
    EXPECT_TRUE(journal->CheckIntegrity().ok());
    absl::StatusOr<HeadState> state = journal->Load();
    ASSERT_TRUE(state.ok()) << state.status();
    absl::StatusOr<std::vector<LedgerEntry>> ledger = journal->Ledger(-1e12, 1e12);
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    std::set<std::string> requests, live, closed;
    for (const RequestRecord& r : state->requests) requests.insert(r.request_id);
    for (const LeaseRecord& l : state->leases) live.insert(l.lease_id);
    for (const LedgerEntry& e : *ledger) closed.insert(e.lease_id);

    for (const std::string& id : acked.closes) {
      EXPECT_TRUE(closed.count(id) == 1 && live.count(id) == 0) << "acknowledged close " << id;
    }
    for (const std::string& id : acked.leases) {
      EXPECT_TRUE(live.count(id) + closed.count(id) == 1) << "acknowledged lease " << id;
    }
    for (const std::string& id : acked.requests) {
      EXPECT_TRUE(requests.count("req-" + id) + live.count(id) + closed.count(id) == 1)
          << "acknowledged request " << id;
    }
    for (const std::string& id : live) {  // a grant removes its request in the same transaction
      EXPECT_EQ(requests.count("req-" + id), 0u) << "lease " << id << " beside its request";
    }
  }
}

}  // namespace
}  // namespace gpupool::runtime
