#include "runtime/service/head_http.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/service/head_report_json.h"
#include "runtime/service/history_sampler.h"
#include "runtime/service/http/dashboard_page.h"
#include "runtime/service/metrics/head_metrics.h"

namespace gpupool::runtime {
namespace {

HttpResponse Json(std::string body) {
  return HttpResponse{.status = 200, .content_type = "application/json", .body = std::move(body)};
}

HttpResponse Error(int status, std::string why) {
  nlohmann::json body = {{"error", why}};
  return HttpResponse{.status = status, .content_type = "application/json", .body = body.dump() + "\n"};
}

HttpResponse FromStatus(const absl::Status& st) {
  // Bad parameters are the caller's to fix; a head without a journal cannot answer at all.
  int code = absl::IsInvalidArgument(st) ? 400 : absl::IsFailedPrecondition(st) ? 409 : 500;
  return Error(code, std::string(st.message()));
}

// A query parameter as Unix seconds; `fallback` when absent.
absl::StatusOr<double> Seconds(const HttpRequest& r, const std::string& name, double fallback) {
  auto it = r.query.find(name);
  if (it == r.query.end() || it->second.empty()) return fallback;
  double v = 0;
  if (!absl::SimpleAtod(it->second, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' must be Unix seconds, not '", it->second, "'"));
  }
  return v;
}

HttpResponse Usage(const HeadHttpDeps& deps, const HttpRequest& r, const Viewer& viewer) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  absl::StatusOr<double> since = Seconds(r, "since", now - 86400);
  if (!since.ok()) return FromStatus(since.status());
  absl::StatusOr<double> until = Seconds(r, "until", now);
  if (!until.ok()) return FromStatus(until.status());
  UsageQuery q{.from_s = *since, .to_s = *until};
  if (auto by = r.query.find("by"); by != r.query.end()) q.group_by = by->second;
  if (auto idle = r.query.find("idle"); idle != r.query.end()) q.idle_share = idle->second == "share";
  absl::StatusOr<std::string> report = UsageJson(deps.journal, deps.pool, q, viewer, deps.history_interval_s);
  if (!report.ok()) return FromStatus(report.status());
  return Json(*std::move(report));
}

}  // namespace

HttpResponse HandleHeadHttp(const HeadHttpDeps& deps, const HttpRequest& request) {
  const std::string& path = request.path;
  if (path == "/" || path == "/index.html") {
    return HttpResponse{.status = 200, .content_type = "text/html; charset=utf-8", .body = std::string(DashboardPage())};
  }
  if (path != "/metrics" && !absl::StartsWith(path, "/api/v1/")) return Error(404, absl::StrCat("no page ", path));
  std::string authorization = request.Header("authorization");
  std::optional<Viewer> viewer;
  if (absl::StartsWith(authorization, "Bearer ")) viewer = deps.auth.Identify(authorization.substr(7));
  if (!viewer.has_value()) {
    HttpResponse denied = Error(401, "send 'Authorization: Bearer <token>' with the operators', a team's or the agents' token");
    denied.headers.push_back({"WWW-Authenticate", "Bearer realm=\"gpupool\""});
    return denied;
  }
  if (path == "/metrics") {
    return HttpResponse{.status = 200, .content_type = "text/plain; version=0.0.4; charset=utf-8",
                        .body = RenderHeadMetrics(deps.pool.Snapshot(), *viewer)};
  }
  if (path == "/api/v1/status") return Json(deps.report(*viewer));
  if (path == "/api/v1/queue") {
    nlohmann::json report = nlohmann::json::parse(deps.report(*viewer));
    nlohmann::json queue = {{"pool_time_s", report["pool_time_s"]}, {"leases", report["leases"]},
                            {"pending", report["pending"]}, {"reserve", report["reserve"]}, {"totals", report["totals"]},
                            {"viewer", report["viewer"]}};
    return Json(queue.dump());
  }
  if (path == "/api/v1/usage") return Usage(deps, request, *viewer);
  if (path == "/api/v1/history") {
    if (deps.journal == nullptr) return Error(409, "this head keeps no journal (start it with --journal PATH)");
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    absl::StatusOr<double> since = Seconds(request, "since", now - 86400);
    if (!since.ok()) return FromStatus(since.status());
    absl::StatusOr<double> until = Seconds(request, "until", now + 1);
    if (!until.ok()) return FromStatus(until.status());
    absl::StatusOr<std::vector<HistoryRow>> rows = deps.journal->History(*since, *until);
    if (!rows.ok()) return FromStatus(rows.status());
    nlohmann::json out = nlohmann::json::array();
    for (const HistoryRow& r : *rows) {
      // The pool's and each model's rows are pool-wide aggregates, which every viewer sees.
      if (r.scope != "pool" && !absl::StartsWith(r.scope, kModelScopePrefix) && !viewer->Sees(r.scope)) continue;
      out.push_back({{"t_s", r.t_s}, {"scope", r.scope}, {"allocated_gpus", r.allocated_gpus},
                     {"capacity_gpus", r.capacity_gpus}, {"borrowed_gpus", r.borrowed_gpus}, {"pending", r.pending}});
    }
    return Json(nlohmann::json{{"rows", out}}.dump());
  }
  if (path == "/api/v1/savings") {
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    absl::StatusOr<double> since = Seconds(request, "since", now - 7 * 86400);
    if (!since.ok()) return FromStatus(since.status());
    absl::StatusOr<double> until = Seconds(request, "until", now);
    if (!until.ok()) return FromStatus(until.status());
    absl::StatusOr<std::string> report = SavingsJson(deps.journal, deps.pool, *since, *until, *viewer);
    if (!report.ok()) return FromStatus(report.status());
    return Json(*std::move(report));
  }
  return Error(404, absl::StrCat("no API ", path));
}

}  // namespace gpupool::runtime
