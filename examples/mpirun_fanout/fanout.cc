// An mpirun job: every rank runs this same program. gpupool::Init sees mpirun, rank 0 hosts the
// job's pool service, and every rank serves its own node's GPUs (simulated here: one node of
// --gpupool-simulate GPUs per rank). Each rank fans out GPU-fraction tasks, which run on its
// node, and prints where they ran. MPI is used only while Init bootstraps the job, so a rank
// that dies does not take the others down (launch with --enable-recovery).
//
//   mpirun --allow-run-as-root --oversubscribe --enable-recovery -np 4
//       ./build/examples/mpirun_fanout/mpirun_fanout --gpupool-simulate 2xH100-80GB
// (one command line; see the README's mpirun section).
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "gpupool/gpupool.h"

// One task: a slice of work on a quarter of a GPU; returns where it ran.
std::string Work(gpupool::TaskContext& ctx, int slice) {
  const gpupool::SlotInfo& slot = ctx.slots().front();
  return slot.node + "/GPU " + std::to_string(slot.gpu_index) + " (slice " + std::to_string(slice) + ")";
}
GPUPOOL_REMOTE(Work);

int main(int argc, char** argv) {
  gpupool::Runtime rt = gpupool::Init(argc, argv);
  std::vector<gpupool::ObjectRef<std::string>> results;
  for (int slice = 0; slice < 8; ++slice) results.push_back(gpupool::Task(Work).Gpus(0.25).Submit(slice));
  std::map<std::string, int> per_gpu;
  for (auto& r : results) {
    std::string where = *gpupool::Get(r);
    ++per_gpu[where.substr(0, where.find(" (slice"))];
  }
  std::string line;
  for (const auto& [gpu, n] : per_gpu) line += " " + gpu + " x" + std::to_string(n);
  std::printf("rank %d of %d on node %s: 8 tasks ran on%s\n", rt.rank(), rt.ranks(), rt.node().c_str(), line.c_str());
  return 0;
}
