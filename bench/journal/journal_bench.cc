// The head journal's group commit (runtime/service/journal/head_journal.h) against one transaction per
// record, measured in the same run in the same directory:
//   journal_bench [--json] [--seconds=S] [--rounds=R] [--clients=K] [--dir=PATH]
//
// Workload: the head's grant path. K client threads each loop "RecordLease, then WaitDurable"
// for S seconds; figures are records/s and the p50/p99 latency from the call until the record is
// durable (when the head may acknowledge it). Scenarios alternate for R rounds (a shared disk is
// faster at some moments than at others) and the medians are printed.
// Scenarios:
//   group FULL              the default: synchronous=FULL, a batch may wait up to 2 ms for as
//                           many records as the last batch had
//   group FULL, no window   the same, but a batch commits as soon as the writer is free
//   group NORMAL            synchronous=NORMAL, default window (no fsync per commit: not
//                           power-safe)
//   lone client             one client: what a lone record pays, with and without the window
// References: one transaction per record (the same INSERT + DELETE RecordLease applies, each in
// its own BEGIN IMMEDIATE ... COMMIT with synchronous=FULL, on one connection shared by the K
// clients), and a 4 KiB overwrite+fdatasync (the disk's floor for one durable commit). Every
// scenario first records kWarmUpRecords in one batch, as a head that has run a while has a WAL
// of its working size.
//
// What a power loss can lose: with synchronous=FULL (the journal's default) nothing acknowledged,
// since every COMMIT fsyncs the WAL before WaitDurable returns, as long as the disk honours
// flushes. With NORMAL the commits since the last WAL checkpoint, acknowledged or not. A process
// crash (kill -9) loses nothing acknowledged with either.
#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/common/json_figure.h"
#include "runtime/service/journal/head_journal.h"

namespace {

using namespace gpupool::runtime;
using Clock = std::chrono::steady_clock;

struct Figures {
  double records_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "journal_bench: %s\n", what.c_str());
  std::exit(1);
}

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

void RemoveJournalFiles(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-lock"}) std::filesystem::remove(path + suffix);
}

// Recorded before each measurement in one batch, so that the WAL has grown to its working size
// (as in a head that has run a while) and the measured commits do not pay for growing it.
constexpr int kWarmUpRecords = 4000;

LeaseRecord BenchLease(const std::string& id) {
  return {.lease_id = id,
          .request_id = "req-" + id,
          .job_id = "job-bench",
          .node = "node-1",
          .account = {.team = "bench", .project = "p", .workload_class = "training",
                      .priority_class = "batch", .gpu_model = "H100-80GB", .gpus = 1},
          .lease = std::string(256, 'l'),  // about a LeaseGrant's Cap'n Proto encoding
          .granted_s = 1.7e9};
}

// Runs `clients` threads, each calling `one(client, i)` (record one lease and wait until it is
// durable) for `seconds`, and times every call.
template <typename One>
Figures Measure(int clients, double seconds, One one) {
  std::vector<std::vector<double>> us(clients);
  auto t0 = Clock::now();
  auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; Clock::now() < deadline; ++i) {
        auto start = Clock::now();
        one(c, i);
        us[c].push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> all;
  for (const auto& v : us) all.insert(all.end(), v.begin(), v.end());
  return {.records_per_s = all.size() / s, .p50_us = Pct(all, 0.5), .p99_us = Pct(all, 0.99)};
}

Figures GroupCommit(const std::string& path, const JournalOptions& options, int clients,
                    double seconds) {
  RemoveJournalFiles(path);
  auto journal = HeadJournal::Open(path, options);
  if (!journal.ok()) Die(journal.status().ToString());
  HeadJournal& j = **journal;
  for (int i = 0; i < kWarmUpRecords; ++i) j.RecordLease(BenchLease("warm-" + std::to_string(i)));
  if (absl::Status st = j.Flush(); !st.ok()) Die(st.ToString());
  Figures f = Measure(clients, seconds, [&](int c, int i) {
    std::string id = std::to_string(c) + "-" + std::to_string(i);
    if (absl::Status st = j.WaitDurable(j.RecordLease(BenchLease(id))); !st.ok()) {
      Die(st.ToString());
    }
  });
  journal->reset();
  RemoveJournalFiles(path);
  return f;
}

// The reference: what a head without group commit does, one BEGIN..COMMIT (one WAL fsync) per
// record, on a journal file of the same schema.
Figures OneTransactionPerRecord(const std::string& path, int clients, double seconds) {
  RemoveJournalFiles(path);
  if (auto journal = HeadJournal::Open(path); !journal.ok()) Die(journal.status().ToString());
  sqlite3* db = nullptr;
  auto check = [&](int rc, const char* what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE) Die(std::string(what) + ": " + sqlite3_errmsg(db));
  };
  check(sqlite3_open(path.c_str(), &db), "open");
  check(sqlite3_exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL", nullptr, nullptr,
                     nullptr), "pragmas");
  sqlite3_stmt *put = nullptr, *drop = nullptr;
  check(sqlite3_prepare_v2(db,
                           "INSERT OR REPLACE INTO leases(lease_id, request_id, job_id, node, "
                           "team, project, workload_class, priority_class, gpu_model, gpus, lease, "
                           "granted_s) VALUES(?1,?2,'job-bench','node-1','bench','p','training',"
                           "'batch','H100-80GB',1,?3,1.7e9)", -1, &put, nullptr), "prepare");
  check(sqlite3_prepare_v2(db, "DELETE FROM requests WHERE request_id = ?1", -1, &drop, nullptr),
        "prepare");
  const std::string blob(256, 'l');
  auto put_lease = [&](const std::string& id, const std::string& request) {
    sqlite3_bind_text(put, 1, id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(put, 2, request.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_blob(put, 3, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
    check(sqlite3_step(put), "insert");
    sqlite3_reset(put);
  };
  check(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), "begin");
  for (int i = 0; i < kWarmUpRecords; ++i) put_lease("warm-" + std::to_string(i), "none");
  check(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), "commit");
  std::mutex mu;  // one connection, one transaction at a time
  Figures f = Measure(clients, seconds, [&](int c, int i) {
    std::string id = std::to_string(c) + "-" + std::to_string(i), request = "req-" + id;
    std::lock_guard<std::mutex> lock(mu);
    check(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), "begin");
    put_lease(id, request);
    sqlite3_bind_text(drop, 1, request.c_str(), -1, SQLITE_TRANSIENT);
    check(sqlite3_step(drop), "delete");
    sqlite3_reset(drop);
    check(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), "commit");
  });
  sqlite3_finalize(put);
  sqlite3_finalize(drop);
  sqlite3_close(db);
  RemoveJournalFiles(path);
  return f;
}

// The disk's floor: one 4 KiB page overwritten in place and made durable with fdatasync, as a
// commit to a warmed-up WAL does (the WAL is reused from its start after each checkpoint, so its
// commits overwrite pages and change no file size: no metadata to flush).
Figures PlainFdatasync(const std::string& path, double seconds) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Die("open " + path + ": " + std::strerror(errno));
  const std::string page(4096, 'w');
  constexpr int kPages = 256;
  auto write_page = [&](int i) {
    if (::pwrite(fd, page.data(), page.size(), static_cast<off_t>(i % kPages) * 4096) !=
            static_cast<ssize_t>(page.size()) ||
        ::fdatasync(fd) != 0) {
      Die("write+fdatasync " + path + ": " + std::strerror(errno));
    }
  };
  for (int i = 0; i < kPages; ++i) write_page(i);  // the file at its full size first
  Figures f = Measure(1, seconds, [&](int, int i) { write_page(i); });
  ::close(fd);
  std::filesystem::remove(path);
  return f;
}

// The median of each figure over the rounds.
Figures Median(const std::vector<Figures>& runs) {
  auto median = [&](double Figures::*field) {
    std::vector<double> v;
    for (const Figures& f : runs) v.push_back(f.*field);
    return Pct(v, 0.5);
  };
  return {.records_per_s = median(&Figures::records_per_s), .p50_us = median(&Figures::p50_us),
          .p99_us = median(&Figures::p99_us)};
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  int clients = 16, rounds = 3;
  double seconds = 1.5;
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp != nullptr ? tmp : "/tmp";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strncmp(argv[i], "--seconds=", 10)) seconds = std::atof(argv[i] + 10);
    else if (!std::strncmp(argv[i], "--rounds=", 9)) rounds = std::atoi(argv[i] + 9);
    else if (!std::strncmp(argv[i], "--clients=", 10)) clients = std::atoi(argv[i] + 10);
    else if (!std::strncmp(argv[i], "--dir=", 6)) dir = argv[i] + 6;
    else { std::fprintf(stderr, "journal_bench: unknown flag %s\n", argv[i]); return 2; }
  }
  if (seconds <= 0 || rounds < 1 || clients < 1) {
    Die("--seconds, --rounds and --clients must be positive");
  }
  const std::string path = dir + "/journal_bench." + std::to_string(getpid()) + ".db";
  using std::chrono::microseconds;
  const JournalOptions defaults{};
  const JournalOptions no_window{.group_commit_window = microseconds(0)};
  const JournalOptions normal{.sync = JournalSync::kNormal};

  // Each scenario's figures are printed beside those of its reference (-1: it is one).
  struct Scenario {
    const char* name;
    const char* key;  // for --json
    int clients;
    int reference;
    std::function<Figures()> run;
    std::vector<Figures> runs = {};
  };
  std::vector<Scenario> scenarios = {
      {"one txn per record, FULL", "one_txn_per_record", clients, -1,
       [&] { return OneTransactionPerRecord(path, clients, seconds); }},
      {"group commit, FULL (default)", "group_full", clients, 0,
       [&] { return GroupCommit(path, defaults, clients, seconds); }},
      {"group commit, FULL, no window", "group_full_no_window", clients, 0,
       [&] { return GroupCommit(path, no_window, clients, seconds); }},
      {"group commit, NORMAL", "group_normal", clients, 0,
       [&] { return GroupCommit(path, normal, clients, seconds); }},
      {"4 KiB overwrite+fdatasync", "overwrite_4k_fdatasync", 1, -1,
       [&] { return PlainFdatasync(path + ".fsync", seconds); }},
      {"lone client, FULL (default)", "lone_full", 1, 4,
       [&] { return GroupCommit(path, defaults, 1, seconds); }},
      {"lone client, FULL, no window", "lone_full_no_window", 1, 4,
       [&] { return GroupCommit(path, no_window, 1, seconds); }},
  };
  // Rounds alternate the scenarios, so that a disk that is slower for a while (other tenants)
  // slows every scenario alike; the medians are reported.
  for (int r = 0; r < rounds; ++r) {
    for (Scenario& sc : scenarios) sc.runs.push_back(sc.run());
  }

  if (!json) {
    std::printf("%-34s %7s %12s %10s %10s  %s\n", "scenario", "clients", "records/s", "p50 us",
                "p99 us", "records/s vs reference");
  }
  for (const Scenario& sc : scenarios) {
    const Figures f = Median(sc.runs);
    if (!json) {
      std::printf("%-34s %7d %12.0f %10.0f %10.0f  ", sc.name, sc.clients, f.records_per_s,
                  f.p50_us, f.p99_us);
      if (sc.reference < 0) {
        std::printf("(reference)\n");
      } else {
        std::printf("%.1fx %s\n", f.records_per_s / Median(scenarios[sc.reference].runs).records_per_s,
                    scenarios[sc.reference].key);
      }
      continue;
    }
    if (sc.reference < 0) continue;
    const Scenario& ref = scenarios[sc.reference];
    const Figures rf = Median(ref.runs);
    const std::pair<const char*, double Figures::*> metrics[] = {
        {"records_per_s", &Figures::records_per_s},
        {"durable_p50_us", &Figures::p50_us},
        {"durable_p99_us", &Figures::p99_us}};
    for (const auto& [metric, field] : metrics) {
      std::string name = std::string(sc.key) + "_" + metric;
      std::string ref_name = std::string(ref.key) + "_" + metric;
      gpupool::bench::PrintJsonFigure("journal", name.c_str(), f.*field,
                                      field == &Figures::records_per_s ? "records/s" : "us",
                                      ref_name.c_str(), rf.*field);
    }
  }
  if (json) return 0;
  std::printf("(medians of %d alternating rounds of %.1f s each; journal files in %s; latency = "
              "RecordLease until WaitDurable returns; NORMAL is not power-safe)\n",
              rounds, seconds, dir.c_str());
  return 0;
}
