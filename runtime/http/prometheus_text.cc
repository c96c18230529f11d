#include "runtime/http/prometheus_text.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpupool::runtime {
namespace {

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.15g", v);
}

}  // namespace

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void PrometheusText::Family(absl::string_view name, absl::string_view type, absl::string_view help) {
  absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void PrometheusText::Labels(const PromLabels& labels, absl::string_view extra_name, absl::string_view extra_value) {
  if (labels.empty() && extra_name.empty()) return;
  out_ += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    absl::StrAppend(&out_, first ? "" : ",", k, "=\"", EscapeLabelValue(v), "\"");
    first = false;
  }
  if (!extra_name.empty()) absl::StrAppend(&out_, first ? "" : ",", extra_name, "=\"", extra_value, "\"");
  out_ += '}';
}

void PrometheusText::Sample(absl::string_view name, const PromLabels& labels, double value) {
  out_.append(name.data(), name.size());
  Labels(labels);
  absl::StrAppend(&out_, " ", Number(value), "\n");
}

void PrometheusText::HistogramSamples(absl::string_view name, const PromLabels& labels, const Histogram& h) {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    std::string le = i < h.bounds().size() ? Number(h.bounds()[i]) : "+Inf";
    absl::StrAppend(&out_, name, "_bucket");
    Labels(labels, "le", le);
    absl::StrAppend(&out_, " ", cumulative, "\n");
  }
  absl::StrAppend(&out_, name, "_sum");
  Labels(labels);
  absl::StrAppend(&out_, " ", Number(h.sum()), "\n", name, "_count");
  Labels(labels);
  absl::StrAppend(&out_, " ", h.count(), "\n");
}

}  // namespace gpupool::runtime
