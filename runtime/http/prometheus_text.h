// File: runtime/http/prometheus_text.h
//
// Writes the Prometheus text exposition format (version 0.0.4): a `# HELP` and `# TYPE` line per
// family, then its samples, label values escaped (backslash, double quote, line feed) so that a
// client-chosen value such as a project name cannot break the format or forge a sample.
//
//   PrometheusText out;
//   out.Family("gpupool_node_up", "gauge", "1 while the node's agent is connected");
//   out.Sample("gpupool_node_up", {{"node", "node-0"}}, 1);
//   std::string text = out.Take();
//
// Not thread-safe (one per scrape).
#ifndef GPUPOOL_RUNTIME_HTTP_PROMETHEUS_TEXT_H_
#define GPUPOOL_RUNTIME_HTTP_PROMETHEUS_TEXT_H_

#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "runtime/http/histogram.h"

namespace gpupool::runtime {

using PromLabels = std::vector<std::pair<absl::string_view, absl::string_view>>;

// `value` as a label value inside double quotes: \ → \\, " → \", line feed → \n.
std::string EscapeLabelValue(absl::string_view value);

class PrometheusText {
 public:
  void Family(absl::string_view name, absl::string_view type, absl::string_view help);
  void Sample(absl::string_view name, const PromLabels& labels, double value);
  // `name`_bucket (cumulative, with le), `name`_sum and `name`_count.
  void HistogramSamples(absl::string_view name, const PromLabels& labels, const Histogram& h);
  std::string Take() { return std::move(out_); }

 private:
  void Labels(const PromLabels& labels, absl::string_view extra_name = {}, absl::string_view extra_value = {});
  std::string out_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_HTTP_PROMETHEUS_TEXT_H_
