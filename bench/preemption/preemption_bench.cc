// Preemption to running again on another GPU (issue 5, "Targets": <= 2 s plus the time to load the
// state).
//
// A checkpointable task holding `--state-mib` of state runs on one of two simulated GPUs, at real
// time (clock speed 1). Its GPU starts draining (a double-bit ECC error, as NVML would report):
// the pool revokes the lease with the class's grace period, the task snapshots its state at its
// next safe point and stops, the runtime queues it again, the pool grants the other GPU, and the
// task loads its snapshot and runs. Measured per round, real time:
//   total    from the revocation to the task running again (its state loaded);
//   snapshot the stop snapshot (synchronous, durable) inside that;
//   load     loading the snapshot inside that;
//   other    total - snapshot - load: the runtime's and the pool's own part (target: <= 2 s).
// Baseline in the same run: a plain write+fsync and a plain read of the same bytes in the same
// directory.
//
//   build/bench/preemption/preemption_bench [--state-mib N] [--rounds N] [--json]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpupool/gpupool.h"
#include "pool/devices/simulated_driver.h"
#include "runtime/api/testing_seam.h"
#include "runtime/service/pool_service.h"
#include "runtime/tasks/job_runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int64_t> state_mib{256};
std::atomic<int> runs_started{0};
std::atomic<int64_t> load_ns{0};
std::atomic<int64_t> resumed_at_ns{0};  // steady clock, when the resumed run had its state back
std::atomic<bool> finish{false};

int64_t NowNs() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

int Train(gpupool::TaskContext& ctx) {
  std::vector<char> state(size_t(state_mib.load()) << 20);
  std::memset(state.data(), 1, state.size());
  int64_t t0 = NowNs();
  int64_t first = ctx.Checkpointable({gpupool::StateRegion::Of(state)});
  if (ctx.resumed()) {
    load_ns = NowNs() - t0;
    resumed_at_ns = NowNs();
  }
  runs_started.fetch_add(1);
  for (int64_t s = first;; ++s) {
    state[size_t(s) % state.size()] ^= 1;  // a "training step"
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (finish.load() && ctx.resumed()) return static_cast<int>(s);
    ctx.Step();
  }
}
GPUPOOL_REMOTE(Train);

double Seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

// Plain write+fsync and read of `bytes`, the baseline.
std::pair<double, double> PlainWriteAndRead(const std::string& dir, size_t bytes) {
  std::vector<char> buf(bytes, 3);
  std::string path = dir + "/plain.bin";
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  size_t off = 0;
  while (off < bytes) off += static_cast<size_t>(::write(fd, buf.data() + off, bytes - off));
  ::fsync(fd);
  ::close(fd);
  auto t1 = Clock::now();
  fd = ::open(path.c_str(), O_RDONLY);
  off = 0;
  while (off < bytes) off += static_cast<size_t>(::read(fd, buf.data() + off, bytes - off));
  ::close(fd);
  auto t2 = Clock::now();
  std::filesystem::remove(path);
  return {std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count()};
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") json = true;
    else if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--state-mib" && i + 1 < argc) state_mib = std::atoll(argv[++i]);
    else {
      std::fprintf(stderr, "preemption_bench: unknown flag %s (--state-mib N --rounds N --json)\n", a.c_str());
      return 2;
    }
  }
  std::string dir = (std::filesystem::temp_directory_path() / ("gpupool-preemption-bench-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);

  std::vector<double> totals, snapshots, loads, others, plain_writes, plain_reads;
  for (int r = 0; r < rounds; ++r) {
    std::mutex mu;
    int64_t revoked_at = 0, snapshot_ns = 0;
    std::string granted_detail;
    gpupool::RuntimeOptions o;
    o.simulate = "2xH100-80GB";
    o.checkpoint_dir = dir;
    o.lease_linger_ms = 20;
    o.on_event = [&](const gpupool::RuntimeEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (e.kind == "lease-revoked" && revoked_at == 0) revoked_at = NowNs();
      if (e.kind == "task-preempted" && snapshot_ns == 0) snapshot_ns = NowNs() - revoked_at;
      if (e.kind == "lease-granted" && granted_detail.empty()) granted_detail = e.detail;
    };
    runs_started = 0;
    resumed_at_ns = 0;
    finish = false;
    gpupool::Runtime rt = gpupool::Init(o);
    auto ref = gpupool::Task(Train).Gpus(1).Submit();
    while (runs_started.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::string detail;
    {
      std::lock_guard<std::mutex> lock(mu);
      detail = granted_detail;  // "node-0/GPU 1 whole"
    }
    size_t slash = detail.find("/GPU ");
    gpupool::pool::GpuRef gpu{detail.substr(0, slash), std::stoi(detail.substr(slash + 5))};
    auto& driver = dynamic_cast<gpupool::pool::SimulatedDriver&>(*gpupool::InternalsForTesting(rt).embedded_pool()->driver());
    if (!driver.InjectEccError(gpu, gpupool::pool::EccErrorKind::kDoubleBit).ok()) {
      std::fprintf(stderr, "preemption_bench: could not inject the ECC error\n");
      return 1;
    }
    gpupool::InternalsForTesting(rt).embedded_pool()->PollHealthNow();
    auto deadline = Clock::now() + std::chrono::seconds(120);
    while (resumed_at_ns.load() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (resumed_at_ns.load() == 0) {
      std::fprintf(stderr, "preemption_bench: the task did not resume within 120 s\n");
      return 1;
    }
    finish = true;
    gpupool::Get(ref);
    double total, snap, load;
    {
      std::lock_guard<std::mutex> lock(mu);
      total = Seconds(resumed_at_ns.load() - revoked_at);
      snap = Seconds(snapshot_ns);
    }
    load = Seconds(load_ns.load());
    totals.push_back(total);
    snapshots.push_back(snap);
    loads.push_back(load);
    others.push_back(total - snap - load);
    auto [w, rd] = PlainWriteAndRead(dir, size_t(state_mib.load()) << 20);
    plain_writes.push_back(w);
    plain_reads.push_back(rd);
  }
  std::filesystem::remove_all(dir);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double total = median(totals), snap = median(snapshots), load = median(loads), other = median(others);
  double pw = median(plain_writes), pr = median(plain_reads);
  if (json) {
    std::printf("{\"bench\": \"preemption\", \"state_mib\": %lld, \"rounds\": %d, \"total_s\": %.4f, "
                "\"snapshot_s\": %.4f, \"load_s\": %.4f, \"other_s\": %.4f, \"plain_write_fsync_s\": %.4f, "
                "\"plain_read_s\": %.4f, \"target_other_s\": 2.0}\n",
                static_cast<long long>(state_mib.load()), rounds, total, snap, load, other, pw, pr);
  } else {
    std::printf("# preemption to running again on the other GPU: %lld MiB of state, median of %d rounds, real time\n",
                static_cast<long long>(state_mib.load()), rounds);
    std::printf("%-34s %10s   %s\n", "metric", "seconds", "baseline (same run)");
    std::printf("%-34s %10.4f\n", "revoked -> running again (total)", total);
    std::printf("%-34s %10.4f   plain write+fsync %.4f s (%.0f%%)\n", "  stop snapshot (durable)", snap, pw, 100 * pw / snap);
    std::printf("%-34s %10.4f   plain read %.4f s\n", "  load on the new GPU", load, pr);
    std::printf("%-34s %10.4f   target <= 2 s\n", "  runtime + pool (the rest)", other);
  }
  return 0;
}
