// File: examples/logistic_regression/logistic_regression.h
//
// A small, real training job: logistic regression by minibatch gradient descent on synthetic data,
// written as a checkpointable gpupool task. Everything is deterministic (the data comes from a
// seed, the minibatch from the step number, the float arithmetic runs in a fixed order), so a run
// that is preempted, snapshotted and resumed on another GPU must end with bit-for-bit the same
// weights as a run that was never interrupted: examples/logistic_regression/train.cc and
// `gpupool demo` check exactly that.
//
// The arithmetic runs on the CPU (the simulated GPUs have no compute); on a real GPU the same loop
// would launch kernels on ctx.stream() and register a DeviceBuffer as its state.
#ifndef GPUPOOL_EXAMPLES_LOGISTIC_REGRESSION_H_
#define GPUPOOL_EXAMPLES_LOGISTIC_REGRESSION_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpupool/gpupool.h"

namespace logistic_regression {

struct Config {
  uint64_t seed = 42;
  int32_t examples = 4096;
  int32_t features = 64;
  int32_t batch = 256;
  int32_t steps = 600;
  float learning_rate = 0.1f;
  double pool_seconds_per_step = 0;  // simulated time a step takes on the pool's clock
};

struct Data {
  std::vector<float> x;  // examples x features, row-major
  std::vector<float> y;  // 0 or 1
};

// Separable-ish data: labels from a hidden weight vector, with a little label noise.
inline Data Generate(const Config& c) {
  uint64_t s = c.seed * 2862933555777941757ull + 3037000493ull;
  auto next = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((s >> 40) & 0xffffff) / 16777216.0f;  // [0, 1)
  };
  std::vector<float> hidden(c.features);
  for (float& h : hidden) h = next() * 2 - 1;
  Data d;
  d.x.resize(size_t(c.examples) * c.features);
  d.y.resize(c.examples);
  for (int i = 0; i < c.examples; ++i) {
    float dot = 0;
    for (int j = 0; j < c.features; ++j) {
      float v = next() * 2 - 1;
      d.x[size_t(i) * c.features + j] = v;
      dot += v * hidden[j];
    }
    d.y[i] = (dot > 0) != (next() < 0.05f) ? 1.0f : 0.0f;
  }
  return d;
}

// The first example of step `step`'s minibatch.
inline int BatchStart(const Config& c, int64_t step) {
  return static_cast<int>(step % (c.examples / c.batch)) * c.batch;
}

// The loss gradient summed over examples [first, first + count), for weights `w` (features + 1:
// the last is the bias).
inline std::vector<float> Gradient(const Config& c, const Data& d, const std::vector<float>& w, int first, int count) {
  std::vector<float> grad(w.size(), 0.0f);
  for (int i = first; i < first + count; ++i) {
    const float* x = &d.x[size_t(i) * c.features];
    float z = w[c.features];
    for (int j = 0; j < c.features; ++j) z += w[j] * x[j];
    float err = 1.0f / (1.0f + std::exp(-z)) - d.y[i];
    for (int j = 0; j < c.features; ++j) grad[j] += err * x[j];
    grad[c.features] += err;
  }
  return grad;
}

// Gradient descent with a gradient summed over a whole minibatch.
inline void Apply(const Config& c, const std::vector<float>& grad, std::vector<float>& w) {
  for (size_t j = 0; j < w.size(); ++j) w[j] -= c.learning_rate * grad[j] / static_cast<float>(c.batch);
}

// One minibatch step.
inline void TrainStep(const Config& c, const Data& d, std::vector<float>& w, int64_t step) {
  Apply(c, Gradient(c, d, w, BatchStart(c, step), c.batch), w);
}

// The reference: the same training with no pool, no interruption.
inline std::vector<float> TrainUninterrupted(const Config& c) {
  Data d = Generate(c);
  std::vector<float> w(c.features + 1, 0.0f);
  for (int64_t s = 0; s < c.steps; ++s) TrainStep(c, d, w, s);
  return w;
}

// Fraction of examples classified correctly.
inline double Accuracy(const Config& c, const std::vector<float>& w) {
  Data d = Generate(c);
  int right = 0;
  for (int i = 0; i < c.examples; ++i) {
    float z = w[c.features];
    for (int j = 0; j < c.features; ++j) z += w[j] * d.x[size_t(i) * c.features + j];
    right += (z > 0) == (d.y[i] > 0.5f);
  }
  return static_cast<double>(right) / c.examples;
}

// The gpupool task. Its state is the weights: registered once, snapshotted by the runtime at
// Step() when due or when the lease is revoked, and loaded back when the task resumes.
inline std::vector<float> Train(gpupool::TaskContext& ctx, const Config& c) {
  Data d = Generate(c);  // derived from the seed: not part of the state
  std::vector<float> w(c.features + 1, 0.0f);
  int64_t first = ctx.Checkpointable({gpupool::StateRegion::Of(w)});
  for (int64_t s = first; s < c.steps; ++s) {
    TrainStep(c, d, w, s);
    if (c.pool_seconds_per_step > 0) ctx.SleepPoolTime(c.pool_seconds_per_step);
    ctx.Step();
  }
  return w;
}

}  // namespace logistic_regression

#endif  // GPUPOOL_EXAMPLES_LOGISTIC_REGRESSION_H_
