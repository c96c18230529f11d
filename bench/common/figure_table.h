// File: bench/common/figure_table.h
//
// The table a benchmark prints without --json: one row per figure, beside its same-run baseline
// and their ratio. (With --json each figure is a line of json_figure.h instead.)
#ifndef GPUPOOL_BENCH_COMMON_FIGURE_TABLE_H_
#define GPUPOOL_BENCH_COMMON_FIGURE_TABLE_H_

#include <cstdio>
#include <string>
#include <vector>

namespace gpupool::bench {

struct Figure {
  std::string metric;
  double value;
  std::string unit;
  std::string reference;  // the baseline measured in the same run
  double reference_value;
  std::string note;
};

inline void PrintFigureTable(const std::vector<Figure>& rows) {
  std::printf("%-36s %14s %-8s  %-36s %14s %8s  %s\n", "metric", "value", "unit", "baseline (same run)", "baseline",
              "ratio", "note");
  for (const Figure& r : rows) {
    std::printf("%-36s %14.2f %-8s  %-36s %14.2f %8.3f  %s\n", r.metric.c_str(), r.value, r.unit.c_str(),
                r.reference.c_str(), r.reference_value, r.reference_value != 0 ? r.value / r.reference_value : 0.0,
                r.note.c_str());
  }
}

}  // namespace gpupool::bench

#endif  // GPUPOOL_BENCH_COMMON_FIGURE_TABLE_H_
