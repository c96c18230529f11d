// File: tests/runtime/training_state.h
//
// A deterministic "training" state for checkpoint tests: integer arithmetic, so an interrupted and
// resumed run must end with exactly the bits of an uninterrupted one. Shared by the simulated
// checkpoint tests and the real-GPU ones (device state).
#ifndef GPUPOOL_TESTS_RUNTIME_TRAINING_STATE_H_
#define GPUPOOL_TESTS_RUNTIME_TRAINING_STATE_H_

#include <cstdint>
#include <vector>

namespace gpupool::testing {

inline void Update(std::vector<uint64_t>& state, int64_t step) {
  for (size_t i = 0; i < state.size(); ++i) state[i] = state[i] * 6364136223846793005ull + uint64_t(step) + i;
}

inline uint64_t Checksum(const std::vector<uint64_t>& state) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v : state) h = (h ^ v) * 1099511628211ull;
  return h;
}

}  // namespace gpupool::testing

#endif  // GPUPOOL_TESTS_RUNTIME_TRAINING_STATE_H_
