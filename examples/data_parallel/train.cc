// examples/data_parallel/train.cc: data-parallel training across the ranks of an mpirun job,
// with an allreduce of the gradients at every step, and one rank preempted halfway.
//
//   mpirun --allow-run-as-root --oversubscribe --enable-recovery -np 4
//       ./build/examples/data_parallel/train_data_parallel
// (one command line; see the README's mpirun section).
//
// Every rank is one node with one (simulated) H100 and trains the same logistic-regression model
// on its shard of each minibatch: it computes its shard's gradient, ctx.AllReduce sums the
// gradients of all ranks, and every rank applies the same update, so the weights stay identical
// everywhere. Team `research` borrows all four GPUs; ten pool minutes in, team `prod` needs the
// GPU of rank 1 back for a ten-minute service (its guaranteed quota is one GPU). The runtime
// revokes rank 1's lease; its task snapshots its weights at its next Step(), stops, waits for the
// GPU and resumes from the snapshot, while the other ranks wait for it in their next allreduce.
// Then the same training runs again with no interruption, and every rank checks that both runs
// ended with bit-for-bit the same weights. Exit status 0 on a rank means identical (and, on rank
// 1, that it really was preempted).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "examples/common/reclaim.h"
#include "examples/logistic_regression/logistic_regression.h"
#include "gpupool/gpupool.h"

namespace {

using logistic_regression::Config;
using logistic_regression::Data;

// One data-parallel step: this rank's shard of the step's minibatch, the gradients summed over
// the ranks, the same update everywhere.
void ShardStep(gpupool::TaskContext& ctx, const Config& c, const Data& d, std::vector<float>& w, int64_t step) {
  const int shard = c.batch / ctx.ranks();
  std::vector<float> grad =
      logistic_regression::Gradient(c, d, w, logistic_regression::BatchStart(c, step) + ctx.rank() * shard, shard);
  ctx.AllReduce(grad);  // sum over ranks: the same bits on every rank
  logistic_regression::Apply(c, grad, w);
}

// The task each rank runs: checkpointable (its state is the weights), one Step() per step.
std::vector<float> TrainShard(gpupool::TaskContext& ctx, const Config& c) {
  Data d = logistic_regression::Generate(c);
  std::vector<float> w(c.features + 1, 0.0f);
  int64_t first = ctx.Checkpointable({gpupool::StateRegion::Of(w)});
  for (int64_t s = first; s < c.steps; ++s) {
    ShardStep(ctx, c, d, w, s);
    if (c.pool_seconds_per_step > 0) ctx.SleepPoolTime(c.pool_seconds_per_step);
    ctx.Step();  // on revocation: snapshot at this step, stop, resume here later
  }
  return w;
}
GPUPOOL_REMOTE(TrainShard);

GPUPOOL_REMOTE(reclaim::Serve);

constexpr int kPreemptedRank = 1;

}  // namespace

int main(int argc, char** argv) {
  gpupool::RuntimeOptions options = reclaim::Options(argc, argv, {"lease-revoked", "task-preempted"});
  try {
    gpupool::Runtime rt = gpupool::Init(options);
    const int rank = rt.rank();
    if (rt.ranks() < 2 || Config{}.batch % rt.ranks() != 0) {
      std::fprintf(stderr, "run under mpirun with a number of ranks that divides the batch (256), e.g. -np 4\n");
      return 2;
    }
    Config config;
    config.steps = 600;
    config.pool_seconds_per_step = 3;  // 30 pool minutes of training

    // 1. Trained with a preemption on one rank.
    auto training = gpupool::Task(TrainShard).Gpus(1).Team("research").PriorityClass("experiment").Submit(config);
    if (rank == kPreemptedRank) {
      std::this_thread::sleep_for(std::chrono::duration<double>(600 / options.clock_speed));
      gpupool::Get(gpupool::Task(reclaim::Serve).Gpus(1).Team("prod").PriorityClass("production-inference").Submit(600.0));
    }
    std::vector<float> weights = *gpupool::Get(training);
    uint64_t preemptions = 0;
    for (const gpupool::TeamUsage& u : rt.Stats().teams) {
      if (u.team == "research") preemptions = u.preemptions;
    }

    // 2. The same training, uninterrupted: the reference.
    std::vector<float> reference =
        *gpupool::Get(gpupool::Task(TrainShard).Gpus(1).Team("research").PriorityClass("experiment").Submit(config));

    bool identical = weights.size() == reference.size() &&
                     std::memcmp(weights.data(), reference.data(), weights.size() * sizeof(float)) == 0;
    std::printf("rank %d of %d: %llu preemption(s); accuracy %.3f; weights identical to an uninterrupted run: %s\n",
                rank, rt.ranks(), static_cast<unsigned long long>(preemptions),
                logistic_regression::Accuracy(config, weights), identical ? "yes" : "NO");
    return identical && (rank != kPreemptedRank || preemptions > 0) ? 0 : 1;
  } catch (const gpupool::Error& e) {
    std::fprintf(stderr, "gpupool error: %s\n", e.what());
    return 1;
  }
}
