// examples/logistic_regression/train.cc: a training job that gets preempted and loses nothing.
//
//   build/examples/logistic_regression/train_logistic_regression
//
// Team `research` borrows the idle GPU of team `prod` for a logistic-regression run; halfway,
// `prod` needs its GPU back. The runtime revokes research's lease, the task snapshots its weights
// at its next Step(), stops, waits for a GPU, and resumes from the snapshot. At the end the weights
// are compared, bit for bit, with a run that was never interrupted. Exit status 0 means identical.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "examples/common/reclaim.h"
#include "examples/logistic_regression/logistic_regression.h"
#include "gpupool/gpupool.h"

GPUPOOL_REMOTE(logistic_regression::Train);

GPUPOOL_REMOTE(reclaim::Serve);

int main(int argc, char** argv) {
  gpupool::RuntimeOptions options = reclaim::Options(argc, argv, {"lease-revoked", "task-preempted", "lease-granted"});
  gpupool::Runtime runtime = gpupool::Init(options);

  logistic_regression::Config config;
  config.steps = 600;
  config.pool_seconds_per_step = 3;  // 30 pool minutes of training, 3 real seconds
  auto training = gpupool::Task(logistic_regression::Train).Gpus(1).Team("research")
                      .PriorityClass("experiment").Submit(config);
  std::this_thread::sleep_for(std::chrono::duration<double>(600 / options.clock_speed));
  // Ten pool minutes in, prod's service needs its guaranteed GPU for ten minutes.
  auto serving = gpupool::Task(reclaim::Serve).Gpus(1).Team("prod").PriorityClass("production-inference").Submit(600.0);
  gpupool::Get(serving);
  std::vector<float> weights = *gpupool::Get(training);

  std::vector<float> reference = logistic_regression::TrainUninterrupted(config);
  bool identical = weights.size() == reference.size() &&
                   std::memcmp(weights.data(), reference.data(), weights.size() * sizeof(float)) == 0;
  for (const gpupool::TeamUsage& u : runtime.Stats().teams) {
    if (u.team == "research") {
      std::printf("research: %llu preemption(s), %llu snapshot(s), %.1f GPU-seconds of work lost\n",
                  static_cast<unsigned long long>(u.preemptions), static_cast<unsigned long long>(u.snapshots),
                  u.lost_gpu_hours * 3600);
    }
  }
  std::printf("accuracy %.3f; final weights identical to an uninterrupted run: %s\n",
              logistic_regression::Accuracy(config, weights), identical ? "yes" : "NO");
  return identical ? 0 : 1;
}
