// A driver joined to a shared pool (`gpupool head` and an agent per node) whose tasks run wherever
// the pool has GPUs: on its own node in this process, on the other nodes in workers that their
// agents start for this job (this same program, re-executed there with --gpupool-worker). Each
// task holds one GPU for a second and says where it ran; the driver prints every task's place and
// how long all of them took, so four tasks on a 2x2-GPU pool finish in about one second.
//
//   GPUPOOL_ADDRESS=127.0.0.1:7070 GPUPOOL_TOKEN=... GPUPOOL_NODE=node-0 \
//       ./build/examples/tasks_anywhere/tasks_anywhere 4
// (see the README's shared-pool section for the head and the agents).
//
// With a third argument `nested`, it then passes refs inside an argument (a vector of them: one
// put by the driver, one a task's result still being computed) to a task, which reads them
// wherever it runs; a worker imports them from the driver. A second task returns them unread, and
// the driver reads them from its result. Then objects go the other way: a task returns refs to
// values it put where it ran, and another returns 1 MiB (over the 100 KiB that travel with a
// task's outcome). The worker keeps both until the driver reads them; tasks on either node read
// the big one as their input straight from that worker. Last, a task on node-1 submits GPU tasks
// itself (Ray's nested tasks): its driver places them, here on node-0.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gpupool/gpupool.h"

// Holds its GPU for `seconds`, then says where it ran: "node/GPU i pid=P".
std::string HoldGpu(gpupool::TaskContext& ctx, double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const gpupool::SlotInfo& slot = ctx.slots().front();
  std::printf("task %llu running on %s/GPU %d\n", static_cast<unsigned long long>(ctx.task_id()), slot.node.c_str(),
              slot.gpu_index);
  return slot.node + "/GPU " + std::to_string(slot.gpu_index) + " pid=" + std::to_string(getpid());
}
GPUPOOL_REMOTE(HoldGpu);

int SlowTwo() {
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return 2;
}
GPUPOOL_REMOTE(SlowTwo);

// Reads refs nested in its argument, where it runs: "sum S on node/GPU i pid=P".
std::string SumNested(gpupool::TaskContext& ctx, std::vector<gpupool::ObjectRef<int>> refs) {
  int sum = 0;
  for (auto& r : refs) sum += *gpupool::Get(r);
  const gpupool::SlotInfo& slot = ctx.slots().front();
  return "sum " + std::to_string(sum) + " on " + slot.node + "/GPU " + std::to_string(slot.gpu_index) +
         " pid=" + std::to_string(getpid());
}
GPUPOOL_REMOTE(SumNested);

// Returns the refs it was given, unread: the driver reads them from its result (refs travel back).
std::vector<gpupool::ObjectRef<int>> PassBack(gpupool::TaskContext&, std::vector<gpupool::ObjectRef<int>> refs) {
  return refs;
}
GPUPOOL_REMOTE(PassBack);

// Puts n and n + 1 where it runs and returns the refs: in a worker, the worker keeps the values.
std::vector<gpupool::ObjectRef<int>> MadeHere(gpupool::TaskContext&, int n) {
  return {gpupool::Put(n), gpupool::Put(n + 1)};
}
GPUPOOL_REMOTE(MadeHere);

std::string Big(gpupool::TaskContext&, int kib) { return std::string(static_cast<size_t>(kib) << 10, 'x'); }
GPUPOOL_REMOTE(Big);

// Reads a big input where it runs: "N bytes on node pid=P".
std::string SizeOf(gpupool::TaskContext& ctx, const std::string& data) {
  return std::to_string(data.size()) + " bytes on " + ctx.slots().front().node + " pid=" + std::to_string(getpid());
}
GPUPOOL_REMOTE(SizeOf);

int Square(gpupool::TaskContext&, int i) { return i * i; }
GPUPOOL_REMOTE(Square);

int AddOne(gpupool::TaskContext&, int x) { return x + 1; }
GPUPOOL_REMOTE(AddOne);

// Submits GPU tasks from inside a task (they go to the driver, which places them anywhere): n
// squares, one reading a value this task put, and one saying where it ran.
std::string FanOut(gpupool::TaskContext& ctx, int n) {
  std::vector<gpupool::ObjectRef<int>> kids;
  for (int i = 0; i < n; ++i) kids.push_back(gpupool::Task(Square).Gpus(1).Label("node", "node-0").Submit(i));
  kids.push_back(gpupool::Task(AddOne).Gpus(1).Label("node", "node-0").Submit(gpupool::Put(10)));
  gpupool::ObjectRef<std::string> where = gpupool::Task(HoldGpu).Gpus(1).Label("node", "node-0").Submit(0.0);
  int sum = 0;
  for (auto& k : kids) sum += *gpupool::Get(k);
  return "sum " + std::to_string(sum) + ", child on " + *gpupool::Get(where) + ", parent on " +
         ctx.slots().front().node + " pid=" + std::to_string(getpid());
}
GPUPOOL_REMOTE(FanOut);

int main(int argc, char** argv) {
  gpupool::Runtime rt = gpupool::Init(argc, argv);  // in a worker, Init serves the driver and never returns
  int tasks = argc > 1 ? std::atoi(argv[1]) : 4;
  double seconds = argc > 2 ? std::atof(argv[2]) : 1.0;
  auto start = std::chrono::steady_clock::now();
  std::vector<gpupool::ObjectRef<std::string>> results;
  for (int i = 0; i < tasks; ++i) results.push_back(gpupool::Task(HoldGpu).Gpus(1).Submit(seconds));
  std::set<std::string> nodes;
  std::set<std::string> pids;
  for (auto& r : results) {
    std::string where = *gpupool::Get(r);
    std::printf("ran on %s\n", where.c_str());
    nodes.insert(where.substr(0, where.find('/')));
    pids.insert(where.substr(where.find("pid=")));
  }
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  std::printf("driver pid=%d on node %s: %d tasks of %.1f s on %zu nodes in %zu processes took %.2f s\n",
              static_cast<int>(getpid()), rt.node().empty() ? "(none of the pool's)" : rt.node().c_str(), tasks,
              seconds, nodes.size(), pids.size(), took.count());
  if (argc > 3 && std::string(argv[3]) == "nested") {
    std::vector<gpupool::ObjectRef<int>> refs = {gpupool::Put(40), gpupool::Task(SlowTwo).Submit()};
    std::printf("nested: %s\n", gpupool::Get(gpupool::Task(SumNested).Gpus(1).Submit(refs))->c_str());
    std::vector<gpupool::ObjectRef<int>> back = *gpupool::Get(gpupool::Task(PassBack).Gpus(1).Submit(refs));
    std::printf("passed back:");
    for (auto& r : back) std::printf(" %d", *gpupool::Get(r));
    std::printf("\n");
    std::vector<gpupool::ObjectRef<int>> made = *gpupool::Get(gpupool::Task(MadeHere).Gpus(1).Submit(7));
    std::printf("kept by workers: %llu\n", static_cast<unsigned long long>(rt.Stats().objects_kept_by_workers));
    std::printf("made in a worker: %d %d\n", *gpupool::Get(made[0]), *gpupool::Get(made[1]));
    gpupool::ObjectRef<std::string> big = gpupool::Task(Big).Gpus(1).Label("node", "node-1").Submit(1024);
    // Done, but not read: the worker keeps it (nothing here has waited for it yet).
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (rt.Stats().objects_kept_by_workers == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::printf("big result kept by a worker: %llu\n", static_cast<unsigned long long>(rt.Stats().objects_kept_by_workers));
    // Tasks reading it as their input get it from the worker that keeps it (node-1's) wherever
    // they run (from node-0 over UCX; in that same worker, in place): no byte of it passes here.
    const uint64_t before = rt.Stats().bytes_fetched_from_workers;
    for (const char* node : {"node-0", "node-1"}) {
      std::printf("input read on %s: %s\n", node,
                  gpupool::Get(gpupool::Task(SizeOf).Gpus(1).Label("node", node).Submit(big))->c_str());
    }
    std::printf("input bytes through the driver: %llu\n",
                static_cast<unsigned long long>(rt.Stats().bytes_fetched_from_workers - before));
    const size_t big_bytes = gpupool::Get(big)->size();
    const gpupool::RuntimeStats stats = rt.Stats();
    std::printf("big result: %zu bytes, %llu bytes fetched from workers, %llu objects over UCX\n", big_bytes,
                static_cast<unsigned long long>(stats.bytes_fetched_from_workers),
                static_cast<unsigned long long>(stats.objects_fetched_over_ucx));
    std::printf("fan-out: %s\n",
                gpupool::Get(gpupool::Task(FanOut).Gpus(1).Label("node", "node-1").Submit(3))->c_str());
  }
  return 0;
}
