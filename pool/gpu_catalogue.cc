#include "absl/strings/string_view.h"
#include "pool/gpu_catalogue.h"

#include <algorithm>
#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gpupool::pool {
namespace {

// NVML_GPU_INSTANCE_PROFILE_* indices (nvml.h).
constexpr int kNvmlGi1Slice = 0x0;
constexpr int kNvmlGi2Slice = 0x1;
constexpr int kNvmlGi3Slice = 0x2;
constexpr int kNvmlGi4Slice = 0x3;
constexpr int kNvmlGi7Slice = 0x4;
constexpr int kNvmlGi1SliceRev1 = 0x7;  // 1g with media extensions
constexpr int kNvmlGi2SliceRev1 = 0x8;  // 2g with media extensions (A30)
constexpr int kNvmlGi1SliceRev2 = 0x9;  // 1g with twice the memory

// The instance sizes named in a MIG family, e.g. H100-80GB: 1g.10gb, 1g.20gb, 2g.20gb, ...
struct EightSliceFamily {
  int gb_1g, gb_1g_double, gb_2g, gb_3g, gb_4g, gb_7g;
  int sms_1g, sms_2g, sms_3g, sms_4g, sms_7g;
};

MigProfile Profile(std::string name, int compute, int memory_slices, int sms, int max_instances,
                   std::vector<int> starts, int nvml, bool media = false) {
  MigProfile p;
  p.name = std::move(name);
  p.compute_slices = compute;
  p.memory_slices = memory_slices;
  p.sm_count = sms;
  p.max_instances = max_instances;
  p.allowed_starts = std::move(starts);
  p.nvml_profile = nvml;
  p.media_extensions = media;
  return p;
}

// A100, H100 and H200 share one layout: 8 memory slices, 7 compute slices. NVIDIA's placement
// table (MIG user guide, "Supported MIG Profiles"): 7g at 0; 4g at 0; 3g at 0 or 4; 2g at 0, 2, 4;
// the double-memory 1g at 0, 2, 4, 6; 1g (with or without +me) at 0..6. Slice 7 is never the
// start of a 1g: its compute slice belongs to the 7th 1g at slot 6.
std::vector<MigProfile> EightSliceProfiles(const EightSliceFamily& f) {
  auto gb = [](int n) { return absl::StrCat(n, "gb"); };
  return {
      Profile(absl::StrCat("7g.", gb(f.gb_7g)), 7, 8, f.sms_7g, 1, {0}, kNvmlGi7Slice),
      Profile(absl::StrCat("4g.", gb(f.gb_4g)), 4, 4, f.sms_4g, 1, {0}, kNvmlGi4Slice),
      Profile(absl::StrCat("3g.", gb(f.gb_3g)), 3, 4, f.sms_3g, 2, {0, 4}, kNvmlGi3Slice),
      Profile(absl::StrCat("2g.", gb(f.gb_2g)), 2, 2, f.sms_2g, 3, {0, 2, 4}, kNvmlGi2Slice),
      Profile(absl::StrCat("1g.", gb(f.gb_1g_double)), 1, 2, f.sms_1g, 4, {0, 2, 4, 6},
              kNvmlGi1SliceRev2),
      Profile(absl::StrCat("1g.", gb(f.gb_1g)), 1, 1, f.sms_1g, 7, {0, 1, 2, 3, 4, 5, 6},
              kNvmlGi1Slice),
      Profile(absl::StrCat("1g.", gb(f.gb_1g), "+me"), 1, 1, f.sms_1g, 1, {0, 1, 2, 3, 4, 5, 6},
              kNvmlGi1SliceRev1, /*media=*/true),
  };
}

// A30: 4 memory slices, 4 compute slices (MIG user guide, "A30 MIG Profiles").
std::vector<MigProfile> A30Profiles() {
  return {
      Profile("4g.24gb", 4, 4, 56, 1, {0}, kNvmlGi4Slice),
      Profile("2g.12gb", 2, 2, 28, 2, {0, 2}, kNvmlGi2Slice),
      Profile("2g.12gb+me", 2, 2, 28, 1, {0, 2}, kNvmlGi2SliceRev1, /*media=*/true),
      Profile("1g.6gb", 1, 1, 14, 4, {0, 1, 2, 3}, kNvmlGi1Slice),
      Profile("1g.6gb+me", 1, 1, 14, 1, {0, 1, 2, 3}, kNvmlGi1SliceRev1, /*media=*/true),
  };
}

GpuModel Model(std::string name, std::string marketing, std::vector<std::string> driver_names,
               int memory_mib, int sms, int cc_major, int cc_minor, NvLinkSpec nvlink,
               double price) {
  GpuModel m;
  m.name = std::move(name);
  m.marketing_name = std::move(marketing);
  m.driver_names = std::move(driver_names);
  m.memory_mib = memory_mib;
  m.sm_count = sms;
  m.compute_capability_major = cc_major;
  m.compute_capability_minor = cc_minor;
  m.nvlink = nvlink;
  m.default_price_per_hour = price;
  return m;
}

GpuModel WithMig(GpuModel m, int memory_slices, int compute_slices,
                 std::vector<MigProfile> profiles) {
  m.mig_memory_slices = memory_slices;
  m.mig_compute_slices = compute_slices;
  // Instance memory is approximated as the slice share of the GPU's usable memory; NVML reports
  // slightly less because each instance reserves some for its own contexts.
  for (MigProfile& p : profiles) p.memory_mib = m.memory_mib / memory_slices * p.memory_slices;
  m.mig_profiles = std::move(profiles);
  return m;
}

// Prices are illustrative on-demand list prices (USD per GPU-hour), meant to be overridden by the
// pool's configuration with what the organisation actually pays.
std::vector<GpuModel> BuildCatalogue() {
  std::vector<GpuModel> c;
  c.push_back(WithMig(Model("A100-40GB", "NVIDIA A100-SXM4-40GB", {"A100"}, 40960, 108, 8, 0,
                            {12, 600}, 3.00),
                      8, 7, EightSliceProfiles({5, 10, 10, 20, 20, 40, 14, 28, 42, 56, 98})));
  c.push_back(WithMig(Model("A100-80GB", "NVIDIA A100-SXM4-80GB", {"A100"}, 81920, 108, 8, 0,
                            {12, 600}, 3.70),
                      8, 7, EightSliceProfiles({10, 20, 20, 40, 40, 80, 14, 28, 42, 56, 98})));
  c.push_back(WithMig(Model("H100-80GB", "NVIDIA H100 80GB HBM3", {"H100"}, 81559, 132, 9, 0,
                            {18, 900}, 4.50),
                      8, 7, EightSliceProfiles({10, 20, 20, 40, 40, 80, 16, 32, 60, 64, 132})));
  c.push_back(WithMig(Model("H200-141GB", "NVIDIA H200", {"H200"}, 143771, 132, 9, 0, {18, 900},
                            5.50),
                      8, 7, EightSliceProfiles({18, 35, 35, 71, 71, 141, 16, 32, 60, 64, 132})));
  c.push_back(WithMig(Model("A30-24GB", "NVIDIA A30", {"A30"}, 24258, 56, 8, 0, {4, 200}, 1.20),
                      4, 4, A30Profiles()));
  c.push_back(Model("L40S", "NVIDIA L40S", {"L40S"}, 46068, 142, 8, 9, {0, 0}, 1.80));
  c.push_back(Model("L4", "NVIDIA L4", {"L4"}, 23034, 58, 8, 9, {0, 0}, 0.70));
  c.push_back(Model("A10", "NVIDIA A10", {"A10", "A10G"}, 23028, 72, 8, 6, {0, 0}, 1.00));
  c.push_back(Model("T4", "Tesla T4", {"T4"}, 15360, 40, 7, 5, {0, 0}, 0.35));
  c.push_back(Model("V100-16GB", "Tesla V100-SXM2-16GB", {"V100"}, 16160, 80, 7, 0, {6, 300},
                    2.48));
  c.push_back(Model("V100-32GB", "Tesla V100-SXM2-32GB", {"V100"}, 32510, 80, 7, 0, {6, 300},
                    2.90));
  return c;
}

const std::vector<GpuModel>& Catalogue() {
  static const std::vector<GpuModel>* const catalogue =
      new std::vector<GpuModel>(BuildCatalogue());
  return *catalogue;
}

}  // namespace

const MigProfile* GpuModel::FindMigProfile(absl::string_view profile_name) const {
  absl::string_view name = absl::StripAsciiWhitespace(profile_name);
  if (absl::StartsWithIgnoreCase(name, "MIG ")) name.remove_prefix(4);
  for (const MigProfile& p : mig_profiles) {
    if (absl::EqualsIgnoreCase(p.name, name)) return &p;
  }
  return nullptr;
}

std::vector<ComputeInstanceProfile> GpuModel::ComputeProfilesFor(
    const MigProfile& gpu_instance) const {
  // NVML_COMPUTE_INSTANCE_PROFILE_{1,2,3,4,7}_SLICE = 0..4. Inside a 4g instance NVIDIA offers
  // 1c, 2c and 4c but no 3c; inside a 3g, 1c to 3c; a 7g offers every size.
  static constexpr struct { int slices; int nvml; } kAll[] = {{7, 4}, {4, 3}, {3, 2}, {2, 1}, {1, 0}};
  std::vector<ComputeInstanceProfile> out;
  for (const auto& ci : kAll) {
    if (ci.slices > gpu_instance.compute_slices) continue;
    if (gpu_instance.compute_slices == 4 && ci.slices == 3) continue;
    out.push_back({ci.slices, ci.nvml});
  }
  return out;
}

std::string GpuModel::ComputeProfileName(const MigProfile& gpu_instance, int compute_slices) {
  if (compute_slices == gpu_instance.compute_slices) return gpu_instance.name;
  return absl::StrCat(compute_slices, "c.", gpu_instance.name);
}

std::span<const GpuModel> GpuCatalogue() { return Catalogue(); }

const GpuModel* FindGpuModel(absl::string_view name) {
  name = absl::StripAsciiWhitespace(name);
  for (const GpuModel& m : Catalogue()) {
    if (absl::EqualsIgnoreCase(m.name, name)) return &m;
  }
  return nullptr;
}

std::string KnownGpuModelNames() {
  std::vector<absl::string_view> names;
  for (const GpuModel& m : Catalogue()) names.push_back(m.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<const GpuModel*> RequireGpuModel(absl::string_view name) {
  if (const GpuModel* m = FindGpuModel(name)) return m;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown GPU model '", name, "' (known: ", KnownGpuModelNames(), ")"));
}

const GpuModel* MatchDriverReportedModel(absl::string_view device_name, uint64_t memory_mib) {
  // Driver names are like "NVIDIA A100-SXM4-40GB" or "Tesla T4": match a whole token, then let
  // memory (within 10%) separate the variants that share a token (A100 40/80 GB, V100 16/32 GB)
  // and reject ones the catalogue lacks (H100 NVL with 94 GB).
  std::vector<std::string> tokens = absl::StrSplit(
      absl::AsciiStrToUpper(device_name), absl::ByAnyChar(" -_"), absl::SkipEmpty());
  for (const GpuModel& m : Catalogue()) {
    bool name_matches = std::any_of(m.driver_names.begin(), m.driver_names.end(),
                                    [&](const std::string& n) {
                                      return std::find(tokens.begin(), tokens.end(), n) !=
                                             tokens.end();
                                    });
    if (!name_matches) continue;
    double ratio = static_cast<double>(memory_mib) / m.memory_mib;
    if (ratio > 0.9 && ratio < 1.1) return &m;
  }
  return nullptr;
}

}  // namespace gpupool::pool
