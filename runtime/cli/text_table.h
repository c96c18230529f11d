// File: runtime/cli/text_table.h
//
// Aligned text tables for people, in the spirit of sinfo/squeue: a header row, left-aligned
// columns separated by two spaces, no borders. The same table renders as HTML for a report page.
//
//   TextTable t({"NODE", "GPU", "MODEL"});
//   t.AddRow({"node-0", "0", "H100-80GB"});
//   std::cout << t.Render();
#ifndef GPUPOOL_RUNTIME_CLI_TEXT_TABLE_H_
#define GPUPOOL_RUNTIME_CLI_TEXT_TABLE_H_

#include <string>
#include <vector>

namespace gpupool::cli {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : header_(std::move(header)) {}
  // Rows shorter than the header are padded with empty cells.
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const;
  // A <table> element: the header as <th> cells, every cell's text escaped.
  std::string RenderHtml() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace gpupool::cli

#endif  // GPUPOOL_RUNTIME_CLI_TEXT_TABLE_H_
