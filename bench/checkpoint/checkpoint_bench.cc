// Checkpoint store figures, each beside its baseline measured in the same run (issue 5 targets):
//
//   1. Snapshot write throughput against a plain write+fsync of the same bytes to the same
//      directory (target: >= 80%).
//   2. Checkpoint overhead of a training loop: a CPU loop updating `state` floats every step,
//      checkpointed once per interval, synchronously and asynchronously, against the same loop
//      without checkpoints (targets: <= 3.5% slowdown; aim <= 1% asynchronous).
//
// The loop is 1 GiB of state checkpointed once a minute. By default this runs it scaled
// down 8x in both size and interval (128 MiB every 7.5 s), which keeps the ratio of write time to
// interval (what the slowdown is made of) while the whole bench stays near 3 minutes; the table
// prints the ratio and what it would be at 1 GiB a minute. `--state-mib=1024 --interval-s=60
// --duration-s=120 --rounds=1` runs the real thing (about 7 minutes).
//
//   bench/run checkpoint [--json] [--dir=PATH] [--sizes=64,256,1024] [--reps=3]
//                        [--state-mib=128] [--interval-s=7.5] [--duration-s=15] [--rounds=2]
//                        [--writer-nice=10] [--no-throughput] [--no-loop]
//
// Flags take the --name=value form because bench/run forwards only arguments starting with --.
// The directory defaults to $TMPDIR (or /tmp); its file system type is printed, since a tmpfs
// there would make "disk" figures meaningless. Everything written is removed at the end.
#include <fcntl.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/common/json_figure.h"
#include "checkpoint/async_writer.h"
#include "checkpoint/directory_backend.h"
#include "checkpoint/snapshot_store.h"
#include "checkpoint/staging_pool.h"

namespace gpupool::checkpoint {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1 << 20;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Flags {
  bool json = false;
  std::string dir;
  std::vector<uint64_t> sizes_mib = {64, 256, 1024};
  int reps = 3;
  uint64_t state_mib = 128;
  double interval_s = 7.5;
  double duration_s = 15;
  int rounds = 2;
  int writer_nice = AsyncWriterOptions{}.writer_nice;
  bool throughput = true;
  bool loop = true;
};

[[noreturn]] void Usage(const std::string& bad) {
  std::fprintf(stderr,
               "checkpoint_bench: bad flag %s\n  flags: --json --dir=PATH --sizes=MiB,MiB,... "
               "--reps=N --state-mib=N --interval-s=S --duration-s=S --rounds=N --writer-nice=N "
               "--no-throughput "
               "--no-loop\n",
               bad.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string name = a, value;
    if (size_t eq = a.find('='); eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    }
    auto number = [&](double lo) {
      double v;
      if (!absl::SimpleAtod(value, &v) || v < lo) Usage(a);
      return v;
    };
    if (name == "--json") f.json = true;
    else if (name == "--no-throughput") f.throughput = false;
    else if (name == "--no-loop") f.loop = false;
    else if (name == "--dir" && !value.empty()) f.dir = value;
    else if (name == "--reps") f.reps = static_cast<int>(number(1));
    else if (name == "--rounds") f.rounds = static_cast<int>(number(1));
    else if (name == "--writer-nice") f.writer_nice = static_cast<int>(number(0));
    else if (name == "--state-mib") f.state_mib = static_cast<uint64_t>(number(1));
    else if (name == "--interval-s") f.interval_s = number(0.1);
    else if (name == "--duration-s") f.duration_s = number(0.1);
    else if (name == "--sizes") {
      f.sizes_mib.clear();
      for (absl::string_view s : absl::StrSplit(value, ',')) {
        uint64_t v;
        if (!absl::SimpleAtoi(s, &v) || v == 0) Usage(a);
        f.sizes_mib.push_back(v);
      }
    } else {
      Usage(a);
    }
  }
  if (f.dir.empty()) {
    f.dir = (std::filesystem::temp_directory_path() /
             absl::StrCat("gpupool-checkpoint-bench-", ::getpid()))
                .string();
  }
  return f;
}

std::string FileSystemType(const std::string& dir) {
  struct statfs s;
  if (::statfs(dir.c_str(), &s) != 0) return "unknown";
  switch (s.f_type) {
    case 0xEF53: return "ext2/3/4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs (not a disk!)";
    case 0x6969: return "nfs";
    case 0x794C7630: return "overlayfs";
    default: return absl::StrCat("0x", absl::Hex(s.f_type));
  }
}

void Fill(std::span<std::byte> out, uint64_t seed) {
  auto* words = reinterpret_cast<uint64_t*>(out.data());
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < out.size() / 8; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    words[i] = x;
  }
}

void Die(const absl::Status& s) {
  std::fprintf(stderr, "checkpoint_bench: %s\n", s.ToString().c_str());
  std::exit(1);
}

void PlainWriteFsyncPieces(const std::string& path, std::span<const std::span<const std::byte>> pieces) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Die(absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno))));
  for (std::span<const std::byte> piece : pieces) {
    for (size_t done = 0; done < piece.size();) {
      ssize_t n = ::write(fd, piece.data() + done, piece.size() - done);
      if (n < 0) Die(absl::InternalError(absl::StrCat("write ", path, ": ", std::strerror(errno))));
      done += static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    Die(absl::InternalError(absl::StrCat("fsync ", path, ": ", std::strerror(errno))));
  }
}

double PlainWriteFsync(const std::string& path, std::span<const std::byte> data) {
  ::sync();
  auto t0 = Clock::now();
  PlainWriteFsyncPieces(path, std::span<const std::span<const std::byte>>(&data, 1));
  double s = Seconds(t0, Clock::now());
  ::unlink(path.c_str());
  return s;
}

double SnapshotWrite(SnapshotStore& store, std::span<const std::byte> data, int64_t step) {
  // Four pieces, as a task's registered buffers would be handed over.
  const size_t q = data.size() / 4;
  std::span<const std::byte> pieces[] = {data.subspan(0, q), data.subspan(q, q),
                                         data.subspan(2 * q, q), data.subspan(3 * q)};
  ::sync();
  auto t0 = Clock::now();
  absl::StatusOr<SnapshotInfo> w = store.Write("bench-throughput", step, "", pieces);
  double s = Seconds(t0, Clock::now());
  if (!w.ok()) Die(w.status());
  if (absl::Status r = store.Remove("bench-throughput"); !r.ok()) Die(r);
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void Throughput(const Flags& f, SnapshotStore& store) {
  if (!f.json) {
    std::printf("\nSnapshot write vs plain write+fsync, same directory, median of >= %d alternating "
                "runs (MB/s = 1e6 B/s)\n",
                f.reps);
    std::printf("%10s %14s %14s %8s   target\n", "size", "snapshot MB/s", "plain MB/s", "ratio");
  }
  int64_t step = 0;
  for (uint64_t mib : f.sizes_mib) {
    std::vector<std::byte> data(mib * kMiB);
    Fill(data, mib);
    std::vector<double> snap, plain;
    // Small sizes are over quickly and vary most (a journal commit is a larger share): give them
    // more repetitions, about 1 GiB written per method, at most 9.
    const int reps = std::max<int>(f.reps, std::min<int>(9, static_cast<int>(1024 / mib)));
    for (int r = 0; r < reps; ++r) {
      // Alternate which goes first so neither always inherits the other's writeback.
      if (r % 2 == 0) {
        plain.push_back(PlainWriteFsync(f.dir + "/plain.bin", data));
        snap.push_back(SnapshotWrite(store, data, ++step));
      } else {
        snap.push_back(SnapshotWrite(store, data, ++step));
        plain.push_back(PlainWriteFsync(f.dir + "/plain.bin", data));
      }
    }
    const double snap_mbps = data.size() / Median(snap) / 1e6;
    const double plain_mbps = data.size() / Median(plain) / 1e6;
    const std::string metric = absl::StrCat("snapshot_write_MBps_", mib, "MiB");
    const std::string reference = absl::StrCat("plain_write_fsync_MBps_", mib, "MiB");
    if (f.json) {
      bench::PrintJsonFigure("checkpoint", metric.c_str(), snap_mbps, "MB/s", reference.c_str(),
                             plain_mbps);
    } else {
      std::printf("%7llu MiB %14.1f %14.1f %7.1f%%   >= 80%%\n",
                  static_cast<unsigned long long>(mib), snap_mbps, plain_mbps,
                  100 * snap_mbps / plain_mbps);
    }
  }
}

// ----------------------------------------------------------------------------------------------
// The training loop.

// kPlain is the reference for kSync: the same bytes written with a plain write+fsync, so the
// store's own cost can be told from what any write costs on this machine.
enum class Mode { kNone, kPlain, kSync, kAsync };

struct LoopResult {
  double seconds = 0;
  int checkpoints = 0;
  double checkpoint_call_s = 0;  // time the loop spent inside checkpoint calls
  double max_call_s = 0;
  int refused = 0;  // async Submits refused for lack of staging room
  std::vector<double> step_s;  // training steps only, checkpoint calls excluded
  double train_s = 0;          // their sum
};

// The model: weights and optimizer momentum, two equal tensors handed over as two pieces. One
// allocation, pre-faulted with huge pages requested and reused by every run, so that no run
// differs from another in page faults or TLB reach (first tries with fresh std::vectors per run
// swung the loop time by 10%).
struct State {
  std::span<float> w, m;
  void Reset() {
    std::fill(w.begin(), w.end(), 0.25f);
    std::fill(m.begin(), m.end(), 0.0f);
  }
};

// One step: a momentum-SGD-like update of every parameter, memory-bound as real optimizers are.
void TrainStep(State& state, int64_t step) {
  const float lr = 1e-3f / (1.0f + 1e-4f * static_cast<float>(step));
  const float target = std::sin(static_cast<float>(step) * 0.01f);
  float* __restrict wp = state.w.data();
  float* __restrict mp = state.m.data();
  const size_t n = state.w.size();
  for (size_t i = 0; i < n; ++i) {
    const float grad = wp[i] * 0.5f - target;
    mp[i] = 0.9f * mp[i] + grad;
    wp[i] -= lr * mp[i];
  }
}

LoopResult RunLoop(Mode mode, int64_t steps, int64_t steps_per_interval, State& state,
                   SnapshotStore& store, AsyncSnapshotWriter* writer, const std::string& task,
                   const std::string& plain_path = "") {
  state.Reset();
  LoopResult r;
  const auto t0 = Clock::now();
  r.step_s.reserve(steps);
  for (int64_t step = 1; step <= steps; ++step) {
    const auto s0 = Clock::now();
    TrainStep(state, step);
    r.step_s.push_back(Seconds(s0, Clock::now()));
    // Checkpoints at the middle of each interval, so each one has half an interval of training
    // after it in which its background write can interfere, in every mode alike.
    if (mode == Mode::kNone || (step + steps_per_interval / 2) % steps_per_interval != 0) continue;
    std::span<const std::byte> pieces[] = {std::as_bytes(state.w), std::as_bytes(state.m)};
    const auto c0 = Clock::now();
    if (mode == Mode::kPlain) {
      PlainWriteFsyncPieces(plain_path, pieces);
    } else if (mode == Mode::kSync) {
      if (auto s = store.Write(task, step, "", pieces); !s.ok()) Die(s.status());
    } else {
      auto f = writer->Submit(task, step, "", pieces);
      if (!f.ok()) {
        if (!absl::IsResourceExhausted(f.status())) Die(f.status());
        ++r.refused;
      }
    }
    const double c = Seconds(c0, Clock::now());
    ++r.checkpoints;
    r.checkpoint_call_s += c;
    r.max_call_s = std::max(r.max_call_s, c);
  }
  r.seconds = Seconds(t0, Clock::now());
  // Keep the compiler from discarding the arithmetic.
  if (state.w[state.w.size() / 3] == 12345.0f) std::printf(" ");
  return r;
}

void TrainingLoop(const Flags& f, SnapshotStore& store) {
  const uint64_t state_bytes = f.state_mib * kMiB;
  absl::StatusOr<std::unique_ptr<StagingBuffer>> memory =
      StagingBuffer::Allocate(RoundUpToGranule(state_bytes));
  if (!memory.ok()) Die(memory.status());
  const size_t floats = state_bytes / 2 / sizeof(float);
  auto* base_ptr = reinterpret_cast<float*>((*memory)->data());
  State state{.w = std::span(base_ptr, floats), .m = std::span(base_ptr + floats, floats)};
  state.Reset();

  // Calibrate: steps that fit in one interval without checkpoints.
  int64_t steps_per_interval;
  {
    const auto t0 = Clock::now();
    int64_t n = 0;
    while (Seconds(t0, Clock::now()) < std::min(3.0, f.interval_s)) TrainStep(state, ++n);
    steps_per_interval =
        std::max<int64_t>(2, std::llround(n * f.interval_s / Seconds(t0, Clock::now())));
  }
  const int64_t steps = std::max<int64_t>(
      steps_per_interval, std::llround(steps_per_interval * f.duration_s / f.interval_s));

  AsyncSnapshotWriter writer(&store, {.staging_budget_bytes = 2 * state_bytes,
                                      .writer_nice = f.writer_nice});
  if (absl::Status s = writer.Prewarm(state_bytes); !s.ok()) Die(s);

  // Rounds of (none, sync, async), interleaved so that drift on a shared machine lands on every
  // mode alike; each mode's figure is its mean over the rounds.
  std::vector<LoopResult> none_runs, plain_runs, sync_runs, async_runs;
  const std::string plain_path = f.dir + "/plain-loop.bin";
  for (int round = 0; round < f.rounds; ++round) {
    none_runs.push_back(RunLoop(Mode::kNone, steps, steps_per_interval, state, store, nullptr, ""));
    plain_runs.push_back(RunLoop(Mode::kPlain, steps, steps_per_interval, state, store, nullptr, "",
                                 plain_path));
    sync_runs.push_back(RunLoop(Mode::kSync, steps, steps_per_interval, state, store, nullptr,
                                "bench-loop-sync"));
    async_runs.push_back(RunLoop(Mode::kAsync, steps, steps_per_interval, state, store, &writer,
                                 "bench-loop-async"));
    // The async loop's last write may still be going: finish it before the next run.
    if (absl::Status s = writer.FlushAll(); !s.ok()) Die(s);
  }
  writer.Shutdown().IgnoreError();
  store.Remove("bench-loop-sync").IgnoreError();
  store.Remove("bench-loop-async").IgnoreError();
  std::filesystem::remove(plain_path);

  auto mean = [](const std::vector<LoopResult>& runs) {
    LoopResult m;
    for (const LoopResult& r : runs) {
      m.seconds += r.seconds / runs.size();
      m.checkpoints += r.checkpoints;
      m.checkpoint_call_s += r.checkpoint_call_s;
      m.max_call_s = std::max(m.max_call_s, r.max_call_s);
      m.refused += r.refused;
      double train = 0;
      for (double d : r.step_s) train += d;
      m.train_s += train / runs.size();
    }
    return m;
  };
  double lo = 1e300, hi = 0;
  for (const LoopResult& r : none_runs) {
    lo = std::min(lo, r.seconds);
    hi = std::max(hi, r.seconds);
  }
  LoopResult plain = mean(plain_runs), sync = mean(sync_runs), async = mean(async_runs);
  const double base = mean(none_runs).seconds;
  const double noise = 100 * (hi - lo) / base;
  const double sync_pct = 100 * (sync.seconds / base - 1);
  const double plain_pct = 100 * (plain.seconds / base - 1);
  const double async_pct = 100 * (async.seconds / base - 1);
  // Where a slowdown comes from: time inside the checkpoint call (the task stalled), or training
  // steps running slower than without checkpoints (the write competing for CPU, memory bandwidth
  // or, in a VM, the host's I/O path).
  const double base_train = mean(none_runs).train_s;
  const double sync_interference_pct = 100 * (sync.train_s - base_train) / base;
  const double plain_interference_pct = 100 * (plain.train_s - base_train) / base;
  const double plain_write_s = plain.checkpoint_call_s / std::max(1, plain.checkpoints);
  const double async_interference_pct = 100 * (async.train_s - base_train) / base;
  const double sync_write_s = sync.checkpoint_call_s / std::max(1, sync.checkpoints);
  const double async_stall_s = async.checkpoint_call_s / std::max(1, async.checkpoints);
  const double interval_s = base / steps * steps_per_interval;  // as achieved

  if (f.json) {
    bench::PrintJsonFigure("checkpoint", "loop_slowdown_sync_pct", sync_pct, "%",
                           "loop_no_checkpoint_s", base);
    bench::PrintJsonFigure("checkpoint", "loop_slowdown_sync_vs_plain_write_pct", sync_pct, "%",
                           "loop_slowdown_plain_write_fsync_pct", plain_pct);
    bench::PrintJsonFigure("checkpoint", "loop_slowdown_async_pct", async_pct, "%",
                           "loop_no_checkpoint_s", base);
    bench::PrintJsonFigure("checkpoint", "baseline_spread_pct", noise, "%", "loop_no_checkpoint_s",
                           base);
    bench::PrintJsonFigure("checkpoint", "async_steps_slower_pct", async_interference_pct, "%",
                           "loop_no_checkpoint_s", base);
    bench::PrintJsonFigure("checkpoint", "sync_write_s_per_checkpoint", sync_write_s, "s",
                           "interval_s", interval_s);
    bench::PrintJsonFigure("checkpoint", "async_stall_s_per_checkpoint", async_stall_s, "s",
                           "sync_write_s_per_checkpoint", sync_write_s);
    return;
  }
  std::printf("\nTraining loop: %llu MiB of float state (weights + momentum), %lld steps of %.1f ms, "
              "a checkpoint every %lld steps (%.1f s)\n",
              static_cast<unsigned long long>(f.state_mib), static_cast<long long>(steps),
              1000 * base / steps, static_cast<long long>(steps_per_interval), interval_s);
  std::printf("  scaling: write time / interval = %.3f (the issue's 1 GiB once a minute on this disk "
              "would be %.3f)\n",
              sync_write_s / interval_s, sync_write_s * (1024.0 / f.state_mib) / 60);
  std::printf("%-18s %8s %10s %14s %14s %12s   target\n", "mode", "loop s", "slowdown",
              "stall/ckpt", "steps slower", "checkpoints");
  std::printf("%-18s %8.2f %10s %14s %14s %12d\n", "no checkpoints", base, "-", "-", "-", 0);
  std::printf("%-18s %8.2f %9.2f%% %11.1f ms %13.2f%% %12d   (reference)\n", "plain write+fsync",
              plain.seconds, plain_pct, 1000 * plain_write_s, plain_interference_pct,
              plain.checkpoints);
  std::printf("%-18s %8.2f %9.2f%% %11.1f ms %13.2f%% %12d   <= 3.5%%\n", "synchronous",
              sync.seconds, sync_pct, 1000 * sync_write_s, sync_interference_pct, sync.checkpoints);
  std::printf("%-18s %8.2f %9.2f%% %11.1f ms %13.2f%% %12d   <= 1%% (aim)\n", "asynchronous",
              async.seconds, async_pct, 1000 * async_stall_s, async_interference_pct,
              async.checkpoints);
  std::printf("  loop s = mean of %d interleaved rounds; spread of the no-checkpoint runs: %.2f%% "
              "(slowdowns within it are noise); async max stall %.1f ms, %d refused for staging "
              "room\n",
              f.rounds, noise, 1000 * async.max_call_s, async.refused);
}

}  // namespace
}  // namespace gpupool::checkpoint

int main(int argc, char** argv) {
  using namespace gpupool::checkpoint;
  Flags f = ParseFlags(argc, argv);
  const bool created = !std::filesystem::exists(f.dir);
  auto backend = NewLocalDirectoryBackend({.root = f.dir});
  if (!backend.ok()) Die(backend.status());
  auto store = SnapshotStore::Open({.backend = std::move(*backend), .keep_last = 1});
  if (!store.ok()) Die(store.status());
  if (!f.json) {
    std::printf("checkpoint bench in %s (%s)\n", f.dir.c_str(), FileSystemType(f.dir).c_str());
  }
  if (f.throughput) Throughput(f, **store);
  if (f.loop) TrainingLoop(f, **store);
  std::filesystem::remove(f.dir + "/plain.bin");
  if (created) std::filesystem::remove_all(f.dir);
  return 0;
}
