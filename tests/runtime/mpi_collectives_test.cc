// TaskContext's collectives across the ranks of an mpirun job (tests/runtime/CMakeLists.txt runs
// it with 3 ranks, each its own simulated node): every rank submits one GPU task that reduces,
// broadcasts and passes messages round a ring with the other ranks' tasks, and checks every
// value against what it computes alone. Exit status 0 on every rank means all checks held.
//
// With --die-rank=K rank K kills itself (SIGKILL) after the first reduction; the others' next
// collective must fail with kUnavailable naming it (or kDeadlineExceeded), not hang. With
// --die-rank=K --owner-dies (last), rank K sends the others refs and dies: its pending task's
// result is rebuilt, a value one rank fetched before the death is read by the others from that
// rank's copy, a value nobody fetched is reported lost, naming rank K, and a checkpointable task
// that was running on rank K is run again by each reader from rank K's last snapshot (the ranks
// share this machine's checkpoint directory) and ends with the uninterrupted result.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gpupool/gpupool.h"
#include "tests/runtime/die_rank_flag.h"

namespace {

// Returns "" when every check held, else what failed.
std::string Exchange(gpupool::TaskContext& ctx, int die_rank) {
  const int r = ctx.rank();
  const int n = ctx.ranks();
  std::string failed;
  auto check = [&failed](bool ok, const std::string& what) {
    if (!ok) failed += what + "; ";
  };

  // Sums of integers are exact: element i is the sum over ranks of (rank + 1) * (i + 1).
  std::vector<int64_t> sums(1000);
  for (size_t i = 0; i < sums.size(); ++i) sums[i] = (r + 1) * static_cast<int64_t>(i + 1);
  ctx.AllReduce(sums);
  const int64_t ranks_sum = static_cast<int64_t>(n) * (n + 1) / 2;
  for (size_t i = 0; i < sums.size(); ++i) check(sums[i] == ranks_sum * static_cast<int64_t>(i + 1), "int64 sum");

  if (r == die_rank) DieNow(r);

  // Max and min of doubles; a length that does not divide by the ranks.
  std::vector<double> high(4099), low(4099);
  for (size_t i = 0; i < high.size(); ++i) high[i] = low[i] = r * 0.5 + static_cast<double>(i);
  ctx.AllReduce(high, gpupool::ReduceOp::kMax);
  ctx.AllReduce(low, gpupool::ReduceOp::kMin);
  for (size_t i = 0; i < high.size(); ++i) {
    check(high[i] == (n - 1) * 0.5 + static_cast<double>(i), "double max");
    check(low[i] == static_cast<double>(i), "double min");
  }

  // Float sums of a device buffer (simulated GPU: host memory with the lease's accounting).
  gpupool::DeviceBuffer grads = ctx.Allocate(1 << 20);
  float* g = static_cast<float*>(grads.data());
  const size_t count = grads.size() / sizeof(float);
  for (size_t i = 0; i < count; ++i) g[i] = 0.25f * static_cast<float>(r);
  ctx.AllReduce<float>(grads);
  check(g[0] == 0.25f * static_cast<float>(n * (n - 1) / 2) && g[count - 1] == g[0], "device buffer sum");

  // Device collectives whose arguments differ across ranks (rank 0's buffer is half the size; rank
  // 0 names another root) fail with kInvalidArgument on every rank, agreed before anything moves,
  // and leave the group in step for the next collective.
  auto code_of = [&](auto&& call) {
    try {
      call();
      return 0;
    } catch (const gpupool::Error& e) {
      return static_cast<int>(e.code());
    }
  };
  gpupool::DeviceBuffer odd = ctx.Allocate(r == 0 ? 512 : 1024);
  check(code_of([&] { ctx.AllReduce<float>(odd); }) == static_cast<int>(gpupool::ErrorCode::kInvalidArgument),
        "device allreduce of different sizes refused on every rank");
  check(code_of([&] { ctx.AllReduce<float>(grads, r == 0 ? gpupool::ReduceOp::kMax : gpupool::ReduceOp::kSum); }) ==
            static_cast<int>(gpupool::ErrorCode::kInvalidArgument),
        "device allreduce with different operations refused on every rank");
  gpupool::DeviceBuffer same = ctx.Allocate(1024);
  check(code_of([&] { ctx.Broadcast(r == 0 ? 1 : 0, same); }) == static_cast<int>(gpupool::ErrorCode::kInvalidArgument),
        "device broadcast naming different roots refused on every rank");
  check(code_of([&] { ctx.Broadcast(r == 0 ? -1 : 0, same); }) == static_cast<int>(gpupool::ErrorCode::kInvalidArgument),
        "device broadcast with an invalid root on one rank refused on every rank");
  ctx.AllReduce<float>(grads);  // still in step
  check(g[0] == 0.25f * static_cast<float>(n * (n - 1) / 2) * static_cast<float>(n), "device buffer sum after refusals");

  // Broadcast from the last rank.
  std::vector<int32_t> model(257, r == n - 1 ? 42 : -1);
  ctx.Broadcast(n - 1, model);
  for (int32_t v : model) check(v == 42, "broadcast");

  // A ring: send to the next rank, receive from the previous one.
  std::string mine = "from rank " + std::to_string(r);
  ctx.Send((r + 1) % n, 5, mine.data(), mine.size());
  char buffer[64];
  size_t got = ctx.Recv((r + n - 1) % n, 5, buffer, sizeof buffer);
  check(std::string(buffer, got) == "from rank " + std::to_string((r + n - 1) % n), "ring message");
  return failed;
}
GPUPOOL_REMOTE(Exchange);

int SlowSquare(int x) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return x * x;
}
GPUPOOL_REMOTE(SlowSquare);

// A checkpointable task: a running sum over `steps` steps, a millisecond each, snapshotted at the
// training class's interval (RuntimeOptions::clock_speed makes that a tenth of a second here).
// Returns the step it started from (0, or where its snapshot was) and the sum.
std::pair<int64_t, int64_t> CountSteps(gpupool::TaskContext& ctx, int64_t steps) {
  int64_t sum = 0;
  const int64_t first = ctx.Checkpointable({gpupool::StateRegion::Of(sum)});
  for (int64_t s = first; s < steps; ++s) {
    sum = (sum * 31 + s * s) % 1000000007;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ctx.Step();
  }
  return {first, sum};
}
GPUPOOL_REMOTE(CountSteps);

int64_t CountStepsUninterrupted(int64_t steps) {
  int64_t sum = 0;
  for (int64_t s = 0; s < steps; ++s) sum = (sum * 31 + s * s) % 1000000007;
  return sum;
}

gpupool::Runtime* runtime = nullptr;  // main's, for the owner to see its snapshots committed

uint64_t SnapshotsCommitted() {
  uint64_t n = 0;
  for (const gpupool::TeamUsage& t : runtime->Stats().teams) n += t.snapshots;
  return n;
}

int Explode(int rank) { throw std::runtime_error("boom from rank " + std::to_string(rank)); }
GPUPOOL_REMOTE(Explode);

double Sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
GPUPOOL_REMOTE(Sum);

// ObjectRefs crossing ranks inside values: the receiver reads the sender's object, fetched over
// UCX. Returns "" when every check held, else what failed.
std::string ShareObjects(gpupool::TaskContext& ctx) {
  const int r = ctx.rank();
  const int n = ctx.ranks();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  std::string failed;
  auto check = [&failed](bool ok, const std::string& what) {
    if (!ok) failed += what + "; ";
  };

  // 1. A 4 MiB object of rank 0, to every rank (rendezvous-sized), and used as a task argument.
  gpupool::ObjectRef<std::vector<double>> table;
  if (r == 0) {
    std::vector<double> v(1 << 19);
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5 * static_cast<double>(i);
    table = gpupool::Put(std::move(v));
  }
  ctx.BroadcastValue(0, table);
  {
    gpupool::View<std::vector<double>> t = gpupool::Get(table);
    check(t->size() == (1u << 19) && (*t)[12345] == 6172.5, "broadcast object's contents");
  }
  const double expected_sum = 0.5 * (double(1 << 19) - 1) * double(1 << 19) / 2;
  check(*gpupool::Get(gpupool::Submit(Sum, table)) == expected_sum, "imported object as a task argument");

  // 2. A task result that is not ready yet when its ref is sent round the ring.
  gpupool::ObjectRef<int> mine = gpupool::Submit(SlowSquare, r + 1);
  ctx.SendValue(next, 11, mine);
  gpupool::ObjectRef<int> theirs = ctx.RecvValue<gpupool::ObjectRef<int>>(prev, 11);
  check(*gpupool::Get(theirs) == (prev + 1) * (prev + 1), "a pending object fetched when ready");

  // 3. A failed task's object: its failure crosses with the reason.
  gpupool::ObjectRef<int> bad = gpupool::Submit(Explode, r);
  ctx.SendValue(next, 12, bad);
  gpupool::ObjectRef<int> their_bad = ctx.RecvValue<gpupool::ObjectRef<int>>(prev, 12);
  try {
    gpupool::Get(their_bad);
    check(false, "a failed object read without an error");
  } catch (const gpupool::Error& e) {
    check(std::string(e.what()).find("boom from rank " + std::to_string(prev)) != std::string::npos,
          std::string("failure reason lost: ") + e.what());
  }
  // 4. Refs sent every step do not pile objects up: once every receiver has fetched one, its
  // sender keeps it only while its own refs do. Rank 0 broadcasts a fresh object each step and
  // sends rank 1 another, which rank 1 forwards at once to rank 2 (who reads it from rank 0, or
  // from rank 1's copy once rank 0 has freed it). Nobody keeps the refs.
  const uint64_t before = runtime->Stats().live_objects;
  constexpr int kSteps = 30;
  for (int step = 0; step < kSteps; ++step) {
    gpupool::ObjectRef<std::vector<int64_t>> weights, forwarded;
    if (r == 0) weights = gpupool::Put(std::vector<int64_t>(8192, step));
    ctx.BroadcastValue(0, weights);
    check((*gpupool::Get(weights))[100] == step, "a step's broadcast object");
    if (n < 3) continue;
    if (r == 0) ctx.SendValue(1, 20, gpupool::Put(std::vector<int64_t>(8192, -step)));
    if (r == 1) ctx.SendValue(2, 21, ctx.RecvValue<gpupool::ObjectRef<std::vector<int64_t>>>(0, 20));
    if (r == 2) {
      forwarded = ctx.RecvValue<gpupool::ObjectRef<std::vector<int64_t>>>(1, 21);
      check((*gpupool::Get(forwarded))[100] == -step, "a step's forwarded object");
    }
  }
  int32_t stepped = 1;
  ctx.AllReduce(&stepped, 1);  // every rank has read every step's objects
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (runtime->Stats().live_objects > before && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const uint64_t after = runtime->Stats().live_objects;
  check(after <= before, "objects sent every step piled up: " + std::to_string(before) + " live before " +
                             std::to_string(kSteps) + " steps, " + std::to_string(after) + " after");

  // 5. A ref that comes home after its owner freed it (every receipt in, no ref left there) is
  // fetched back from the rank that sent it home, which kept its copy for that.
  if (r == 0) {
    const uint64_t live = runtime->Stats().live_objects;
    ctx.SendValue(1, 30, gpupool::Put(std::string(100000, 'h')));
    const auto freed_by = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (runtime->Stats().live_objects > live && std::chrono::steady_clock::now() < freed_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    check(runtime->Stats().live_objects <= live, "an object rank 1 fetched was not freed here");
    auto home = ctx.RecvValue<gpupool::ObjectRef<std::string>>(1, 31);
    try {
      check(*gpupool::Get(home) == std::string(100000, 'h'), "a ref come home read wrong bytes");
    } catch (const gpupool::Error& e) {
      check(false, std::string("a ref come home after its object was freed: ") + e.what());
    }
  } else if (r == 1) {
    auto away = ctx.RecvValue<gpupool::ObjectRef<std::string>>(0, 30);
    gpupool::Get(away);
    ctx.SendValue(0, 31, away);
  }

  // 6. An object holding refs: the reader fetches it, then the objects its refs name; once it
  // has dropped them all, the owner frees all three (the reader owed receipts for the inner ones).
  const uint64_t before_nested = runtime->Stats().live_objects;
  if (r == 0) {
    std::vector<gpupool::ObjectRef<int>> inner{gpupool::Put(41), gpupool::Submit(SlowSquare, 6)};
    ctx.SendValue(1, 40, gpupool::Put(std::move(inner)));
  } else if (r == 1) {
    auto outer = ctx.RecvValue<gpupool::ObjectRef<std::vector<gpupool::ObjectRef<int>>>>(0, 40);
    std::vector<gpupool::ObjectRef<int>> inner = *gpupool::Get(outer);
    check(inner.size() == 2 && *gpupool::Get(inner[0]) == 41 && *gpupool::Get(inner[1]) == 36,
          "refs inside a fetched object");
  }
  int32_t nested_read = 1;
  ctx.AllReduce(&nested_read, 1);
  if (r == 0) {
    const auto nested_give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (runtime->Stats().live_objects > before_nested && std::chrono::steady_clock::now() < nested_give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    check(runtime->Stats().live_objects <= before_nested,
          "objects inside a fetched object were kept: " + std::to_string(runtime->Stats().live_objects - before_nested));
  }

  // Every rank is done reading the others' objects before any rank stops serving its own.
  int32_t done = 1;
  ctx.AllReduce(&done, 1);
  return failed;
}
GPUPOOL_REMOTE(ShareObjects);

// Rank `owner` sends the others refs to two objects, then dies before they are fetched: a task
// result not ready yet, which carries its lineage, so the readers run the task again and read its
// value; a Put value, which has none, so their Get must fail naming the owner, not hang; and a
// checkpointable task's result, rebuilt from the owner's last snapshot. Returns what the Gets said.
constexpr int64_t kCountSteps = 3000;

std::string OwnerDies(gpupool::TaskContext& ctx, int owner) {
  // The rank that fetches a copy of `copied` before the owner dies, and sends it on afterwards.
  const int keeper = owner == 0 ? 1 : 0;
  if (ctx.rank() == owner) {
    // First, so that the keeper's fetch of it is not queued behind the others.
    ctx.SendValue(keeper, 16, gpupool::Put(std::string(1 << 20, 'y')));
    auto counting = gpupool::Task(CountSteps).Gpus(0.5).Submit(kCountSteps);
    // Dies with snapshots of the counting task on disk, and the task still running.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (SnapshotsCommitted() < 2 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    gpupool::ObjectRef<int> pending = gpupool::Submit(SlowSquare, 7);  // still running at the death
    gpupool::ObjectRef<std::string> put = gpupool::Put(std::string(1 << 20, 'x'));
    for (int r = 0; r < ctx.ranks(); ++r) {
      if (r != owner) ctx.SendValue(r, 13, std::make_pair(pending, put));
      if (r != owner) ctx.SendValue(r, 17, counting);
    }
    // Dies once every rank holds the ref (a dead rank's unreceived messages are lost with it).
    for (int r = 0; r < ctx.ranks(); ++r) {
      if (r != owner) ctx.RecvValue<int>(r, 14);
    }
    DieNow(owner);
  }
  gpupool::ObjectRef<std::string> copied;
  if (ctx.rank() == keeper) {
    copied = ctx.RecvValue<gpupool::ObjectRef<std::string>>(owner, 16);
    gpupool::Get(copied);  // this rank now holds a copy
  }
  auto [task_result, put] =
      ctx.RecvValue<std::pair<gpupool::ObjectRef<int>, gpupool::ObjectRef<std::string>>>(owner, 13);
  auto counting = ctx.RecvValue<gpupool::ObjectRef<std::pair<int64_t, int64_t>>>(owner, 17);
  // The keeper sends the copied ref on before the owner dies (after, the group's communicator is
  // broken). The others' fetches run one at a time, this one after the pending task's result,
  // which waits until the owner is dead: they find the owner gone and read the keeper's copy.
  for (int r = 0; r < ctx.ranks(); ++r) {
    if (r == owner || r == keeper) continue;
    if (ctx.rank() == keeper) ctx.SendValue(r, 15, copied);
    if (ctx.rank() == r) copied = ctx.RecvValue<gpupool::ObjectRef<std::string>>(keeper, 15);
  }
  ctx.SendValue(owner, 14, 1);
  auto said = [](auto& ref) -> std::string {
    try {
      return "read " + std::to_string(gpupool::Get(ref)->size());
    } catch (const gpupool::Error& e) {
      return std::string(e.code() == gpupool::ErrorCode::kUnavailable ? "unavailable: " : "other error: ") + e.what();
    }
  };
  std::string first;
  try {
    first = "rebuilt " + std::to_string(*gpupool::Get(task_result));
  } catch (const gpupool::Error& e) {
    first = std::string("lost: ") + e.what();
  }
  std::string put_said = said(put);
  std::string counted;
  try {
    auto [from, sum] = *gpupool::Get(counting);
    counted = "resumed at step " + std::to_string(from) + " of " + std::to_string(kCountSteps) + ", " +
              (sum == CountStepsUninterrupted(kCountSteps) ? "result correct" : "result WRONG");
  } catch (const gpupool::Error& e) {
    counted = std::string("lost: ") + e.what();
  }
  return first + ", copy " + said(copied) + ", put " + put_said + ", checkpointed task " + counted;
}
GPUPOOL_REMOTE(OwnerDies);

}  // namespace

int main(int argc, char** argv) {
  const int die_rank = DieRankFlag(argc, argv);
  const bool owner_dies = argc > 1 && std::strcmp(argv[argc - 1], "--owner-dies") == 0;
  try {
    gpupool::RuntimeOptions options = gpupool::OptionsFromFlags(argc, argv);
    if (die_rank >= 0) options.collective_timeout_s = 20;
    options.cpu_workers = 4;  // tasks here wait for tasks they submit
    if (owner_dies) options.clock_speed = 6000;  // the training class's 600 s interval: 0.1 s
    gpupool::Runtime rt = gpupool::Init(options);
    runtime = &rt;
    if (owner_dies) {
      std::string said = *gpupool::Get(gpupool::Task(OwnerDies).Submit(die_rank));
      std::printf("rank %d: %s\n", rt.rank(), said.c_str());
      return 0;
    }
    try {
      std::string failed = *gpupool::Get(gpupool::Task(Exchange).Gpus(0.5).Submit(die_rank));
      if (!failed.empty()) {
        std::printf("rank %d: FAILED: %s\n", rt.rank(), failed.c_str());
        return 1;
      }
      std::printf("rank %d of %d: collectives ok\n", rt.rank(), rt.ranks());
      if (die_rank >= 0) return 1;  // a death test must not get here
      failed = *gpupool::Get(gpupool::Task(ShareObjects).Submit());
      if (!failed.empty()) {
        std::printf("rank %d: FAILED: %s\n", rt.rank(), failed.c_str());
        return 1;
      }
      std::printf("rank %d of %d: objects ok\n", rt.rank(), rt.ranks());
      return 0;
    } catch (const gpupool::TaskError& e) {
      const bool expected = die_rank >= 0 && (e.code() == gpupool::ErrorCode::kUnavailable ||
                                              e.code() == gpupool::ErrorCode::kDeadlineExceeded);
      std::printf("rank %d: %s: %s\n", rt.rank(), expected ? "collective failed as expected" : "FAILED", e.what());
      return expected ? 0 : 1;
    }
  } catch (const gpupool::Error& e) {
    std::fprintf(stderr, "gpupool error: %s\n", e.what());
    return 1;
  }
}
