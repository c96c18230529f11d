// File: bench/common/json_figure.h
//
// The one line every benchmark prints per figure with --json (DESIGN §7):
//   {"bench", "metric", "value", "unit", "reference", "reference_value"}
// where the reference is a baseline measured in the same run, so the ratio holds across machines.
#ifndef GPUPOOL_BENCH_COMMON_JSON_FIGURE_H_
#define GPUPOOL_BENCH_COMMON_JSON_FIGURE_H_

#include <cstdio>

namespace gpupool::bench {

inline void PrintJsonFigure(const char* bench, const char* metric, double value, const char* unit,
                            const char* reference, double reference_value) {
  std::printf("{\"bench\": \"%s\", \"metric\": \"%s\", \"value\": %.4f, \"unit\": \"%s\", "
              "\"reference\": \"%s\", \"reference_value\": %.4f}\n",
              bench, metric, value, unit, reference, reference_value);
}

}  // namespace gpupool::bench

#endif  // GPUPOOL_BENCH_COMMON_JSON_FIGURE_H_
