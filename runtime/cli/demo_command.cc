// `gpupool demo`: the README's main job. Three teams share the embedded pool (2 simulated nodes x
// 4 H100 when the machine has no GPU; its real GPUs when it has): a training gang within its
// guaranteed quota, bursty experiments borrowing idle GPUs (and giving them back when the owner
// reclaims them), and an inference fan-out packing many small tasks onto fractions of GPUs. The
// pool's clock runs fast (default 1 real second = 30 pool minutes) so hours pass in seconds.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpupool/gpupool.h"
#include "runtime/cli/command.h"
#include "runtime/cli/demo_experiment.h"
#include "runtime/cli/text_table.h"
#include "runtime/sync/mutex.h"

namespace gpupool::cli {
namespace {

// Every catalogue model in one quota group, so the demo's quotas apply to whatever GPUs it finds.
// The experiment class's grace period is longer than the default 30 s: at 1800x, every real
// millisecond of snapshot I/O is 1.8 pool seconds.
constexpr char kDemoConfig[] = R"(
priority_classes:
  - {name: production-inference, value: 1000, preemptible: false, grace_period_s: 300}
  - {name: training, value: 500, preemptible: true, grace_period_s: 120, checkpoint_interval_s: 600}
  - {name: experiment, value: 100, preemptible: true, grace_period_s: 120, checkpoint_interval_s: 600}
model_groups:
  gpus: [H100-80GB, H200-141GB, A100-80GB, A100-40GB, A30-24GB, L40S, L4, A10, T4, V100-16GB, V100-32GB]
teams:
  - name: vision
    weight: 2
    quotas: [{gpus: gpus, nominal: 4, lending_limit: 4}]
  - name: nlp
    quotas: [{gpus: gpus, nominal: 2, borrowing_limit: 6}]
  - name: search
    quotas: [{gpus: gpus, nominal: 2, borrowing_limit: 2}]
)";

// A training step loop: `hours` of pool time in one-minute steps, each a safe point.
int TrainModel(gpupool::TaskContext& ctx, double hours) {
  int steps = static_cast<int>(hours * 60);
  for (int i = 0; i < steps; ++i) {
    ctx.SleepPoolTime(60);
    ctx.Step();
  }
  return steps;
}

// An experiment is real training (runtime/cli/demo_experiment.h), a step every 10 pool seconds,
// checkpointed. When vision reclaims a GPU nlp borrowed, the runtime snapshots the weights at the
// next Step(), and the experiment resumes from there on whatever GPU it gets next.
demo_experiment::Config ExperimentConfig(int id, double minutes) {
  return demo_experiment::Config{.seed = 1000u + id, .steps = static_cast<int32_t>(minutes * 6),
                                 .pool_seconds_per_step = 10};
}

// One inference request on a GPU fraction: a few pool seconds, with scratch memory from the
// fraction's budget.
float Infer(gpupool::TaskContext& ctx, int request) {
  gpupool::DeviceBuffer scratch = ctx.Allocate(64ull << 20);
  ctx.SleepPoolTime(20);
  return static_cast<float>(request % 97) / 97.0f;
}

GPUPOOL_REMOTE(TrainModel);
GPUPOOL_REMOTE(demo_experiment::Train);
GPUPOOL_REMOTE(Infer);

std::string Clock(double pool_s) {
  int minutes = static_cast<int>(pool_s / 60);
  return absl::StrFormat("%02d:%02d", minutes / 60, minutes % 60);
}

void RunDemo(double clock_speed, bool quiet) {
  runtime::Mutex print_mu;
  gpupool::RuntimeOptions options;
  options.config_text = kDemoConfig;
  options.simulate = "4xH100-80GB";
  options.node_count = 2;
  options.clock_speed = clock_speed;
  options.lease_linger_ms = 100;
  options.on_event = [&](const gpupool::RuntimeEvent& e) {
    if (quiet) return;
    runtime::MutexLock lock(&print_mu);
    std::printf("[%s] %-7s %-15s %s\n", Clock(e.pool_time_s).c_str(), e.team.c_str(),
                e.kind.c_str(), e.detail.c_str());
    std::fflush(stdout);
  };
  std::string notice;
  gpupool::Runtime runtime = [&] {
    try {
      return gpupool::Init(options);
    } catch (const gpupool::Error& e) {
      // A real GPU whose driver refuses us: fall back to the simulated pool, and say so.
      if (options.driver.empty()) {
        notice = std::string("real GPUs unusable (") + e.what() + "): using simulated ones";
        options.driver = "simulated";
        return gpupool::Init(options);
      }
      throw;
    }
  }();
  if (!runtime.notice().empty()) notice = runtime.notice();
  if (!notice.empty()) std::fprintf(stderr, "gpupool: %s\n", notice.c_str());
  gpupool::RuntimeStats start = runtime.Stats();
  std::printf("gpupool demo: %g GPUs, teams vision (4 guaranteed), nlp (2, may borrow 6 more), "
              "search (2)\npool clock x%g: 1 real second = %g pool minutes\n\n",
              start.pool_gpus, clock_speed, clock_speed / 60);
  std::fflush(stdout);

  auto real_for_pool = [&](double pool_s) {
    return std::chrono::duration<double>(pool_s / clock_speed);
  };
  // nlp bursts first: a sprint of 6 one-hour experiments on an idle pool borrows beyond its 2.
  std::vector<gpupool::ObjectRef<std::vector<float>>> experiments;
  std::vector<demo_experiment::Config> configs;
  for (int i = 0; i < 6; ++i) {
    configs.push_back(ExperimentConfig(i, 60.0));
    experiments.push_back(gpupool::Task(demo_experiment::Train).Gpus(1).Team("nlp")
                              .PriorityClass("experiment").Submit(configs.back()));
  }
  // search fans out 400 inference requests on eighths of GPUs, packed within its 2 GPUs.
  std::vector<gpupool::ObjectRef<float>> answers;
  for (int i = 0; i < 400; ++i) {
    answers.push_back(gpupool::Task(Infer).Gpus(0.125).GpuMemoryMib(8192).Team("search")
                          .PriorityClass("production-inference").Submit(i));
  }
  std::this_thread::sleep_for(real_for_pool(30 * 60));
  // vision starts training on its guaranteed 4 GPUs half an hour in: it reclaims what nlp borrowed.
  gpupool::ObjectRef<int> training = gpupool::Task(TrainModel).Gpus(4).Team("vision")
                                         .PriorityClass("training").Submit(3.0);
  // A second nlp burst arrives while vision trains: it can only borrow what is still idle.
  std::this_thread::sleep_for(real_for_pool(60 * 60));
  for (int i = 6; i < 10; ++i) {
    configs.push_back(ExperimentConfig(i, 45.0));
    experiments.push_back(gpupool::Task(demo_experiment::Train).Gpus(1).Team("nlp")
                              .PriorityClass("experiment").Submit(configs.back()));
  }
  int steps = *gpupool::Get(training);
  int done = 0, identical = 0;
  for (size_t i = 0; i < experiments.size(); ++i) {
    gpupool::View<std::vector<float>> w = gpupool::Get(experiments[i]);
    ++done;
    identical += *w == demo_experiment::TrainUninterrupted(configs[i]);
  }
  double answered = 0;
  for (auto& a : answers) answered += *gpupool::Get(a) >= 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let idle leases go back

  gpupool::RuntimeStats stats = runtime.Stats();
  gpupool::TeamUsage nlp;
  for (const gpupool::TeamUsage& t : stats.teams) {
    if (t.team == "nlp") nlp = t;
  }
  std::printf("\ntraining: %d steps; experiments: %d done (%llu preempted, %llu snapshots; final "
              "weights identical to uninterrupted runs: %d of %d); inference: %.0f answered\n\n",
              steps, done, static_cast<unsigned long long>(nlp.preemptions),
              static_cast<unsigned long long>(nlp.snapshots), identical, done, answered);
  TextTable table({"TEAM", "TASKS", "FAILED", "LEASES", "GPU-HOURS", "BORROWED", "BUSY", "UTILISATION",
                   "PREEMPTED", "LOST GPU-H"});
  double leased = 0;
  for (const gpupool::TeamUsage& t : stats.teams) {
    if (t.tasks_run == 0 && t.tasks_failed == 0 && t.leases == 0) continue;
    leased += t.leased_gpu_hours;
    table.AddRow({t.team, absl::StrCat(t.tasks_run), absl::StrCat(t.tasks_failed),
                  absl::StrCat(t.leases), absl::StrFormat("%.2f", t.leased_gpu_hours),
                  absl::StrFormat("%.2f", t.borrowed_gpu_hours),
                  absl::StrFormat("%.2f", t.busy_gpu_hours),
                  t.leased_gpu_hours > 0
                      ? absl::StrFormat("%.0f%%", 100 * t.busy_gpu_hours / t.leased_gpu_hours)
                      : "-",
                  absl::StrCat(t.preemptions), absl::StrFormat("%.2f", t.lost_gpu_hours)});
  }
  std::cout << table.Render();
  std::printf("\npool: %.1f pool hours, %.0f GPUs, %.1f%% of GPU-hours leased; %.0f MiB scrubbed "
              "between teams. GPU-HOURS counts fractions by their compute share; BUSY is time tasks "
              "ran on those leases; LOST GPU-H is work since the last snapshot that preemptions "
              "threw away.\n",
              stats.pool_time_s / 3600, stats.pool_gpus,
              100 * leased / (stats.pool_gpus * stats.pool_time_s / 3600),
              static_cast<double>(stats.scrubbed_bytes) / (1 << 20));
}

}  // namespace

void RegisterDemoCommand(CLI::App& app) {
  CLI::App* demo = app.add_subcommand(
      "demo", "Three teams share the embedded pool: training, borrowing experiments, packed inference");
  static double clock_speed = 1800;
  static bool quiet = false;
  demo->add_option("--clock-speed", clock_speed, "pool seconds per real second (default 1800)")
      ->check(CLI::PositiveNumber);
  demo->add_flag("--quiet", quiet, "print only the final table");
  demo->callback([] {
    try {
      RunDemo(clock_speed, quiet);
    } catch (const gpupool::Error& e) {
      throw CommandFailed(e.what());
    }
  });
}

}  // namespace gpupool::cli
