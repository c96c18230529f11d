// openb_bench: the FGD paper's headline experiment (ATC '23, Fig. 9a) on the four openb traces.
// Every policy is replayed over the same seeds in protocol mode and its allocation at 100% arrival
// is printed beside the published figures (traces/openb/README.md) and beside FGD and best-fit as
// measured in this same run, so the comparison does not depend on the machine.
//
//   openb_bench [--traces DIR] [--workloads default,gpushare40,...] [--policies gpupool,fgd,...]
//               [--seeds 42-51] [--tune 1.3] [--tie-order name|shuffled] [--json]
//   openb_bench --ceiling [--traces DIR] [--workloads ...] [--seeds 42-51]
//
// --ceiling replays no policy: it prints, per trace, how much of the GPUs any placement could
// allocate at 100% arrival when the sharing pods' leftover room is lost to whole-GPU pods
// (pool/sim/packing_ceiling.h): a bound, and First-Fit-Decreasing's estimate.
//
// With --json, one line per figure: {"bench","metric","value","unit","reference","reference_value"}.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/json_figure.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "pool/placement/policy_registry.h"
#include "pool/sim/packing_ceiling.h"
#include "pool/sim/protocol.h"
#include "pool/sim/seed_list.h"
#include "pool/sim/trace_reader.h"

namespace {

namespace sim = gpupool::pool::sim;

struct Published {
  const char* workload;
  double fgd;
  double best_fit;
};

// Mean of seeds 42-51 at 100% arrival, from the paper (as listed in traces/openb/README.md).
constexpr Published kPublished[] = {
    {"default", 95.23, 92.86},
    {"gpushare40", 93.96, 91.44},
    {"gpuspec10", 94.66, 93.10},
    {"multigpu20", 95.53, 93.73},
};

struct Args {
  std::string traces;
  std::vector<std::string> workloads = {"default", "gpushare40", "gpuspec10", "multigpu20"};
  std::vector<std::string> policies = {"gpupool", "fgd", "best-fit", "first-fit", "dot-product", "random"};
  std::string seeds = "42-51";
  double tune = 1.3;
  sim::TieOrder tie_order = sim::TieOrder::kByName;
  bool json = false;
  bool ceiling = false;
};

[[noreturn]] void Usage(const std::string& problem) {
  std::fprintf(stderr,
               "openb_bench: %s\nusage: openb_bench [--traces DIR] [--workloads a,b] "
               "[--policies a,b] [--seeds 42-51] [--tune 1.3] [--tie-order name|shuffled] [--json] "
               "[--ceiling]\n",
               problem.c_str());
  std::exit(2);
}

// The trace folder: --traces, else ../shared/traces/openb from the repository root (the current
// directory when run by bench/run, or the source tree this binary was built from).
std::string DefaultTraces() {
  for (std::filesystem::path p : {std::filesystem::path("../shared/traces/openb"),
                                  std::filesystem::path(GPUPOOL_SOURCE_ROOT) / "../shared/traces/openb"}) {
    if (std::filesystem::exists(p / "openb_node_list_gpu_node.csv")) return p.string();
  }
  return "../shared/traces/openb";
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--traces") a.traces = value();
    else if (flag == "--workloads") a.workloads = absl::StrSplit(value(), ',', absl::SkipEmpty());
    else if (flag == "--policies") a.policies = absl::StrSplit(value(), ',', absl::SkipEmpty());
    else if (flag == "--seeds") a.seeds = value();
    else if (flag == "--tune") a.tune = std::atof(value().c_str());
    else if (flag == "--tie-order") {
      const std::string v = value();
      if (v == "name") a.tie_order = sim::TieOrder::kByName;
      else if (v == "shuffled") a.tie_order = sim::TieOrder::kShuffledPerSeed;
      else Usage("--tie-order is name or shuffled");
    } else if (flag == "--json") a.json = true;
    else if (flag == "--ceiling") a.ceiling = true;
    else if (flag == "--help" || flag == "-h") Usage("help");
    else Usage("unknown option " + flag);
  }
  if (a.traces.empty()) a.traces = DefaultTraces();
  return a;
}

void JsonLine(const std::string& metric, double value, const std::string& reference,
              double reference_value) {
  gpupool::bench::PrintJsonFigure("openb", metric.c_str(), value, "%", reference.c_str(),
                                  reference_value);
}

// The --ceiling table: means over the seeds of pool/sim/packing_ceiling.h's figures at 100%.
void PrintCeilings(const Args& args, const std::vector<sim::NodeCapacity>& nodes,
                   const std::vector<uint64_t>& seeds) {
  std::printf("openb: allocation %% at 100%% arrival that no placement placing every sharing pod "
              "can pass (mean of seeds %s)\n",
              args.seeds.c_str());
  std::printf("%-11s %11s %13s %11s %13s %13s\n", "trace", "share pods", "share GPUs", "GPUs (L2)",
              "bound", "FFD estimate");
  for (const std::string& workload : args.workloads) {
    absl::StatusOr<std::vector<sim::PodSpec>> pods =
        sim::ReadPodList(args.traces + "/openb_pod_list_" + workload + ".csv");
    if (!pods.ok()) Usage(std::string(pods.status().message()));
    double share_pods = 0, share_gpus = 0, bins = 0, bound = 0, ffd = 0;
    for (uint64_t seed : seeds) {
      absl::StatusOr<sim::PackingCeiling> c = sim::EstimatePackingCeiling(nodes, *pods, args.tune, seed);
      if (!c.ok()) Usage(std::string(c.status().message()));
      share_pods += c->share_pods;
      share_gpus += c->share_milli / 1000.0;
      bins += c->bins_lower_bound;
      bound += c->ceiling_pct_bound;
      ffd += c->ceiling_pct_ffd;
    }
    const double n = static_cast<double>(seeds.size());
    if (args.json) {
      JsonLine(workload + ".ceiling_ffd_pct_at_100", ffd / n, "ceiling bound (same run)", bound / n);
      continue;
    }
    std::printf("%-11s %11.0f %13.1f %11.1f %12.2f%% %12.2f%%\n", workload.c_str(), share_pods / n,
                share_gpus / n, bins / n, bound / n, ffd / n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = Parse(argc, argv);
  absl::StatusOr<std::vector<uint64_t>> seeds = sim::ParseSeedList(args.seeds);
  if (!seeds.ok()) Usage(std::string(seeds.status().message()));
  absl::StatusOr<std::vector<sim::NodeCapacity>> nodes =
      sim::ReadNodeList(args.traces + "/openb_node_list_gpu_node.csv");
  if (!nodes.ok()) Usage(std::string(nodes.status().message()));
  if (args.ceiling) {
    PrintCeilings(args, *nodes, *seeds);
    return 0;
  }

  if (!args.json) {
    std::printf("openb, protocol mode: allocation %% at 100%% arrival, mean of seeds %s, tune %.2f\n",
                args.seeds.c_str(), args.tune);
    std::printf("%-11s %-12s %9s %9s %9s %10s %10s %8s\n", "trace", "policy", "measured",
                "vs FGD", "vs bf", "pub. FGD", "pub. bf", "sec/seed");
  }
  for (const std::string& workload : args.workloads) {
    const Published* published = nullptr;
    for (const Published& p : kPublished) {
      if (workload == p.workload) published = &p;
    }
    absl::StatusOr<std::vector<sim::PodSpec>> pods =
        sim::ReadPodList(args.traces + "/openb_pod_list_" + workload + ".csv");
    if (!pods.ok()) Usage(std::string(pods.status().message()));

    std::map<std::string, double> measured;
    std::map<std::string, double> seconds;
    for (const std::string& policy : args.policies) {
      sim::ProtocolOptions options;
      options.policy = policy;
      options.seeds = *seeds;
      options.tune = args.tune;
      options.tie_order = args.tie_order;
      options.on_seed_done = [&](const sim::SeedResult& s, int done, int total) {
        std::fprintf(stderr, "\r%s %s: seed %llu (%d/%d) %.2f%% in %.1fs   ", workload.c_str(),
                     policy.c_str(), static_cast<unsigned long long>(s.seed), done, total,
                     s.allocated_pct[100].value_or(0), s.seconds);
      };
      absl::StatusOr<sim::ProtocolResult> r = sim::RunProtocol(*nodes, *pods, options);
      std::fprintf(stderr, "\r%80s\r", "");
      if (!r.ok()) Usage(std::string(r.status().message()));
      const std::string name = r->policy;
      measured[name] = r->mean_allocated_pct[100].value_or(0);
      double total_seconds = 0;
      for (const sim::SeedResult& s : r->seeds) total_seconds += s.seconds;
      seconds[name] = r->seeds.empty() ? 0 : total_seconds / r->seeds.size();
    }
    auto same_run = [&](const std::string& p) -> std::optional<double> {
      if (auto it = measured.find(p); it != measured.end()) return it->second;
      return std::nullopt;
    };
    for (const auto& policy_arg : args.policies) {
      const std::string name(gpupool::pool::placement::CanonicalPolicyName(policy_arg));
      const double v = measured[name];
      if (args.json) {
        const std::string metric = absl::StrCat(workload, ".", name, ".allocated_pct_at_100");
        if (published && name == "best-fit") {
          JsonLine(metric, v, "published best-fit (ATC'23)", published->best_fit);
        } else if (published && (name == "fgd" || name == "gpupool")) {
          JsonLine(metric, v, "published FGD (ATC'23)", published->fgd);
        } else if (auto bf = same_run("best-fit")) {
          JsonLine(metric, v, "best-fit (same run)", *bf);
        }
        if (name == "gpupool") {
          if (auto fgd = same_run("fgd")) JsonLine(metric, v, "fgd (same run)", *fgd);
        }
        continue;
      }
      auto diff = [&](const std::string& other) -> std::string {
        auto o = same_run(other);
        return o ? absl::StrFormat("%+.2f", v - *o) : std::string("-");
      };
      const std::string pub_fgd = published ? absl::StrFormat("%.2f", published->fgd) : "-";
      const std::string pub_bf = published ? absl::StrFormat("%.2f", published->best_fit) : "-";
      std::printf("%-11s %-12s %9.2f %9s %9s %10s %10s %8.2f\n", workload.c_str(), name.c_str(), v,
                  diff("fgd").c_str(), diff("best-fit").c_str(), pub_fgd.c_str(), pub_bf.c_str(),
                  seconds[name]);
    }
    std::fflush(stdout);
  }
  return 0;
}
