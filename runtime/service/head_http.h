// File: runtime/service/head_http.h
//
// What the head's HTTP endpoint answers (gpupool head --http-listen): the routes over the
// HttpServer (http/http_server.h).
//   /                 the dashboard page (http/dashboard_page.h): no token, no data
//   /metrics          Prometheus text (metrics/head_metrics.h)
//   /api/v1/status    the pool's report, as `gpupool status --json`
//   /api/v1/queue     its leases and pending requests, as `gpupool queue --json`
//   /api/v1/usage     chargeback, as `gpupool usage --json`; query: since, until (Unix seconds;
//                     default the last 24 hours), by, idle=share
//   /api/v1/history   the pool's (and the viewer's teams') sampled aggregates; query: since,
//                     until (default the last 24 hours)
//   /api/v1/savings   the savings report, as `gpupool savings --json`; query: since, until
//                     (default the last 7 days)
// Everything but / needs `Authorization: Bearer <token>` and answers 401 with no data without
// one that is somebody's; what the token sees follows head_auth.h.
//
// Threads: the HTTP server's. It never runs a scheduling cycle: /metrics copies the pool's
// snapshot (a short hold of the pool's lock), the report is made by `report` (the RPC loop's
// thread, where the sessions live), usage reads the journal's read connection.
#ifndef GPUPOOL_RUNTIME_SERVICE_HEAD_HTTP_H_
#define GPUPOOL_RUNTIME_SERVICE_HEAD_HTTP_H_

#include <functional>
#include <string>

#include "runtime/service/head_auth.h"
#include "runtime/http/http_request.h"
#include "runtime/service/journal/head_journal.h"
#include "runtime/service/pool_service.h"

namespace gpupool::runtime {

struct HeadHttpDeps {
  const HeadAuth& auth;
  PoolService& pool;
  HeadJournal* journal;  // null: usage answers that the head keeps none
  // The report (head_report_json.h) for a viewer, made where the sessions live.
  std::function<std::string(const Viewer&)> report;
  double history_interval_s = 0;  // how often the head samples its history (usage reads it); 0: never
};

HttpResponse HandleHeadHttp(const HeadHttpDeps& deps, const HttpRequest& request);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_HEAD_HTTP_H_
