#include "runtime/agent/fault_plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpupool::runtime {
namespace {

constexpr char kKinds[] = "xid-N, ecc-dbe, ecc-sbe, silent-corruption, off-bus or repaired";

}  // namespace

absl::StatusOr<FaultInjection> ParseFaultInjection(absl::string_view spec) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("--inject '", spec, "': ", what, " (expected GPU:KIND@SECONDS, KIND one of ", kKinds, ")"));
  };
  const size_t colon = spec.find(':');
  const size_t at = spec.rfind('@');
  if (colon == absl::string_view::npos || at == absl::string_view::npos || at < colon) {
    return bad("no ':' before the kind or no '@' before the seconds");
  }
  FaultInjection f;
  f.text = std::string(spec);
  if (!absl::SimpleAtoi(spec.substr(0, colon), &f.gpu) || f.gpu < 0) {
    return bad(absl::StrCat("'", spec.substr(0, colon), "' is not a GPU index"));
  }
  if (!absl::SimpleAtod(spec.substr(at + 1), &f.at_s) || !std::isfinite(f.at_s) || f.at_s < 0) {
    return bad(absl::StrCat("'", spec.substr(at + 1), "' is not a number of seconds >= 0"));
  }
  const absl::string_view kind = spec.substr(colon + 1, at - colon - 1);
  if (kind == "ecc-dbe") {
    f.kind = FaultKind::kEccDoubleBit;
  } else if (kind == "ecc-sbe") {
    f.kind = FaultKind::kEccSingleBit;
  } else if (kind == "silent-corruption") {
    f.kind = FaultKind::kSilentCorruption;
  } else if (kind == "off-bus") {
    f.kind = FaultKind::kOffBus;
  } else if (kind == "repaired") {
    f.kind = FaultKind::kRepaired;
  } else if (absl::StartsWith(kind, "xid-") && absl::SimpleAtoi(kind.substr(4), &f.xid) && f.xid > 0) {
    f.kind = FaultKind::kXid;
  } else {
    return bad(absl::StrCat("unknown kind '", kind, "'"));
  }
  return f;
}

absl::Status ApplyFault(pool::SimulatedDriver& driver, const std::string& driver_node, const FaultInjection& f) {
  const pool::GpuRef gpu{driver_node, f.gpu};
  switch (f.kind) {
    case FaultKind::kXid: return driver.InjectXid(gpu, f.xid);
    case FaultKind::kEccDoubleBit: return driver.InjectEccError(gpu, pool::EccErrorKind::kDoubleBit);
    case FaultKind::kEccSingleBit: return driver.InjectEccError(gpu, pool::EccErrorKind::kSingleBit);
    case FaultKind::kSilentCorruption: return driver.InjectSilentCorruption(gpu);
    case FaultKind::kOffBus: return driver.FallOffBus(gpu);
    case FaultKind::kRepaired: return driver.Repair(gpu);
  }
  return absl::InvalidArgumentError("unknown fault kind");
}

FaultInjector::FaultInjector(pool::SimulatedDriver& driver, std::string driver_node, std::vector<FaultInjection> plan,
                             Applied on_applied)
    : driver_(driver),
      node_(std::move(driver_node)),
      plan_([&] {
        std::stable_sort(plan.begin(), plan.end(),
                         [](const FaultInjection& a, const FaultInjection& b) { return a.at_s < b.at_s; });
        return std::move(plan);
      }()),
      on_applied_(std::move(on_applied)) {}

FaultInjector::~FaultInjector() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void FaultInjector::Start() {
  if (thread_.joinable() || plan_.empty()) return;
  thread_ = std::thread([this] { Loop(); });
}

void FaultInjector::Loop() {
  const auto start = std::chrono::steady_clock::now();
  for (const FaultInjection& f : plan_) {
    const auto when = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(f.at_s));
    {
      MutexLock lock(&mu_);
      if (cv_.WaitUntil(&mu_, when, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; })) return;
    }
    absl::Status st = ApplyFault(driver_, node_, f);
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (on_applied_) on_applied_(f, now, st);
  }
}

}  // namespace gpupool::runtime
