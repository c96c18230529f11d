// File: runtime/group/job_group.h
//
// The job's processes as one communication group: what TaskContext's collectives (allreduce,
// broadcast, send, recv) run on. Under mpirun the group is the job's ranks, wired at Init
// (each rank's UCX worker address is allgathered over MPI, then a HostCommunicator connects them
// all); a job of one process is a group of one, whose collectives are local.
//
//   absl::StatusOr<std::unique_ptr<JobGroup>> group =
//       JobGroup::OverUcx(rank, ranks, [&](std::string mine) { return mpi.AllGather(mine); });
//   absl::Status s = (*group)->AllReduce(grads.data(), grads.size(), ElementType::kFloat,
//                                        ReduceOp::kSum);
//
// Ordering: as in MPI and NCCL, every rank calls the collectives in the same order. A rank's
// tasks share its group, so one task per rank at a time should use collectives (the group runs
// one operation at a time: a second caller waits for the first).
//
// Failure: a communicator stands or falls as a whole (host_communicator.h). A dead rank makes
// every later operation fail with Unavailable naming it; the timeout (collective_timeout) turns a
// rank that never arrives into DeadlineExceeded rather than a hang. A rank whose task was
// preempted is not dead: the others wait in their next collective while its task resumes from
// its snapshot, up to the timeout.
//
// Data: host memory. Device memory goes over NCCL (runtime/tasks/rank_device_comm.h, set up over
// this group) or is staged through pinned host memory by the caller (TaskContext).
#ifndef GPUPOOL_RUNTIME_GROUP_JOB_GROUP_H_
#define GPUPOOL_RUNTIME_GROUP_JOB_GROUP_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpupool/task_context.h"
#include "transport/peer_distance.h"
#include "runtime/sync/mutex.h"

namespace gpupool::transport {
class UcxWorker;
class HostCommunicator;
}  // namespace gpupool::transport

namespace gpupool::runtime {

// The codes are TaskContext's detail::ElementCode values.
enum class ElementType { kFloat = 0, kDouble = 1, kInt32 = 2, kInt64 = 3 };
size_t ElementSize(ElementType type);
// Combines `count` elements at `from` into those at `into`, element by element, as every rank's
// allreduce does (transport/element_reduce.h): for reductions within one process.
void CombineElements(void* into, const void* from, size_t count, ElementType type, ReduceOp op);

struct JobGroupOptions {
  // Each blocking step fails with DeadlineExceeded after this long (a preempted rank's peers
  // wait for it this long in their next collective).
  absl::Duration collective_timeout = absl::Minutes(10);
  // Network devices UCX may use; "lo" when every rank is on this host.
  std::string net_devices = "lo";
  // Where each rank runs, by rank (empty: nobody said), for choosing the nearest of several
  // sources of an object (transport/peer_distance.h).
  std::vector<transport::PeerPlace> places;
};

class JobGroup {
 public:
  // Allgathers one string per rank, in rank order (MPI during bootstrap).
  using AllGather = std::function<absl::StatusOr<std::vector<std::string>>(std::string mine)>;

  static std::unique_ptr<JobGroup> Solo();
  // Every rank calls this at about the same time. A rank that cannot start its worker sends
  // its reason instead of an address, so every rank fails alike (FailedPrecondition naming it).
  static absl::StatusOr<std::unique_ptr<JobGroup>> OverUcx(int rank, int ranks, const AllGather& all_gather,
                                                           JobGroupOptions options = {});
  ~JobGroup();

  int rank() const { return rank_; }
  int size() const { return size_; }

  absl::Status AllReduce(void* data, size_t count, ElementType type, ReduceOp op);
  absl::Status Broadcast(int root, void* data, size_t bytes);
  absl::Status Send(int dst, uint64_t tag, const void* data, size_t bytes);
  // Returns the message's size; OutOfRange when it is larger than `capacity`.
  absl::StatusOr<size_t> Recv(int src, uint64_t tag, void* data, size_t capacity);

  // The data plane the group runs on, for other protocols of the job's ranks (object fetches):
  // null for a group of one. address(r) is rank r's worker address.
  transport::UcxWorker* worker() const { return worker_.get(); }
  const std::string& address(int r) const { return addresses_.at(r); }
  // Where each rank runs (JobGroupOptions::places); empty when unknown.
  const std::vector<transport::PeerPlace>& places() const { return places_; }

 private:
  JobGroup(int rank, int size);
  absl::Status CheckPeer(int peer, const char* what) const;
  absl::Status CheckMessage(int peer, uint64_t tag, const char* what) const;  // peer and tag

  const int rank_;
  const int size_;
  // Constant after OverUcx returns (the worker is thread-safe itself).
  std::unique_ptr<transport::UcxWorker> worker_;
  std::vector<std::string> addresses_;  // by rank (empty for a group of one)
  std::vector<transport::PeerPlace> places_;  // by rank, or empty

  Mutex mu_;  // one operation at a time: the communicator is used under it
  std::unique_ptr<transport::HostCommunicator> comm_ ABSL_PT_GUARDED_BY(mu_);  // null for a group of one
  // A group of one sends to itself: messages wait here for their Recv, by tag, in order.
  std::map<uint64_t, std::deque<std::string>> to_self_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_GROUP_JOB_GROUP_H_
