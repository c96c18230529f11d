// File: runtime/service/http/dashboard_page.h
//
// The head's dashboard (GET /): one self-contained HTML page, no external scripts, styles or
// fonts (clusters are often offline). It holds no data: it asks for a token, keeps it in
// sessionStorage (gone when the tab closes), and reads /api/v1/status, /api/v1/queue and
// /api/v1/usage with it every few seconds.
#ifndef GPUPOOL_RUNTIME_SERVICE_HTTP_DASHBOARD_PAGE_H_
#define GPUPOOL_RUNTIME_SERVICE_HTTP_DASHBOARD_PAGE_H_

#include <string_view>

namespace gpupool::runtime {

std::string_view DashboardPage();

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_HTTP_DASHBOARD_PAGE_H_
