#include "runtime/cli/simulate_timed.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "pool/sim/timed_replay.h"
#include "pool/sim/trace_reader.h"
#include "runtime/cli/command.h"
#include "runtime/cli/text_table.h"

namespace gpupool::cli {
namespace {

namespace sim = ::gpupool::pool::sim;

// One block character per week: the allocation at a glance.
std::string Sparkline(const std::vector<double>& hourly) {
  static const char* kBlocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  std::string line;
  for (size_t start = 0; start < hourly.size(); start += 168) {
    size_t end = std::min(hourly.size(), start + 168);
    double sum = 0;
    for (size_t i = start; i < end; ++i) sum += hourly[i];
    double mean = sum / static_cast<double>(end - start);
    line += kBlocks[std::clamp(static_cast<int>(mean * 8), 0, 7)];
  }
  return line;
}

}  // namespace

void RunTimedSimulation(const TimedSimulationFlags& flags) {
  absl::StatusOr<std::vector<sim::NodeCapacity>> nodes = sim::ReadNodeList(flags.nodes);
  if (!nodes.ok()) throw CommandFailed(std::string(nodes.status().message()));
  absl::StatusOr<std::vector<sim::PodSpec>> pods = sim::ReadPodList(flags.pods);
  if (!pods.ok()) throw CommandFailed(std::string(pods.status().message()));
  sim::TimedOptions options;
  options.policy = flags.policy;
  options.compress = flags.compress;
  int64_t last_report = -1;
  options.progress = [&last_report](int64_t at, int64_t end) {
    int64_t tenth = end > 0 ? at * 10 / end : 10;
    if (tenth != last_report) {
      std::cerr << absl::StrFormat("simulate --timed: %d%% of the trace replayed\n", tenth * 10);
      last_report = tenth;
    }
  };
  absl::StatusOr<sim::TimedResult> r = sim::RunTimed(*nodes, *pods, options);
  if (!r.ok()) throw CommandFailed(std::string(r.status().message()));
  if (flags.json) {
    std::cout << nlohmann::json{{"mode", "timed"},
                                {"policy", r->policy},
                                {"pods", r->pods},
                                {"completed", r->completed},
                                {"never_placed", r->never_placed},
                                {"mean_gpu_allocation", r->mean_gpu_allocation},
                                {"queue_delay_s", {{"mean", r->queue_delay_mean_s},
                                                   {"p50", r->queue_delay_p50_s},
                                                   {"p95", r->queue_delay_p95_s},
                                                   {"p99", r->queue_delay_p99_s}}},
                                {"jct_mean_s", r->jct_mean_s},
                                {"preemptions", r->preemptions},
                                {"gpu_hours_lost", r->gpu_hours_lost},
                                {"allocation_hourly", r->allocation_samples}}
                     .dump()
              << "\n";
    return;
  }
  TextTable table({"POLICY", "GPU PODS", "COMPLETED", "NEVER PLACED", "MEAN ALLOC", "DELAY MEAN",
                   "P50", "P95", "P99", "JCT MEAN", "PREEMPTIONS", "GPU-H LOST"});
  auto hours = [](double s) { return absl::StrFormat("%.2f h", s / 3600); };
  table.AddRow({r->policy, absl::StrFormat("%d", r->pods), absl::StrFormat("%d", r->completed),
                absl::StrFormat("%d", r->never_placed), absl::StrFormat("%.1f%%", 100 * r->mean_gpu_allocation),
                hours(r->queue_delay_mean_s), hours(r->queue_delay_p50_s), hours(r->queue_delay_p95_s),
                hours(r->queue_delay_p99_s), hours(r->jct_mean_s), absl::StrFormat("%d", r->preemptions),
                absl::StrFormat("%.1f", r->gpu_hours_lost)});
  std::cout << table.Render() << "GPU allocation by week: " << Sparkline(r->allocation_samples)
            << "  (▁ = 0-12%, █ = 88-100%)\n";
}

}  // namespace gpupool::cli
