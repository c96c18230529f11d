#include "runtime/objects/host_memory.h"

#include <malloc.h>

#include <algorithm>
#include <climits>

namespace gpupool::runtime {

bool ReuseLargeHostAllocations(uint64_t retain_bytes) {
#if defined(__GLIBC__)
  int retain = static_cast<int>(std::min<uint64_t>(retain_bytes, INT_MAX));
  // Order matters little; both return 1 on success.
  return mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, retain) == 1;
#else
  (void)retain_bytes;
  return false;
#endif
}

}  // namespace gpupool::runtime
