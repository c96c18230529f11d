// File: runtime/service/gpu_health_book.h
//
// The head's health state machine for every GPU of its pool (pool/health_machine.h), by GPU.
// NodeLiveness says whether a node's agent is there at all; this says what its GPUs are worth
// while it is. The pool service feeds it readings, diagnostics, operators' words and "no lease
// left", and applies each transition it returns to the scheduler (and journals it).
//
//   GpuHealthBook book(inventory, policy, now_s);
//   pool::GpuHealthMachine* m = book.Find(gpu);   // null for a GPU the pool does not have
//   for (const pool::GpuRef& g : book.Draining()) ...
//
// Not thread-safe: the service's lock guards it.
#ifndef GPUPOOL_RUNTIME_SERVICE_GPU_HEALTH_BOOK_H_
#define GPUPOOL_RUNTIME_SERVICE_GPU_HEALTH_BOOK_H_

#include <map>
#include <string>
#include <vector>

#include "pool/health_machine.h"
#include "pool/inventory.h"

namespace gpupool::runtime {

class GpuHealthBook {
 public:
  GpuHealthBook(const pool::Inventory& inventory, pool::HealthPolicy policy, double now_s);

  pool::GpuHealthMachine* Find(const pool::GpuRef& gpu);
  const pool::GpuHealthMachine* Find(const pool::GpuRef& gpu) const;
  // GPUs draining now (candidates for quarantine once their leases are gone).
  std::vector<pool::GpuRef> Draining() const;

 private:
  std::map<std::pair<std::string, int>, pool::GpuHealthMachine> machines_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_GPU_HEALTH_BOOK_H_
