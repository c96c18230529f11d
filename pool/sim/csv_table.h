// File: pool/sim/csv_table.h
//
// A small CSV reader that remembers where every field came from, so that a bad value is reported
// as "FILE:LINE:COLUMN: what is wrong" (1-based line and character column). The first line is the
// header; columns are found by name, so files with extra or reordered columns read the same.
// Fields may be double-quoted ("a,b" and "say ""hi"""); blank lines are skipped; CRLF is accepted.
#ifndef GPUPOOL_POOL_SIM_CSV_TABLE_H_
#define GPUPOOL_POOL_SIM_CSV_TABLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpupool::pool::sim {

struct CsvField {
  std::string text;
  int column = 1;  // 1-based character column where the field starts
};

struct CsvRow {
  int line = 0;          // 1-based
  int end_column = 1;    // column just past the last character of the line
  std::vector<CsvField> fields;
};

class CsvTable {
 public:
  // `source` names the text in messages (usually the file path).
  static absl::StatusOr<CsvTable> Parse(std::string_view text, std::string source);
  static absl::StatusOr<CsvTable> ReadFile(const std::string& path);

  const std::string& source() const { return source_; }
  const std::vector<CsvRow>& rows() const { return rows_; }  // data rows, header excluded

  // Index of a header column, or nullopt.
  std::optional<int> FindColumn(std::string_view name) const;
  // Like FindColumn, but a missing column is an error at the header line.
  absl::StatusOr<int> RequireColumn(std::string_view name) const;

  // "SOURCE:LINE:COLUMN: message" as kInvalidArgument.
  absl::Status ErrorAt(int line, int column, std::string_view message) const;

  // Field `column` of `row`: the text, or an error naming the missing field.
  absl::StatusOr<std::string_view> Text(const CsvRow& row, int column) const;
  // A non-negative integer no larger than `max`; messages name the field by its header.
  absl::StatusOr<int64_t> NonNegativeInt(const CsvRow& row, int column, int64_t max) const;
  // Like NonNegativeInt, but an empty field (or a missing trailing one) gives nullopt.
  absl::StatusOr<std::optional<int64_t>> OptionalNonNegativeInt(const CsvRow& row, int column,
                                                                int64_t max) const;

 private:
  std::string source_;
  std::vector<std::string> header_;
  std::vector<CsvRow> rows_;
};

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_CSV_TABLE_H_
