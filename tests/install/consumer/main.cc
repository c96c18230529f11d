#include <gpupool/gpupool.h>

#include <iostream>

int main() {
  gpupool::PoolOptions options;
  options.simulate = "2xH100-80GB,1xL4";
  gpupool::PoolDescription pool = gpupool::DescribePool(options);
  size_t gpus = 0;
  for (const gpupool::NodeInfo& node : pool.nodes) gpus += node.gpus.size();
  std::cout << "consumer: gpupool " << gpupool::Version() << " sees " << gpus << " GPUs\n";
  try {
    options.simulate = "1xNoSuchGpu";
    gpupool::DescribePool(options);
    return 1;
  } catch (const gpupool::Error& e) {
    return e.code() == gpupool::ErrorCode::kInvalidArgument ? 0 : 1;
  }
}
