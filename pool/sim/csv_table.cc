#include "pool/sim/csv_table.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace gpupool::pool::sim {
namespace {

// Splits one line (without its newline) into fields. Fails on an unterminated quote.
absl::Status SplitLine(std::string_view line, int line_number, const std::string& source,
                       CsvRow* row) {
  row->line = line_number;
  row->end_column = static_cast<int>(line.size()) + 1;
  size_t i = 0;
  for (;;) {
    CsvField field;
    field.column = static_cast<int>(i) + 1;
    if (i < line.size() && line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field.text.push_back('"');
            i += 2;
            continue;
          }
          ++i;
          closed = true;
          break;
        }
        field.text.push_back(line[i++]);
      }
      if (!closed) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ":", line_number, ":", field.column, ": unterminated quote"));
      }
      if (i < line.size() && line[i] != ',') {
        return absl::InvalidArgumentError(absl::StrCat(source, ":", line_number, ":", i + 1,
                                                       ": expected ',' after a quoted field"));
      }
    } else {
      const size_t comma = line.find(',', i);
      const size_t end = comma == std::string_view::npos ? line.size() : comma;
      field.text.assign(line.substr(i, end - i));
      i = end;
    }
    row->fields.push_back(std::move(field));
    if (i >= line.size()) break;
    ++i;  // past the comma
    if (i == line.size()) {  // a trailing comma ends with one more, empty field
      row->fields.push_back(CsvField{"", static_cast<int>(i) + 1});
      break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CsvTable> CsvTable::Parse(std::string_view text, std::string source) {
  CsvTable table;
  table.source_ = std::move(source);
  int line_number = 0;
  bool have_header = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t newline = text.find('\n', pos);
    if (newline == std::string_view::npos) newline = text.size();
    std::string_view line = text.substr(pos, newline - pos);
    pos = newline + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    CsvRow row;
    if (absl::Status s = SplitLine(line, line_number, table.source_, &row); !s.ok()) return s;
    if (!have_header) {
      for (CsvField& f : row.fields) table.header_.push_back(std::move(f.text));
      have_header = true;
    } else {
      table.rows_.push_back(std::move(row));
    }
  }
  if (!have_header) {
    return absl::InvalidArgumentError(absl::StrCat(table.source_, ":1:1: empty file, expected a header line"));
  }
  return table;
}

absl::StatusOr<CsvTable> CsvTable::ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return Parse(buffer.str(), path);
}

std::optional<int> CsvTable::FindColumn(std::string_view name) const {
  for (size_t c = 0; c < header_.size(); ++c) {
    if (header_[c] == name) return static_cast<int>(c);
  }
  return std::nullopt;
}

absl::StatusOr<int> CsvTable::RequireColumn(std::string_view name) const {
  if (auto c = FindColumn(name)) return *c;
  return ErrorAt(1, 1, absl::StrCat("missing column '", std::string(name), "' in the header"));
}

absl::Status CsvTable::ErrorAt(int line, int column, std::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat(source_, ":", line, ":", column, ": ", std::string(message)));
}

absl::StatusOr<std::string_view> CsvTable::Text(const CsvRow& row, int column) const {
  if (column < static_cast<int>(row.fields.size())) return row.fields[column].text;
  return ErrorAt(row.line, row.end_column,
                 absl::StrCat("missing field '", header_[column], "' (line has ",
                              row.fields.size(), " fields, header has ", header_.size(), ")"));
}

absl::StatusOr<std::optional<int64_t>> CsvTable::OptionalNonNegativeInt(const CsvRow& row,
                                                                        int column,
                                                                        int64_t max) const {
  if (column >= static_cast<int>(row.fields.size())) return std::optional<int64_t>();
  const CsvField& field = row.fields[column];
  if (field.text.empty()) return std::optional<int64_t>();
  int64_t value = 0;
  for (size_t i = 0; i < field.text.size(); ++i) {
    const char c = field.text[i];
    if (c < '0' || c > '9') {
      return ErrorAt(row.line, field.column + static_cast<int>(i),
                     absl::StrCat(header_[column], " must be a non-negative integer, got '",
                                  field.text, "'"));
    }
    value = value * 10 + (c - '0');
    if (value > max) {
      return ErrorAt(row.line, field.column,
                     absl::StrCat(header_[column], " is ", field.text, ", more than the maximum ", max));
    }
  }
  return std::optional<int64_t>(value);
}

absl::StatusOr<int64_t> CsvTable::NonNegativeInt(const CsvRow& row, int column,
                                                 int64_t max) const {
  absl::StatusOr<std::string_view> text = Text(row, column);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::optional<int64_t>> value = OptionalNonNegativeInt(row, column, max);
  if (!value.ok()) return value.status();
  if (!value->has_value()) {
    return ErrorAt(row.line, row.fields[column].column,
                   absl::StrCat(header_[column], " is empty, expected a non-negative integer"));
  }
  return **value;
}

}  // namespace gpupool::pool::sim
