#include "runtime/cli/text_table.h"

#include <algorithm>

#include "pool/sim/html_report.h"

namespace gpupool::cli {
namespace {

// Display width: counts UTF-8 code points, so box-drawing characters align.
size_t DisplayWidth(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

}  // namespace

std::string TextTable::Render() const {
  std::vector<size_t> widths(header_.size());
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], DisplayWidth(row[i]));
    }
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < widths.size(); ++i) {
      std::string cell = i < row.size() ? row[i] : "";
      line += cell;
      if (i + 1 < widths.size()) line += std::string(widths[i] - DisplayWidth(cell) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(header_);
  for (const auto& row : rows_) emit(row);
  return out;
}

std::string TextTable::RenderHtml() const {
  std::string out = "<table>\n";
  auto emit = [&](const std::vector<std::string>& row, const char* cell) {
    out += "<tr>";
    for (size_t i = 0; i < header_.size(); ++i) {
      out += std::string("<") + cell + ">" + pool::sim::HtmlEscape(i < row.size() ? row[i] : "") +
             "</" + cell + ">";
    }
    out += "</tr>\n";
  };
  emit(header_, "th");
  for (const auto& row : rows_) emit(row, "td");
  return out + "</table>\n";
}

}  // namespace gpupool::cli
