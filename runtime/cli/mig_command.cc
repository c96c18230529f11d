// `gpupool mig plan`: where a set of MIG profiles would go on one GPU, with the same planner the
// pool uses, so administrators can check a layout before repartitioning.
#include <iostream>

#include "absl/strings/string_view.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "pool/gpu_catalogue.h"
#include "pool/mig_layout.h"
#include "pool/mig_planner.h"
#include "runtime/cli/command.h"
#include "runtime/cli/text_table.h"
#include <nlohmann/json.hpp>

namespace gpupool::cli {
namespace {

struct MigPlanFlags {
  std::string model;
  std::string profiles;
  std::string existing;  // "3g.40gb@4,1g.10gb@0": instances already on the GPU
  bool json = false;
};

// Reports a failure in the form the caller asked for and ends the command with exit code 1.
[[noreturn]] void Fail(const MigPlanFlags& flags, absl::string_view message) {
  if (flags.json) {
    std::cout << nlohmann::json{{"error", message}}.dump() << "\n";
    throw CommandFailed("", 1);
  }
  throw CommandFailed(std::string(message), 1);
}

std::vector<std::string> SplitList(absl::string_view text) {
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    items.emplace_back(absl::StripAsciiWhitespace(item));
  }
  return items;
}

// "■" for each memory slice an instance holds, aligned under the slice numbers.
std::string SliceBar(const pool::GpuModel& model, const pool::MigPlacement& p) {
  std::string bar;
  for (int s = 0; s < model.mig_memory_slices; ++s) {
    bar += (s >= p.start && s < p.end()) ? "■" : "·";
    if (s + 1 < model.mig_memory_slices) bar += " ";
  }
  return bar;
}

void RunMigPlan(const MigPlanFlags& flags) {
  const pool::GpuModel* model = pool::FindGpuModel(flags.model);
  if (model == nullptr) {
    Fail(flags, absl::StrCat("unknown GPU model '", flags.model, "' (known: ",
                             pool::KnownGpuModelNames(), ")"));
  }
  if (!model->SupportsMig()) Fail(flags, absl::StrCat(model->name, " does not support MIG"));
  pool::MigLayout layout(*model);
  if (!flags.existing.empty()) {
    for (const std::string& item : SplitList(flags.existing)) {
      std::vector<std::string> parts = absl::StrSplit(item, '@');
      int start = -1;
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &start)) {
        Fail(flags, absl::StrCat("--existing item '", item, "' is not PROFILE@START"));
      }
      const pool::MigProfile* p = model->FindMigProfile(parts[0]);
      if (p == nullptr) {
        Fail(flags, absl::StrCat("unknown MIG profile '", parts[0], "' for ", model->name));
      }
      if (absl::Status s = layout.Add(*p, start); !s.ok()) {
        Fail(flags, absl::StrCat("--existing: ", s.message()));
      }
    }
  }
  std::vector<std::string> wanted = SplitList(flags.profiles);
  absl::StatusOr<std::vector<pool::MigPlacement>> plan = pool::PlanMigLayout(layout, wanted);
  if (!plan.ok()) Fail(flags, plan.status().message());

  if (flags.json) {
    nlohmann::json placements = nlohmann::json::array();
    for (const pool::MigPlacement& p : *plan) {
      placements.push_back({{"profile", p.profile->name}, {"start", p.start}, {"size", p.size()}});
    }
    std::cout << nlohmann::json{{"model", model->name}, {"placements", placements}}.dump(2) << "\n";
    return;
  }
  std::string slice_header;
  for (int s = 0; s < model->mig_memory_slices; ++s) {
    absl::StrAppend(&slice_header, s, s + 1 < model->mig_memory_slices ? " " : "");
  }
  TextTable table({"PROFILE", "START", "SIZE", "COMPUTE", "MEMORY SLICES " + slice_header});
  for (const pool::MigPlacement& p : layout.placements()) {
    table.AddRow({p.profile->name + " (existing)", std::to_string(p.start),
                  std::to_string(p.size()), absl::StrCat(p.profile->compute_slices, "/", model->mig_compute_slices),
                  std::string(14, ' ') + SliceBar(*model, p)});
  }
  int memory = model->mig_memory_slices - layout.FreeMemorySlices();
  int compute = model->mig_compute_slices - layout.FreeComputeSlices();
  for (const pool::MigPlacement& p : *plan) {
    memory += p.size();
    compute += p.profile->compute_slices;
    table.AddRow({p.profile->name, std::to_string(p.start), std::to_string(p.size()),
                  absl::StrCat(p.profile->compute_slices, "/", model->mig_compute_slices),
                  std::string(14, ' ') + SliceBar(*model, p)});
  }
  std::cout << model->name << " (" << model->mig_memory_slices << " memory slices, "
            << model->mig_compute_slices << " compute slices)\n"
            << table.Render() << "uses " << memory << "/"
            << model->mig_memory_slices << " memory slices and " << compute << "/"
            << model->mig_compute_slices << " compute slices\n";
}

}  // namespace

void RegisterMigCommand(CLI::App& app) {
  CLI::App* mig = app.add_subcommand("mig", "MIG partitioning tools");
  mig->require_subcommand(1);
  auto flags = std::make_shared<MigPlanFlags>();
  CLI::App* plan = mig->add_subcommand(
      "plan", "Choose start slots for a set of MIG profiles on one GPU (same planner as the pool)");
  plan->add_option("--model", flags->model, "GPU model, e.g. H100-80GB")->required();
  plan->add_option("--profiles", flags->profiles, "Profiles, e.g. 3g.40gb,2g.20gb,1g.10gb")
      ->required();
  plan->add_option("--existing", flags->existing,
                   "Instances already on the GPU, PROFILE@START[,...]");
  plan->add_flag("--json", flags->json, "Print JSON");
  plan->callback([flags] { RunMigPlan(*flags); });
}

}  // namespace gpupool::cli
