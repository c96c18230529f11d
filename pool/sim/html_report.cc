#include "pool/sim/html_report.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpupool::pool::sim {
namespace {

// Plot area inside the SVG, in pixels; the legend sits to the right of it.
constexpr double kWidth = 760, kHeight = 440;
constexpr double kLeft = 64, kRight = 560, kTop = 44, kBottom = 384;

// Distinguishable on screen and in greyscale print (Tableau 10, first colours).
constexpr const char* kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                    "#59a14f", "#edc948", "#b07aa1", "#9c755f"};

double Px(double v, double lo, double hi, double from, double to) {
  if (hi <= lo) return from;
  const double t = std::clamp((v - lo) / (hi - lo), 0.0, 1.0);
  return from + t * (to - from);
}

std::string Number(double v) {
  // Tick labels: integers stay integers, the rest keep one decimal.
  return std::fabs(v - std::round(v)) < 1e-9 ? absl::StrFormat("%.0f", v) : absl::StrFormat("%.1f", v);
}

}  // namespace

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string LineChartSvg(const LineChart& c) {
  const auto x = [&](double v) { return Px(v, c.x_min, c.x_max, kLeft, kRight); };
  const auto y = [&](double v) { return Px(v, c.y_min, c.y_max, kBottom, kTop); };
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f "
      "%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
      kWidth, kHeight, kWidth, kHeight);
  absl::StrAppend(&svg, "<text x=\"", kLeft, "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">",
                  HtmlEscape(c.title), "</text>\n");
  // Grid and tick labels.
  if (c.x_tick > 0) {
    for (double v = c.x_min; v <= c.x_max + 1e-9; v += c.x_tick) {
      absl::StrAppend(&svg, absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                                            "stroke=\"#e0e0e0\"/>\n",
                                            x(v), kTop, x(v), kBottom));
      absl::StrAppend(&svg, absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                                            x(v), kBottom + 16, Number(v)));
    }
  }
  if (c.y_tick > 0) {
    for (double v = c.y_min; v <= c.y_max + 1e-9; v += c.y_tick) {
      absl::StrAppend(&svg, absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                                            "stroke=\"#e0e0e0\"/>\n",
                                            kLeft, y(v), kRight, y(v)));
      absl::StrAppend(&svg, absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                                            kLeft - 6, y(v) + 4, Number(v)));
    }
  }
  absl::StrAppend(&svg, absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                                        "fill=\"none\" stroke=\"#555\"/>\n",
                                        kLeft, kTop, kRight - kLeft, kBottom - kTop));
  absl::StrAppend(&svg, absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                                        (kLeft + kRight) / 2, kBottom + 38, HtmlEscape(c.x_label)));
  absl::StrAppend(&svg, absl::StrFormat("<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" "
                                        "transform=\"rotate(-90 16 %.1f)\">%s</text>\n",
                                        (kTop + kBottom) / 2, (kTop + kBottom) / 2,
                                        HtmlEscape(c.y_label)));
  double legend_y = kTop + 8;
  const auto legend = [&](const std::string& name, const std::string& stroke, const char* dash) {
    absl::StrAppend(&svg, absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                                          "stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                                          kRight + 16, legend_y, kRight + 40, legend_y, stroke, dash));
    absl::StrAppend(&svg, absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", kRight + 46,
                                          legend_y + 4, HtmlEscape(name)));
    legend_y += 20;
  };
  if (!c.diagonal.empty()) {
    const double lo = std::max(c.x_min, c.y_min), hi = std::min(c.x_max, c.y_max);
    absl::StrAppend(&svg, absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                                          "stroke=\"#999\" stroke-dasharray=\"4 4\"/>\n",
                                          x(lo), y(lo), x(hi), y(hi)));
    legend(c.diagonal, "#999", " stroke-dasharray=\"4 4\"");
  }
  for (size_t i = 0; i < c.series.size(); ++i) {
    const ChartSeries& s = c.series[i];
    const std::string colour = kColours[i % std::size(kColours)];
    std::string points;
    for (const auto& [px, py] : s.points) {
      if (!std::isfinite(px) || !std::isfinite(py)) continue;
      absl::StrAppend(&points, points.empty() ? "" : " ", absl::StrFormat("%.1f,%.1f", x(px), y(py)));
    }
    absl::StrAppend(&svg, "<polyline fill=\"none\" stroke=\"", colour,
                    "\" stroke-width=\"2\" points=\"", points, "\"><title>", HtmlEscape(s.name),
                    "</title></polyline>\n");
    legend(s.name, colour, "");
  }
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

std::string HtmlPage(std::string_view title, std::string_view body_html) {
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>",
      HtmlEscape(title),
      "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:60em}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25em .6em;"
      "text-align:right}th:first-child,td:first-child{text-align:left}</style>\n</head>\n<body>\n",
      std::string(body_html), "</body>\n</html>\n");
}

absl::Status WriteHtmlPage(const std::string& path, std::string_view title,
                           std::string_view body_html) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << HtmlPage(title, body_html);
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace gpupool::pool::sim
