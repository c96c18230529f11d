#include "pool/scheduler/queue_order.h"

#include <algorithm>

namespace gpupool::pool {

double AgedShare(double share, int64_t waited_s, int64_t aging_horizon_s) {
  return share - static_cast<double>(waited_s) / static_cast<double>(std::max<int64_t>(1, aging_horizon_s));
}

bool QueueBefore(const QueueKey& a, const QueueKey& b) {
  if (a.borrowing != b.borrowing) return !a.borrowing;
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.share != b.share) return a.share < b.share;
  return a.handle < b.handle;
}

}  // namespace gpupool::pool
