// tasks.cc: the README's task API example, built against an installed gpupool by the install test.
#include <gpupool/gpupool.h>
#include <iostream>

int Square(int x) { return x * x; }
float Score(gpupool::TaskContext& ctx, const std::vector<float>& batch) {
  gpupool::DeviceBuffer scratch = ctx.Allocate(64 << 20);  // from this lease's memory budget
  ctx.Step();                                              // a safe point
  return batch.empty() ? 0.f : batch[0];
}
GPUPOOL_REMOTE(Square);
GPUPOOL_REMOTE(Score);

int main(int argc, char** argv) {
  gpupool::Runtime runtime = gpupool::Init(argc, argv);   // reads --gpupool-* flags, GPUPOOL_* env
  gpupool::ObjectRef<int> a = gpupool::Submit(Square, 3);             // a CPU task
  gpupool::ObjectRef<int> b = gpupool::Submit(Square, a);             // runs once `a` exists
  auto s = gpupool::Task(Score).Gpus(0.25).GpuMemoryMib(8192)         // a quarter of a GPU
               .Team("search").Submit(std::vector<float>{0.5f, 1.f});
  std::cout << *gpupool::Get(b) << " " << *gpupool::Get(s) << "\n";   // 81 0.5
  try {
    gpupool::Get(gpupool::Task(Square).Gpus(64).Submit(1));           // no node has 64 GPUs
  } catch (const gpupool::TaskError& e) {
    std::cerr << e.what() << "\n";   // names the task, where it was and the pool's reason
  }
}
