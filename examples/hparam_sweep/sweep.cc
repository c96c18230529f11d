// A hyper-parameter sweep fanned out over a shared pool: every (learning rate, batch size) pair is
// one trial, a one-GPU task that trains a linear model by mini-batch gradient descent and returns
// its validation loss. The trials run wherever the pool has GPUs: on the driver's node in this
// process, on other nodes in a worker of this job that their agents start (this same program,
// re-executed there with --gpupool-worker). The driver prints a table of trials and the best one.
//
//   GPUPOOL_ADDRESS=127.0.0.1:7070 GPUPOOL_TOKEN=... GPUPOOL_NODE=node-0 ./build/examples/hparam_sweep/hparam_sweep
// (see the README's shared-pool section for the head and the agents; with no GPUPOOL_ADDRESS the
// sweep runs on an embedded pool in this process).
//
// The data are synthetic and the arithmetic sequential, so every trial's loss is the same on any
// node and in any run: where a trial ran changes nothing but the table's node column.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpupool/gpupool.h"

namespace {

constexpr int kFeatures = 64;
constexpr int kTrainRows = 100000;
constexpr int kValidationRows = 5000;
constexpr int kEpochs = 2;

// A trial's hyper-parameters: trivially copyable, so gpupool sends it to a task as it is.
struct Trial {
  double learning_rate;
  int batch_size;
};

// Deterministic standard normals (SplitMix64, then Box-Muller).
class Normal {
 public:
  explicit Normal(uint64_t seed) : state_(seed) {}
  double Next() {
    double u1 = (static_cast<double>(Bits() >> 11) + 0.5) / 9007199254740992.0;  // (0, 1)
    double u2 = static_cast<double>(Bits() >> 11) / 9007199254740992.0;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t Bits() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

// y = x . w_true + noise (sigma 0.1), the same rows for every trial. Feature f has scale
// 0.1 * 20^(f/63): too small a step barely moves the small-scale weights in kEpochs, too large a
// step diverges along the large-scale ones; the sweep is to find the step between.
struct Dataset {
  std::vector<double> x;  // rows x kFeatures
  std::vector<double> y;
};

Dataset MakeData(int rows, uint64_t seed) {
  Normal normal(seed);
  std::vector<double> scale(kFeatures);
  for (int f = 0; f < kFeatures; ++f) scale[f] = 0.1 * std::pow(20.0, f / (kFeatures - 1.0));
  Dataset d{std::vector<double>(static_cast<size_t>(rows) * kFeatures), std::vector<double>(rows)};
  for (int r = 0; r < rows; ++r) {
    double dot = 0;
    for (int f = 0; f < kFeatures; ++f) {
      double v = normal.Next() * scale[f];
      d.x[r * kFeatures + f] = v;
      dot += v * std::sin(1.0 + f);  // w_true[f] = sin(1 + f)
    }
    d.y[r] = dot + 0.1 * normal.Next();
  }
  return d;
}

double Predict(const Dataset& d, int row, const std::vector<double>& w) {
  double p = 0;
  for (int f = 0; f < kFeatures; ++f) p += d.x[row * kFeatures + f] * w[f];
  return p;
}

// One trial: mini-batch gradient descent on the squared error for kEpochs epochs; returns the
// validation mean squared error (infinite when the learning rate made it diverge) and the place
// it ran ("node/GPU i").
std::pair<double, std::string> TrainTrial(gpupool::TaskContext& ctx, Trial trial) {
  Dataset train = MakeData(kTrainRows, 1);
  Dataset validation = MakeData(kValidationRows, 2);
  std::vector<double> w(kFeatures, 0.0), grad(kFeatures);
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    for (int start = 0; start < kTrainRows; start += trial.batch_size) {
      int end = std::min(start + trial.batch_size, kTrainRows);
      std::fill(grad.begin(), grad.end(), 0.0);
      for (int r = start; r < end; ++r) {
        double err = Predict(train, r, w) - train.y[r];
        for (int f = 0; f < kFeatures; ++f) grad[f] += err * train.x[r * kFeatures + f];
      }
      for (int f = 0; f < kFeatures; ++f) w[f] -= trial.learning_rate * grad[f] / (end - start);
    }
  }
  double loss = 0;
  for (int r = 0; r < kValidationRows; ++r) loss += std::pow(Predict(validation, r, w) - validation.y[r], 2);
  loss /= kValidationRows;
  const gpupool::SlotInfo& slot = ctx.slots().front();
  return {std::isfinite(loss) ? loss : INFINITY, slot.node + "/GPU " + std::to_string(slot.gpu_index)};
}
GPUPOOL_REMOTE(TrainTrial);

}  // namespace

int main(int argc, char** argv) {
  gpupool::Runtime rt = gpupool::Init(argc, argv);  // in a worker, Init serves the driver and never returns
  std::vector<Trial> trials;
  for (double lr : {0.01, 0.03, 0.1, 0.3, 1.0}) {
    for (int batch : {8, 64, 512}) trials.push_back({lr, batch});
  }
  // Submit every trial at once, then read them in order: the pool runs as many at a time as it
  // has GPUs for this job.
  std::vector<gpupool::ObjectRef<std::pair<double, std::string>>> results;
  for (const Trial& t : trials) results.push_back(gpupool::Task(TrainTrial).Gpus(1).Submit(t));

  std::printf("%-6s %-8s %-6s %-12s %s\n", "trial", "lr", "batch", "ran on", "validation MSE");
  std::set<std::string> nodes;
  size_t best = 0;
  double best_loss = INFINITY;
  for (size_t i = 0; i < trials.size(); ++i) {
    auto [loss, where] = *gpupool::Get(results[i]);
    std::printf("%-6zu %-8g %-6d %-12s %.6f\n", i, trials[i].learning_rate, trials[i].batch_size, where.c_str(), loss);
    nodes.insert(where.substr(0, where.find('/')));
    if (loss < best_loss) best = i, best_loss = loss;
  }
  std::printf("%zu trials on %zu node%s; best: trial %zu, lr %g, batch %d, validation MSE %.6f\n", trials.size(),
              nodes.size(), nodes.size() == 1 ? "" : "s", best, trials[best].learning_rate, trials[best].batch_size,
              best_loss);
  return 0;
}
