// File: pool/scheduler/queue_order.h
//
// The cycle's first stage: the order in which pending requests are considered, decided once at
// the cycle's start and kept for the whole cycle.
//
//   1. Requests within their team's nominal quota (guaranteed) before those that would borrow,
//      as Kueue orders its heads: a borrower admitted ahead of guaranteed work in the same cycle
//      would only be reclaimed by it at once (a preemption, lost work and a restart for nothing).
//   2. Priority value, high first.
//   3. The team's weighted dominant share minus an ageing credit, low first. The credit grows by
//      one share unit per `aging_horizon_s` of waiting, so a request cannot wait forever behind
//      an endless stream of equal-priority work from teams with a smaller share.
//   4. Submission order.
//
// A request ordered as guaranteed whose team's earlier grants in the same cycle used up its
// nominal quota is judged by the quota as it stands when its turn comes (it then borrows, and
// may not reclaim): the order is kept, the verdict is never stale.
#ifndef GPUPOOL_POOL_SCHEDULER_QUEUE_ORDER_H_
#define GPUPOOL_POOL_SCHEDULER_QUEUE_ORDER_H_

#include <cstdint>

namespace gpupool::pool {

struct QueueKey {
  bool borrowing = false;  // would borrow: after every guaranteed request
  int priority = 0;        // the class's value
  double share = 0;        // the team's weighted dominant share less the ageing credit
  uint64_t handle = 0;     // submission order (unique)
};

// The ageing credit's effect: `share` less one unit per `aging_horizon_s` waited.
double AgedShare(double share, int64_t waited_s, int64_t aging_horizon_s);

// Whether `a` is considered before `b`: a strict total order over distinct handles.
bool QueueBefore(const QueueKey& a, const QueueKey& b);

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_QUEUE_ORDER_H_
