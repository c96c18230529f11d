// File: pool/sim/html_report.h
//
// Simulation results as a web page: an SVG line chart, and a self-contained HTML page to hold it
// (no scripts, no external files: it opens from disk and can be mailed).
//
//   LineChart chart{.title = "allocation", .x_label = "arrived (%)", .y_label = "allocated (%)",
//                   .x_max = 130, .y_max = 100};
//   chart.series.push_back({"gpupool", {{0, 0}, {50, 49.9}, {100, 95.4}}});
//   std::string page = HtmlPage("openb", LineChartSvg(chart));
#ifndef GPUPOOL_POOL_SIM_HTML_REPORT_H_
#define GPUPOOL_POOL_SIM_HTML_REPORT_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace gpupool::pool::sim {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y) in data units, in x order
};

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  double x_min = 0, x_max = 100, x_tick = 10;  // axis range and spacing of its grid lines
  double y_min = 0, y_max = 100, y_tick = 10;
  // A dashed reference line y = x (e.g. "every arrival placed"), named in the legend.
  std::string diagonal;
  std::vector<ChartSeries> series;
};

// An <svg> element. Points outside the axis range are clipped to it; series keep their order in
// the legend and a fixed colour each.
std::string LineChartSvg(const LineChart& chart);

// A complete HTML document titled `title` whose body is `body_html` (trusted markup: escape any
// text with HtmlEscape first).
std::string HtmlPage(std::string_view title, std::string_view body_html);

std::string HtmlEscape(std::string_view text);

// Writes HtmlPage(title, body_html) to `path`; an error naming the path if it cannot.
absl::Status WriteHtmlPage(const std::string& path, std::string_view title, std::string_view body_html);

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_HTML_REPORT_H_
