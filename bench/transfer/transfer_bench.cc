// Object transfer bandwidth between two processes (ObjectServer -> ObjectFetcher over UCX), beside
// `ucx_perftest -t tag_bw` measured in the same run for the same transport and message size.
//   transfer_bench [--json] [--transports=tcp,shm] [--min=65536] [--max=268435456]
//                  [--bytes=SIZE] (per measurement; default 1 GiB tcp, 4 GiB shm) [--reps=2]
//                  [--window=16] [--inflight_bytes=4194304] [--detect_peer_failure=1]
// The owner is this binary re-executed (--role=owner); it serves one buffer's prefixes as objects
// of each size. The fetcher keeps a window of fetches in flight into preallocated caller memory
// (each fetch is a request/reply round trip; the window hides it, as ucx_perftest's send window
// does), up to 16 fetches and about 4 MiB of destinations (at least 2 fetches), and counts object
// bytes per second. ucx_perftest receives into one buffer again and again; destinations much
// larger than the cache would measure memory bandwidth instead (a window of 16 x 4 MiB measured
// ~65% of perftest here where 2 x 4 MiB measured ~85%). Each figure is the best of --reps interleaved runs
// (ours, then ucx_perftest, per size), since the machine is shared. Issue 6 target: >= 80% of
// ucx_perftest for tcp and shared memory; reported, never asserted.
//
// "shm" runs with UcxOptions::detect_peer_failure off (UCX 1.13 cannot detect a dead peer over
// shared memory, and leaves those transports out of endpoints that ask for it); "tcp" keeps it on,
// as gpupool runs by default (--detect_peer_failure=0 shows its cost: here tcp went from ~60-66%
// to ~60-88% of ucx_perftest at 1-16 MiB). ucx_perftest runs without peer-failure handling.
//
// Replies up to 1 MiB go eagerly (UcxWorker::kEagerReplyMaxBytes); ucx_perftest keeps UCX's own
// rendezvous threshold. On an AMD EPYC 2-vCPU VM that took tcp at 256 KiB from 68-77% to 74-85%
// of perftest and shm at 64 KiB-1 MiB above perftest (the copy lands in cache); perftest's own
// figures moved by up to 40% between runs there, so compare ratios over several runs.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/common/json_figure.h"
#include "transport/object_transfer.h"
#include "transport/ucx_worker.h"

extern char** environ;

namespace gpupool::bench {
namespace {

using transport::FetchedObject;
using transport::ObjectFetcher;
using transport::ObjectRegistry;
using transport::ObjectServer;
using transport::PeerId;
using transport::UcxOptions;
using transport::UcxWorker;

constexpr size_t kMiB = size_t{1} << 20;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "transfer_bench: %s\n", what.c_str());
  std::exit(1);
}

// --detect_peer_failure=0 turns it off for tcp too (to see what it costs); never on for shm.
bool g_detect_peer_failure = true;

UcxOptions Options(const std::string& transports, const std::string& name) {
  return {.transports = transports,
          .detect_peer_failure = g_detect_peer_failure && transports != "shm",
          .name = name};
}

std::string ObjectId(size_t size) { return absl::StrCat("bench-", size); }

std::string Hex(absl::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) absl::StrAppend(&out, absl::Hex(c, absl::kZeroPad2));
  return out;
}

std::string Unhex(absl::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    int byte = 0;
    if (!absl::SimpleHexAtoi(hex.substr(i, 2), &byte)) Die("bad address from owner");
    out.push_back(static_cast<char>(byte));
  }
  return out;
}

// --role=owner: serves prefixes of one buffer as objects of every size, prints "<hex address>\n",
// and exits when stdin closes.
int RunOwner(const std::string& transports, const std::vector<size_t>& sizes) {
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker =
      UcxWorker::Create(Options(transports, "bench owner"));
  if (!worker.ok()) Die(std::string(worker.status().message()));
  std::vector<std::byte> buffer(sizes.back());
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<std::byte>(i * 131 + 7);
  ObjectRegistry registry;
  for (size_t size : sizes) {
    if (!registry.Add(ObjectId(size), absl::MakeConstSpan(buffer).first(size)).ok()) Die("add");
  }
  absl::StatusOr<std::unique_ptr<ObjectServer>> server =
      ObjectServer::Start(**worker, registry.AsLookup());
  if (!server.ok()) Die("server");
  std::printf("%s\n", Hex((*worker)->address()).c_str());
  std::fflush(stdout);
  char c;
  while (read(STDIN_FILENO, &c, 1) > 0) {
  }
  server->reset();
  for (size_t size : sizes) (void)registry.Remove(ObjectId(size));
  return 0;
}

// A child process with its stdin and stdout on pipes.
struct Child {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;

  static Child Spawn(const std::vector<std::string>& args,
                     const std::vector<std::string>& extra_env = {}) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) Die("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    std::vector<std::string> env_strings = extra_env;
    for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
    std::vector<char*> argv, envp;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    Child child;
    if (posix_spawnp(&child.pid, argv[0], &actions, nullptr, argv.data(), envp.data()) != 0) {
      child.pid = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    child.to_child = in[1];
    child.from_child = out[0];
    return child;
  }

  // Everything the child writes until it exits (or `timeout`).
  std::string ReadAll(absl::Duration timeout) {
    std::string text;
    absl::Time deadline = absl::Now() + timeout;
    char chunk[4096];
    while (absl::Now() < deadline) {
      pollfd fd{from_child, POLLIN, 0};
      if (poll(&fd, 1, 100) <= 0) continue;
      ssize_t n = read(from_child, chunk, sizeof(chunk));
      if (n <= 0) break;
      text.append(chunk, static_cast<size_t>(n));
    }
    return text;
  }

  std::string ReadLine(absl::Duration timeout) {
    std::string line;
    absl::Time deadline = absl::Now() + timeout;
    char c;
    while (absl::Now() < deadline) {
      pollfd fd{from_child, POLLIN, 0};
      if (poll(&fd, 1, 100) <= 0) continue;
      if (read(from_child, &c, 1) <= 0 || c == '\n') break;
      line.push_back(c);
    }
    return line;
  }

  void Stop(bool kill_it) {
    if (to_child >= 0) close(to_child);
    if (kill_it && pid > 0) kill(pid, SIGKILL);
    if (pid > 0) waitpid(pid, nullptr, 0);
    if (from_child >= 0) close(from_child);
    pid = to_child = from_child = -1;
  }
};

// Fetches `id` `count` times with one fetch in flight per buffer, round robin. Returns MiB/s of
// object bytes.
double MeasureFetches(ObjectFetcher& fetcher, PeerId owner, size_t size,
                      std::vector<std::vector<std::byte>>& buffers, int count) {
  const std::string id = ObjectId(size);
  std::atomic<int> claimed{0}, finished{0};
  std::atomic<bool> failed{false};
  absl::Notification all_done;
  // Each completion starts the next fetch into the buffer it just filled.
  std::function<void(size_t)> start = [&](size_t slot) {
    fetcher.FetchIntoAsync(owner, id, absl::MakeSpan(buffers[slot]), {},
                           [&, slot](absl::StatusOr<FetchedObject> result) {
                             if (!result.ok() || result->size != size) {
                               std::fprintf(stderr, "fetch failed: %s\n",
                                            result.status().ToString().c_str());
                               failed = true;
                             }
                             if (claimed.fetch_add(1) < count) start(slot);
                             if (finished.fetch_add(1) + 1 == count) all_done.Notify();
                           });
  };
  absl::Time begin = absl::Now();
  for (size_t slot = 0; slot < buffers.size(); ++slot) {
    if (claimed.fetch_add(1) < count) start(slot);
  }
  all_done.WaitForNotification();
  double seconds = absl::ToDoubleSeconds(absl::Now() - begin);
  if (failed) Die("a fetch failed during the measurement");
  return static_cast<double>(size) * count / seconds / kMiB;
}

// ucx_perftest tag_bw between two processes: its overall bandwidth in MiB/s, or 0 (with a note
// on stderr) when it cannot run.
double PerftestBandwidth(const std::string& transports, size_t size, int iterations, int port) {
  std::string tls = transports == "shm" ? "sysv,posix,cma,self" : "tcp,self";
  std::vector<std::string> env = {"UCX_TLS=" + tls, "UCX_NET_DEVICES=lo"};
  Child server = Child::Spawn({"ucx_perftest", "-p", absl::StrCat(port)}, env);
  if (server.pid < 0) return 0;
  absl::SleepFor(absl::Milliseconds(300));
  Child client = Child::Spawn({"ucx_perftest", "127.0.0.1", "-p", absl::StrCat(port), "-t",
                               "tag_bw", "-s", absl::StrCat(size), "-n", absl::StrCat(iterations),
                               "-w", absl::StrCat(std::max(1, iterations / 10)), "-f", "-v"},
                              env);
  std::string out = client.ReadAll(absl::Seconds(120));
  client.Stop(false);
  server.Stop(true);
  // CSV: iterations,lat50,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
  double bandwidth = 0;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    double value = 0;
    if (fields.size() == 8 && absl::SimpleAtod(fields[5], &value)) bandwidth = value;
  }
  if (bandwidth == 0) std::fprintf(stderr, "ucx_perftest gave no figure: %s\n", out.c_str());
  return bandwidth;
}

struct Flags {
  bool json = false;
  std::vector<std::string> transports = {"tcp", "shm"};
  size_t min = 64 << 10;
  size_t max = 256 * kMiB;
  size_t bytes = 0;  // per measurement; 0 = per-transport default
  int reps = 2;
  size_t window = 16;                   // fetches in flight, at most...
  size_t inflight_bytes = 4 * kMiB;     // ...and about this many bytes of destinations (>= 2)
  std::string role;
};

std::vector<size_t> Sizes(const Flags& flags) {
  std::vector<size_t> sizes;
  for (size_t s = flags.min; s <= flags.max; s *= 4) sizes.push_back(s);
  return sizes;
}

std::string SizeName(size_t size) {
  return size >= kMiB ? absl::StrCat(size / kMiB, "MiB") : absl::StrCat(size >> 10, "KiB");
}

void RunTransport(const Flags& flags, const std::string& transports) {
  const std::vector<size_t> sizes = Sizes(flags);
  Child owner_process = Child::Spawn({"/proc/self/exe", "--role=owner", "--transports=" + transports,
                                      absl::StrCat("--detect_peer_failure=", g_detect_peer_failure),
                                      absl::StrCat("--min=", flags.min),
                                      absl::StrCat("--max=", flags.max)});
  std::string hex = owner_process.ReadLine(absl::Seconds(30));
  if (hex.empty()) Die("owner process did not start");
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker =
      UcxWorker::Create(Options(transports, "bench fetcher"));
  if (!worker.ok()) Die(std::string(worker.status().message()));
  absl::StatusOr<std::unique_ptr<ObjectFetcher>> fetcher = ObjectFetcher::Create(**worker);
  absl::StatusOr<PeerId> owner = (*worker)->Connect(Unhex(hex), "bench owner");
  if (!fetcher.ok() || !owner.ok()) Die("fetcher");
  size_t budget = flags.bytes != 0 ? flags.bytes : (transports == "shm" ? 4096 : 1024) * kMiB;
  int port = 20000 + static_cast<int>(getpid() % 20000);
  for (size_t size : sizes) {
    // Destinations in flight are kept near the cache's size: ucx_perftest receives into one
    // buffer over and over, and a window of distinct 4 MiB buffers measures DRAM, not UCX.
    size_t window = std::clamp<size_t>(flags.inflight_bytes / size, 2, flags.window);
    std::vector<std::vector<std::byte>> buffers(window, std::vector<std::byte>(size));
    int count = static_cast<int>(std::clamp<size_t>(budget / size, 2 * window, 100000));
    // Warm up: wire-up, first-touch of every buffer, UCX's registration cache.
    MeasureFetches(**fetcher, *owner, size, buffers, static_cast<int>(window));
    double ours = 0, reference = 0;
    for (int rep = 0; rep < flags.reps; ++rep) {
      ours = std::max(ours, MeasureFetches(**fetcher, *owner, size, buffers, count));
      reference = std::max(reference, PerftestBandwidth(transports, size, count, port++));
    }
    std::string metric = absl::StrCat(transports, "_", SizeName(size), "_bandwidth");
    if (flags.json) {
      PrintJsonFigure("transfer", metric.c_str(), ours, "MiB/s", "ucx_perftest_tag_bw",
                      reference);
    } else {
      std::printf("%-5s %8s %12.1f %14.1f %8.1f%%   window %zu, %d fetches\n", transports.c_str(),
                  SizeName(size).c_str(), ours, reference,
                  reference > 0 ? 100.0 * ours / reference : 0.0, window, count);
    }
    std::fflush(stdout);
  }
  fetcher->reset();
  owner_process.Stop(false);
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    std::vector<std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    const std::string& value = kv.size() == 2 ? kv[1] : "";
    bool ok = true;
    if (arg == "--json") {
      flags.json = true;
    } else if (kv[0] == "--transports") {
      flags.transports = absl::StrSplit(value, ',');
    } else if (kv[0] == "--min") {
      ok = absl::SimpleAtoi(value, &flags.min);
    } else if (kv[0] == "--max") {
      ok = absl::SimpleAtoi(value, &flags.max);
    } else if (kv[0] == "--bytes") {
      ok = absl::SimpleAtoi(value, &flags.bytes);
    } else if (kv[0] == "--reps") {
      ok = absl::SimpleAtoi(value, &flags.reps);
    } else if (kv[0] == "--detect_peer_failure") {
      g_detect_peer_failure = value != "0";
    } else if (kv[0] == "--inflight_bytes") {
      ok = absl::SimpleAtoi(value, &flags.inflight_bytes);
    } else if (kv[0] == "--window") {
      ok = absl::SimpleAtoi(value, &flags.window) && flags.window > 0;
    } else if (kv[0] == "--role") {
      flags.role = value;
    } else {
      ok = false;
    }
    if (!ok || flags.min == 0 || flags.min > flags.max || flags.reps < 1) {
      Die(absl::StrCat("bad flag '", arg, "'"));
    }
  }
  return flags;
}

int Main(int argc, char** argv) {
  Flags flags = ParseFlags(argc, argv);
  if (flags.role == "owner") return RunOwner(flags.transports.at(0), Sizes(flags));
  if (!flags.json) {
    // Both sides poll; on a machine with few cores and other load, the figures say as much
    // about scheduling as about the transport. Say what the machine was doing.
    std::string load = "?";
    if (FILE* f = std::fopen("/proc/loadavg", "r")) {
      char text[64] = {};
      if (std::fgets(text, sizeof(text), f) != nullptr) load = std::string(text, 4);
      std::fclose(f);
    }
    std::printf("# %u CPUs, load average %s at start\n", std::thread::hardware_concurrency(),
                load.c_str());
    std::printf("%-5s %8s %12s %14s %9s\n", "tls", "size", "gpupool MiB/s", "perftest MiB/s",
                "ratio");
  }
  for (const std::string& transports : flags.transports) RunTransport(flags, transports);
  return 0;
}

}  // namespace
}  // namespace gpupool::bench

int main(int argc, char** argv) { return gpupool::bench::Main(argc, argv); }
