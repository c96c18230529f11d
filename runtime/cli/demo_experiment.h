// File: runtime/cli/demo_experiment.h
//
// The demo's experiments (`gpupool demo`, team nlp): a small, real, checkpointable training task.
// It fits a linear model to synthetic data by minibatch gradient descent on the squared error.
// Everything is deterministic (data from a seed, minibatches from the step number, float
// arithmetic in a fixed order), so an experiment that is preempted, snapshotted and resumed on
// another GPU must end with bit-for-bit the weights of a run that was never interrupted; the
// demo checks exactly that. The arithmetic runs on the CPU: simulated GPUs have no compute.
//
// It is the product's own (the CLI must not include examples/); examples/logistic_regression is
// the same idea written for users to copy.
#ifndef GPUPOOL_RUNTIME_CLI_DEMO_EXPERIMENT_H_
#define GPUPOOL_RUNTIME_CLI_DEMO_EXPERIMENT_H_

#include <cstdint>
#include <vector>

#include "gpupool/gpupool.h"

namespace gpupool::cli::demo_experiment {

struct Config {
  uint64_t seed = 1;
  int32_t steps = 360;
  double pool_seconds_per_step = 10;  // simulated time a step takes on the pool's clock
};

constexpr int kExamples = 2048;
constexpr int kFeatures = 32;
constexpr int kBatch = 128;
constexpr float kLearningRate = 0.05f;

// Examples x features inputs in [-1, 1) and targets from a hidden linear map (row-major inputs,
// targets appended), all from the seed.
inline std::vector<float> Data(uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  auto uniform = [&s] {  // xorshift64*: [-1, 1)
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return static_cast<float>(((s * 0x2545f4914f6cdd1dull) >> 40) & 0xffffff) / 8388608.0f - 1.0f;
  };
  std::vector<float> hidden(kFeatures);
  for (float& h : hidden) h = uniform();
  std::vector<float> d(size_t(kExamples) * (kFeatures + 1));
  for (int i = 0; i < kExamples; ++i) {
    float* row = &d[size_t(i) * (kFeatures + 1)];
    float target = 0;
    for (int j = 0; j < kFeatures; ++j) target += (row[j] = uniform()) * hidden[j];
    row[kFeatures] = target;
  }
  return d;
}

// One step of gradient descent on step `step`'s minibatch.
inline void Step(const std::vector<float>& data, std::vector<float>& w, int64_t step) {
  std::vector<float> grad(kFeatures, 0.0f);
  const int first = static_cast<int>(step % (kExamples / kBatch)) * kBatch;
  for (int i = first; i < first + kBatch; ++i) {
    const float* row = &data[size_t(i) * (kFeatures + 1)];
    float err = -row[kFeatures];
    for (int j = 0; j < kFeatures; ++j) err += w[j] * row[j];
    for (int j = 0; j < kFeatures; ++j) grad[j] += err * row[j];
  }
  for (int j = 0; j < kFeatures; ++j) w[j] -= kLearningRate * grad[j] / kBatch;
}

// The reference: the same training with no pool and no interruption.
inline std::vector<float> TrainUninterrupted(const Config& c) {
  std::vector<float> data = Data(c.seed), w(kFeatures, 0.0f);
  for (int64_t s = 0; s < c.steps; ++s) Step(data, w, s);
  return w;
}

// The task. Its state is the weights: registered once, snapshotted by the runtime at Step() when
// due or when the lease is revoked, and loaded back when the task resumes.
inline std::vector<float> Train(gpupool::TaskContext& ctx, const Config& c) {
  std::vector<float> data = Data(c.seed), w(kFeatures, 0.0f);
  int64_t first = ctx.Checkpointable({gpupool::StateRegion::Of(w)});
  for (int64_t s = first; s < c.steps; ++s) {
    Step(data, w, s);
    ctx.SleepPoolTime(c.pool_seconds_per_step);
    ctx.Step();
  }
  return w;
}

}  // namespace gpupool::cli::demo_experiment

#endif  // GPUPOOL_RUNTIME_CLI_DEMO_EXPERIMENT_H_
