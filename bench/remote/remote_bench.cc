// Tasks on another node, against tasks in the driver's own process, measured in the same run.
//
// One process hosts a head over three nodes (n0, n1, n2: one simulated GPU each) and their
// agents; it joins the head by address as a driver on n0. Tasks labelled for n0 run in this
// process; tasks labelled for n1 run in the job's worker there (this program re-executed by n1's
// agent with --gpupool-worker, over loopback), exactly as with separate machines.
//
//   bench/run remote [--json]
//   build/bench/remote/remote_bench [--json] [--tasks N] [--sync N] [--starts N]
//
// Figures: no-op tasks/s from one driver (async: submit all, then get all) and sync round
// trips/s (submit, get, one at a time), remote beside in-process; and worker start to first task
// (submit to result with no worker running: the lease, the agent's start, the worker's hello,
// the task) p50/p99 beside fork+exec of this same binary. And objects the worker keeps: a task's
// result of 1, 16 and 64 MiB (over the 100 KiB that travel with an outcome) stays in n1's worker
// until the driver's Get fetches it; MB/s of that Get beside the same bytes sent as one frame
// over a loopback connection in this process (FrameSocket, the transport under the fetch). And a
// task on a third node (n2) reading such a result as its argument: its worker fetches it from
// n1's, beside the driver fetching it and sending it on with the task.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/common/figure_table.h"
#include "bench/common/json_figure.h"
#include "gpupool/gpupool.h"
#include "runtime/agent/node_agent.h"
#include "runtime/rpc/frame_socket.h"
#include "runtime/rpc/node_codec.h"
#include "runtime/service/pool_server.h"
#include "runtime/service/pool_service.h"
#include "pool/devices/driver_selection.h"

namespace {

int NoOp(int x) { return x; }
GPUPOOL_REMOTE(NoOp);

std::string Bytes(int mib) { return std::string(static_cast<size_t>(mib) << 20, 'b'); }
GPUPOOL_REMOTE(Bytes);

size_t Length(const std::string& s) { return s.size(); }
GPUPOOL_REMOTE(Length);

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

gpupool::rpc::DiscoveredPool Node(const std::string& name) {
  auto selected = gpupool::pool::SelectDriver(
      gpupool::pool::DriverChoice{.driver = "simulated", .simulation_spec = "1xH100-80GB"});
  auto nodes = selected->driver->Discover();
  gpupool::rpc::DiscoveredPool p{"simulated", {(*nodes)[0]}};
  p.nodes[0].name = name;
  return p;
}

// Async: all submitted, then all read. Returns tasks/s.
double Async(const std::string& node, int n) {
  auto start = Clock::now();
  std::vector<gpupool::ObjectRef<int>> refs;
  refs.reserve(n);
  for (int i = 0; i < n; ++i) refs.push_back(gpupool::Task(NoOp).Gpus(1).Label("node", node).Submit(i));
  for (auto& r : refs) (void)*gpupool::Get(r);
  return n / Seconds(start);
}

double Sync(const std::string& node, int n) {
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) (void)*gpupool::Get(gpupool::Task(NoOp).Gpus(1).Label("node", node).Submit(i));
  return n / Seconds(start);
}

void Print(const std::vector<gpupool::bench::Figure>& rows, bool json) {
  if (!json) {
    gpupool::bench::PrintFigureTable(rows);
    return;
  }
  for (const gpupool::bench::Figure& r : rows) {
    gpupool::bench::PrintJsonFigure("remote", r.metric.c_str(), r.value, r.unit.c_str(), r.reference.c_str(),
                                    r.reference_value);
  }
}

// Waits until workers keep more than `above` results for the driver; false after 30 s.
bool WaitKept(gpupool::Runtime& rt, uint64_t above) {
  const auto give_up = Clock::now() + std::chrono::seconds(30);
  while (rt.Stats().objects_kept_by_workers <= above) {
    if (Clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// MB/s of Gets of a `mib` MiB result that n1's worker kept (the task done first, so only the
// fetch is timed); the best of `rounds`.
double FetchMBps(gpupool::Runtime& rt, int mib, int rounds) {
  double best = 0;
  for (int i = 0; i < rounds; ++i) {
    gpupool::ObjectRef<std::string> ref = gpupool::Task(Bytes).Gpus(1).Label("node", "n1").Submit(mib);
    if (!WaitKept(rt, 0)) {
      std::fprintf(stderr, "remote_bench: n1's worker kept no result of %d MiB within 30 s\n", mib);
      return 0;
    }
    auto t0 = Clock::now();
    size_t bytes = gpupool::Get(ref)->size();
    best = std::max(best, static_cast<double>(bytes) / 1e6 / Seconds(t0));
  }
  return best;
}

// MB/s of a task on n2 reading, as its argument, a `mib` MiB result n1's worker kept (the result
// done first, so only the read is timed: from the task's submission to its result here), the
// best of `rounds`. `through_driver`: the route before workers fetched inputs themselves, and
// what a program that Gets the value and passes it on still does: the driver fetches it, then
// sends it with the task (two crossings); else the task's worker fetches it from n1's (one).
double InputMBps(gpupool::Runtime& rt, int mib, int rounds, bool through_driver) {
  double best = 0;
  for (int i = 0; i < rounds; ++i) {
    // The last round's result goes once its reader's task is settled, which may be just after
    // its Get returned: counted from none.
    const auto give_up = Clock::now() + std::chrono::seconds(30);
    while (rt.Stats().objects_kept_by_workers > 0) {
      if (Clock::now() > give_up) {
        std::fprintf(stderr, "remote_bench: the last round's %d MiB result was still kept after 30 s\n", mib);
        return 0;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    gpupool::ObjectRef<std::string> ref = gpupool::Task(Bytes).Gpus(1).Label("node", "n1").Submit(mib);
    if (!WaitKept(rt, 0)) {
      std::fprintf(stderr, "remote_bench: n1's worker kept no result of %d MiB within 30 s\n", mib);
      return 0;
    }
    auto t0 = Clock::now();
    size_t bytes = through_driver ? *gpupool::Get(gpupool::Task(Length).Gpus(1).Label("node", "n2").Submit(*gpupool::Get(ref)))
                                  : *gpupool::Get(gpupool::Task(Length).Gpus(1).Label("node", "n2").Submit(ref));
    best = std::max(best, static_cast<double>(bytes) / 1e6 / Seconds(t0));
  }
  return best;
}

// MB/s of one frame of `mib` MiB over a loopback FrameSocket, sent and received in this process;
// the best of `rounds`.
double LoopbackMBps(int mib, int rounds) {
  using gpupool::runtime::FrameListener;
  using gpupool::runtime::FrameSocket;
  auto listener = FrameListener::Listen("127.0.0.1", 0);
  if (!listener.ok()) return 0;
  auto sender = FrameSocket::Connect("127.0.0.1", (*listener)->port(), std::chrono::seconds(5));
  auto receiver = (*listener)->Accept();
  if (!sender.ok() || !receiver.ok()) return 0;
  const std::string frame(static_cast<size_t>(mib) << 20, 'b');
  double best = 0;
  for (int i = 0; i < rounds; ++i) {
    auto t0 = Clock::now();
    std::thread send([&] { (void)(*sender)->Send(frame); });
    auto got = (*receiver)->Receive();
    send.join();
    if (got.ok()) best = std::max(best, static_cast<double>(got->size()) / 1e6 / Seconds(t0));
  }
  return best;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  // A worker of this benchmark's job serves here and never returns.
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gpupool-worker") == 0) gpupool::Init(argc, argv);
  }
  if (argc > 1 && std::strcmp(argv[1], "--exit-at-once") == 0) return 0;  // the fork+exec baseline
  bool json = false;
  int tasks = 200000, sync = 5000, starts = 10;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--json") json = true;
    else if (a == "--tasks") tasks = value();
    else if (a == "--sync") sync = value();
    else if (a == "--starts") starts = value();
    else {
      std::fprintf(stderr, "remote_bench: unknown flag %s (--json --tasks N --sync N --starts N)\n", a.c_str());
      return 2;
    }
  }
  using namespace gpupool::runtime;
  PoolServiceOptions po;
  po.remote_nodes = {Node("n0").nodes[0], Node("n1").nodes[0], Node("n2").nodes[0]};
  auto service = PoolService::Start(po);
  PoolServerOptions so;
  so.team_tokens = {{"default", "bench-team-token-0123"}};
  so.agent_token = "bench-agent-token-0123";
  auto server = PoolServer::Start(*std::move(service), so);
  if (!server.ok()) {
    std::fprintf(stderr, "remote_bench: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  std::vector<std::unique_ptr<NodeAgent>> agents;
  for (const char* n : {"n0", "n1", "n2"}) {
    auto agent = NodeAgent::Start(NodeAgentOptions{.port = (*server)->port(), .token = "bench-agent-token-0123",
                                                   .node = Node(n), .allow_root_workers = true});
    if (!agent.ok()) {
      std::fprintf(stderr, "remote_bench: agent %s: %s\n", n, std::string(agent.status().message()).c_str());
      return 1;
    }
    agents.push_back(*std::move(agent));
  }
  std::vector<gpupool::bench::Figure> rows;
  {
    gpupool::RuntimeOptions o;
    o.pool_address = "127.0.0.1:" + std::to_string((*server)->port());
    o.pool_token = "bench-team-token-0123";
    o.node_name = "n0";
    o.worker_linger_ms = 100;
    o.lease_linger_ms = 50;
    gpupool::Runtime rt = gpupool::Init(o);
    // Warm both paths (the worker starts here), then measure.
    // Each figure right after a warm-up on its node: the worker lingers only 100 ms and leases
    // 50 ms, so a phase measured after another would otherwise include a worker's start and a
    // lease's grant (those are the start figures below), not the steady rate it reports.
    Async("n0", 1000);
    double local_async = Async("n0", tasks);
    Async("n1", 1000);
    double remote_async = Async("n1", tasks);
    Sync("n0", 200);
    double local_sync = Sync("n0", sync);
    Sync("n1", 200);
    double remote_sync = Sync("n1", sync);
    rows.push_back({"remote_noop_tasks_per_s", remote_async, "tasks/s", "in_process_noop_tasks_per_s", local_async,
                    "one driver, 1-GPU no-op tasks, loopback worker on another node"});
    rows.push_back({"remote_sync_round_trips_per_s", remote_sync, "1/s", "in_process_sync_round_trips_per_s", local_sync,
                    "submit then get, one at a time"});
    // Worker start to first task: the worker has lingered out (100 ms), so each task starts a fresh one.
    std::vector<double> first;
    for (int i = 0; i < starts; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the worker and the lease go
      auto t0 = Clock::now();
      (void)*gpupool::Get(gpupool::Task(NoOp).Gpus(1).Label("node", "n1").Submit(i));
      first.push_back(Seconds(t0) * 1000);
    }
    std::vector<double> spawn;
    for (int i = 0; i < starts; ++i) {
      auto t0 = Clock::now();
      pid_t pid = fork();
      if (pid == 0) {
        execl("/proc/self/exe", "remote_bench", "--exit-at-once", static_cast<char*>(nullptr));
        _exit(127);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      spawn.push_back(Seconds(t0) * 1000);
    }
    rows.push_back({"worker_start_to_first_task_p50_ms", Percentile(first, 0.5), "ms", "fork_exec_same_binary_p50_ms",
                    Percentile(spawn, 0.5), "lease, agent start, hello, task, result"});
    rows.push_back({"worker_start_to_first_task_p99_ms", Percentile(first, 0.99), "ms", "fork_exec_same_binary_p99_ms",
                    Percentile(spawn, 0.99), ""});
    for (int mib : {1, 16, 64}) {
      rows.push_back({"fetch_kept_result_" + std::to_string(mib) + "MiB_MBps", FetchMBps(rt, mib, 5), "MB/s",
                      "loopback_frame_" + std::to_string(mib) + "MiB_MBps", LoopbackMBps(mib, 5),
                      mib == 1 ? "Get of a result n1's worker kept, beside the bare transport" : ""});
    }
    for (int mib : {1, 16, 64}) {
      rows.push_back({"input_from_worker_" + std::to_string(mib) + "MiB_MBps", InputMBps(rt, mib, 5, false), "MB/s",
                      "input_through_driver_" + std::to_string(mib) + "MiB_MBps", InputMBps(rt, mib, 5, true),
                      mib == 1 ? "n2's task reads n1's kept result: n2 fetches it, beside Get + resubmit" : ""});
    }
  }
  Print(rows, json);
  return 0;
}
