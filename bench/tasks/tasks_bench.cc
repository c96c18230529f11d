// The task runtime on the embedded pool (simulated GPUs when the machine has none), each figure
// beside a baseline measured in the same run (issue 4, "Targets"):
//   1. no-op task throughput, one submitter, submit N then Get all  vs a plain thread pool
//   2. synchronous round trip, submit then Get one at a time         vs the thread pool's
//   3. Put then Get of 100 MiB host objects (copy and move)          vs memcpy of 100 MiB
//   4. 1,000,000 tasks queued behind one gate: RSS per queued task, all complete, RSS after drop
// Ray's figures come from bench/tasks/ray_noop.py, run by `bench/run tasks` when Ray installs.
//
//   bench/run tasks [--json]
//   build/bench/tasks/tasks_bench [--json] [--tasks N] [--sync N] [--queued N] [--put-reps N]
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/common/figure_table.h"
#include "bench/common/json_figure.h"
#include "gpupool/gpupool.h"

namespace {

void Noop() {}
std::atomic<bool> gate_open{false};
int GateTask(int x) {
  while (!gate_open.load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return x;
}
int Behind(int x) { return x; }

GPUPOOL_REMOTE(Noop);
GPUPOOL_REMOTE(GateTask);
GPUPOOL_REMOTE(Behind);

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

long RssBytes() {
  long pages_total = 0, pages_rss = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages_total, &pages_rss) != 2) pages_rss = 0;
  std::fclose(f);
  return pages_rss * sysconf(_SC_PAGESIZE);
}

// The baseline: std::thread workers over a mutex/condvar queue of std::function.
class ThreadPool {
 public:
  explicit ThreadPool(int n) {
    for (int i = 0; i < n; ++i) workers_.emplace_back([this] { Loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  void Submit(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back(std::move(f));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> workers_;
  bool stop_ = false;
};

// A completion the submitter can wait on, as a Get waits on a result.
struct Done {
  std::mutex mu;
  std::condition_variable cv;
  long count = 0;
  void Add() {
    std::lock_guard<std::mutex> l(mu);
    if (++count, true) cv.notify_all();
  }
  void WaitFor(long n) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return count >= n; });
  }
};

bool json = false;
std::vector<gpupool::bench::Figure> rows;
void Report(const std::string& metric, double value, const std::string& unit,
            const std::string& reference, double reference_value, const std::string& note) {
  rows.push_back({metric, value, unit, reference, reference_value, note});
  if (json) {
    gpupool::bench::PrintJsonFigure("tasks", metric.c_str(), value, unit.c_str(),
                                    reference.c_str(), reference_value);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  long n_tasks = 1000000, n_sync = 100000, n_queued = 1000000;
  int put_reps = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> long {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "tasks_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::atol(argv[++i]);
    };
    if (a == "--json") json = true;
    else if (a == "--tasks") n_tasks = next();
    else if (a == "--sync") n_sync = next();
    else if (a == "--queued") n_queued = next();
    else if (a == "--put-reps") put_reps = static_cast<int>(next());
    else {
      std::fprintf(stderr, "tasks_bench: unknown flag %s (--json --tasks N --sync N --queued N --put-reps N)\n",
                   a.c_str());
      return 2;
    }
  }
  const int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  gpupool::RuntimeOptions options;  // simulated pool by default on a machine with no GPU
  gpupool::Runtime runtime = gpupool::Init(options);
  if (!json && !runtime.notice().empty()) std::printf("# %s\n", runtime.notice().c_str());
  if (!json) std::printf("# embedded pool, cpu_workers default (%d hardware threads)\n", workers);

  // 1. No-op throughput: submit N, then Get all.
  {
    // warm-up
    for (int i = 0; i < 1000; ++i) gpupool::Get(gpupool::Submit(Noop));
    std::vector<gpupool::ObjectRef<gpupool::Nothing>> refs;
    refs.reserve(n_tasks);
    auto t0 = Clock::now();
    for (long i = 0; i < n_tasks; ++i) refs.push_back(gpupool::Submit(Noop));
    auto t1 = Clock::now();
    for (const auto& r : refs) gpupool::Get(r);
    auto t2 = Clock::now();
    refs.clear();
    auto t3 = Clock::now();
    double gp = n_tasks / Seconds(t0, t2);
    double submit_rate = n_tasks / Seconds(t0, t1);

    double pool_rate;
    {
      ThreadPool pool(workers);
      Done done;
      auto p0 = Clock::now();
      for (long i = 0; i < n_tasks; ++i) pool.Submit([&done] { done.Add(); });
      done.WaitFor(n_tasks);
      auto p1 = Clock::now();
      pool_rate = n_tasks / Seconds(p0, p1);
    }
    Report("noop_tasks_per_s", gp, "tasks/s", "thread_pool_noop_tasks_per_s", pool_rate,
           "target >= 200,000/s; ratio " + std::to_string(gp / pool_rate).substr(0, 5) + "x the pool");
    Report("noop_submit_only_per_s", submit_rate, "tasks/s", "thread_pool_noop_tasks_per_s",
           pool_rate, "Submit calls alone; refs dropped in " +
                          std::to_string(Seconds(t2, t3)).substr(0, 5) + " s");
  }

  // 2. Synchronous round trip: submit, Get, one at a time.
  {
    auto t0 = Clock::now();
    for (long i = 0; i < n_sync; ++i) gpupool::Get(gpupool::Submit(Noop));
    auto t1 = Clock::now();
    double gp = n_sync / Seconds(t0, t1);
    double pool_rate;
    {
      ThreadPool pool(workers);
      Done done;
      auto p0 = Clock::now();
      for (long i = 0; i < n_sync; ++i) {
        pool.Submit([&done] { done.Add(); });
        done.WaitFor(i + 1);
      }
      auto p1 = Clock::now();
      pool_rate = n_sync / Seconds(p0, p1);
    }
    Report("sync_round_trips_per_s", gp, "1/s", "thread_pool_round_trips_per_s", pool_rate,
           "target >= 50,000/s; mean " + std::to_string(1e6 / gp).substr(0, 6) + " us");
  }

  // 3. Put then Get of 100 MiB host objects.
  {
    const size_t bytes = size_t(100) << 20;
    const double mib = 100.0;
    std::vector<char> src(bytes);
    std::memset(src.data(), 7, bytes);
    std::vector<char> dst(bytes);
    std::memset(dst.data(), 1, bytes);
    // memcpy into an already-touched buffer
    double best_memcpy = 1e9, best_memcpy_fresh = 1e9, best_copy = 1e9, best_move = 1e9;
    long sink = 0;
    for (int r = 0; r < put_reps; ++r) {
      src[r] = char(r);
      auto t0 = Clock::now();
      std::memcpy(dst.data(), src.data(), bytes);
      auto t1 = Clock::now();
      sink += dst[bytes - 1 - r];
      best_memcpy = std::min(best_memcpy, Seconds(t0, t1));
    }
    // A plain std::vector copy. The first one in the process gets new memory and pays the page
    // faults; later ones reuse the freed block, as Put does (RuntimeOptions::host_memory_reuse_mib).
    double first_vector_copy = 0;
    for (int r = 0; r < put_reps; ++r) {
      auto t0 = Clock::now();
      std::vector<char> fresh(src);
      auto t1 = Clock::now();
      sink += fresh[r];
      if (r == 0) first_vector_copy = Seconds(t0, t1);
      best_memcpy_fresh = std::min(best_memcpy_fresh, Seconds(t0, t1));
    }
    for (int r = 0; r < put_reps; ++r) {
      auto t0 = Clock::now();
      gpupool::ObjectRef<std::vector<char>> ref = gpupool::Put(src);  // copied once
      gpupool::View<std::vector<char>> v = gpupool::Get(ref);
      auto t1 = Clock::now();
      if (v->size() != bytes || v->data() == src.data()) {
        std::fprintf(stderr, "tasks_bench: Put by copy returned the wrong object\n");
        return 1;
      }
      sink += (*v)[r];
      best_copy = std::min(best_copy, Seconds(t0, t1));
    }
    for (int r = 0; r < put_reps; ++r) {
      std::vector<char> mine(src);  // not timed
      const char* data = mine.data();
      auto t0 = Clock::now();
      gpupool::ObjectRef<std::vector<char>> ref = gpupool::Put(std::move(mine));
      gpupool::View<std::vector<char>> v = gpupool::Get(ref);
      auto t1 = Clock::now();
      if (v->size() != bytes || v->data() != data) {
        std::fprintf(stderr, "tasks_bench: Put by move copied the buffer\n");
        return 1;
      }
      sink += (*v)[r];
      best_move = std::min(best_move, Seconds(t0, t1));
    }
    double memcpy_bw = mib / best_memcpy / 1024.0;  // GiB/s
    double fresh_bw = mib / best_memcpy_fresh / 1024.0;
    double copy_bw = mib / best_copy / 1024.0;
    double move_bw = mib / best_move / 1024.0;
    Report("put_get_copy_100mib_gib_per_s", copy_bw, "GiB/s", "memcpy_touched_100mib_gib_per_s",
           memcpy_bw,
           "target >= 80% of memcpy; " + std::to_string(100 * copy_bw / memcpy_bw).substr(0, 5) +
               "%, best of " + std::to_string(put_reps) + " (freed blocks reused)");
    Report("put_get_move_100mib_gib_per_s", move_bw, "GiB/s", "memcpy_touched_100mib_gib_per_s",
           memcpy_bw, "no copy; " + std::to_string(best_move * 1e6).substr(0, 6) + " us per Put+Get");
    Report("vector_copy_100mib_gib_per_s", fresh_bw, "GiB/s", "memcpy_touched_100mib_gib_per_s",
           memcpy_bw, "baseline detail: std::vector copy; the process's first, into new memory, ran at " +
                          std::to_string(mib / first_vector_copy / 1024.0).substr(0, 5) + " GiB/s (page faults)");
    if (sink == 42) std::printf("#\n");
  }

  // 4. N tasks queued behind one gate.
  {
    malloc_trim(0);
    long rss0 = RssBytes();
    gate_open = false;
    std::vector<gpupool::ObjectRef<int>> refs;
    refs.reserve(n_queued);
    long rss_reserved = RssBytes();  // reserve() leaves the pages untouched
    auto t0 = Clock::now();
    {
      gpupool::ObjectRef<int> gate = gpupool::Submit(GateTask, 1);
      for (long i = 0; i < n_queued; ++i) refs.push_back(gpupool::Submit(Behind, gate));
    }
    auto t1 = Clock::now();
    long rss_queued = RssBytes();
    gpupool::RuntimeStats queued_stats = runtime.Stats();
    uint64_t queued_stat = queued_stats.queued_tasks + queued_stats.waiting_for_dependencies;
    double per_task = double(rss_queued - rss_reserved) / n_queued;
    gate_open = true;
    long ok = 0;
    for (const auto& r : refs) ok += (*gpupool::Get(r) == 1);
    auto t2 = Clock::now();
    long rss_done = RssBytes();
    refs.clear();
    refs.shrink_to_fit();
    long rss_dropped = RssBytes();
    malloc_trim(0);
    long rss_trimmed = RssBytes();
    uint64_t live = runtime.Stats().live_objects;
    Report("queued_task_rss_bytes", per_task, "B/task", "target_bytes_per_task", 1024,
           std::to_string(n_queued) + " queued (Stats: queued + waiting for dependencies " + std::to_string(queued_stat) +
               "), submitted in " + std::to_string(Seconds(t0, t1)).substr(0, 5) +
               " s; includes the caller's 8 B ObjectRef per task");
    Report("queued_tasks_completed", double(ok), "tasks", "queued_tasks_submitted", double(n_queued),
           "drained in " + std::to_string(Seconds(t1, t2)).substr(0, 5) + " s");
    Report("rss_after_refs_dropped_mib", rss_dropped / 1048576.0, "MiB", "rss_before_queue_mib",
           rss0 / 1048576.0,
           "peak " + std::to_string(rss_done / 1048576).substr(0, 6) + " MiB; after malloc_trim " +
               std::to_string(rss_trimmed / 1048576) + " MiB; live_objects " + std::to_string(live));
    Report("rss_after_drop_and_malloc_trim_mib", rss_trimmed / 1048576.0, "MiB", "rss_before_queue_mib",
           rss0 / 1048576.0, "freed objects handed back to the OS by malloc_trim(0)");
    if (ok != n_queued) {
      std::fprintf(stderr, "tasks_bench: only %ld of %ld queued tasks completed\n", ok, n_queued);
      return 1;
    }
  }

  if (!json) gpupool::bench::PrintFigureTable(rows);
  return 0;
}
