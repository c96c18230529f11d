// File: runtime/client/pool_link.h
//
// One authenticated Cap'n Proto session of a job with the head (runtime/service/pool_server.h):
// the connection (runtime/rpc/rpc_connection.h), the Session capability it authenticated, the
// job's listener capabilities, and the calls a job makes, as absl::Status. RemotePool dials one
// at connect and one per reconnection (runtime/client/reconnector.h). A link knows nothing of
// leases held or requests pending: those are RemotePool's (runtime/client/remote_session_state.h).
//
//   absl::StatusOr<std::unique_ptr<PoolLink>> link = PoolLink::Dial(options, &head);
//   absl::Status st = (*link)->Request(request, listener);   // waits for the head's answer
//   (*link)->PostRelease(lease_id);                           // in order, without waiting
//
// Client-internal: KJ and Cap'n Proto types appear in the client layer only here, in
// pool_link.cc and in head_report.cc (RemotePool's other parts use none). Included by
// remote_pool.cc and reconnector.cc; never above the client layer.
//
// Threads: the waiting calls (Request, Withdraw, Release, DescribeNode, StartWorker, Reclaim) from any thread
// but the link's own loop thread; the Post... calls from any thread, the loop's included. Every
// call and Post runs on the loop thread in the order made. The session and listener capabilities
// are the loop thread's only. Events are called on the loop thread.
#ifndef GPUPOOL_RUNTIME_CLIENT_POOL_LINK_H_
#define GPUPOOL_RUNTIME_CLIENT_POOL_LINK_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <kj/async.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pool/scheduler/scheduler.h"
#include "runtime/client/pool_client.h"
#include "runtime/rpc/node_codec.h"
#include "runtime/rpc/pool_service.capnp.h"
#include "runtime/rpc/rpc_connection.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

class PoolLink {
 public:
  // What the head tells the job over this link, on the link's loop thread. A listener capability
  // made for a null listener (a lease given back while away, reclaimed only to be released)
  // reports nothing.
  class Events {
   public:
    virtual ~Events() = default;
    virtual void Granted(pool::Lease lease, LeaseListener* user) = 0;
    virtual void Revoked(std::string lease_id, pool::RevokeCause cause, double deadline_s, LeaseListener* user) = 0;
    virtual void Lost(std::string lease_id, std::string why, LeaseListener* user) = 0;
    // The connection dropped: once per link, never when the link is destroyed.
    virtual void Disconnected(const absl::Status& why) = 0;
  };

  struct Options {
    std::string host;
    uint16_t port = 0;
    std::string team;
    std::string token;
    std::string job_key;       // presented at authentication: lets this job reclaim its leases
    Events* events = nullptr;  // required; outlives the link
  };

  // What the head said about itself when the session was made.
  struct HeadInfo {
    double pool_now_s = 0;
    double clock_speed = 1;
    double capacity_gpus = 0;
    std::string config_yaml;  // empty: the head has no configuration file
  };

  // The answer to Reclaim: the leases the head kept for this session and the requests it still
  // has queued for it.
  struct Reclaimed {
    std::set<std::string> kept;
    std::set<std::string> queued;
  };
  using Holders = std::vector<std::pair<std::string, LeaseListener*>>;  // (lease or request id, listener)

  // Connects, authenticates and reads the head's clock and configuration into `head`.
  // kUnavailable when the head cannot be reached; the head's refusal otherwise.
  static absl::StatusOr<std::unique_ptr<PoolLink>> Dial(const Options& options, HeadInfo* head);
  // Drops the capabilities on the loop thread, then closes the connection: no event after this.
  ~PoolLink();
  PoolLink(const PoolLink&) = delete;
  PoolLink& operator=(const PoolLink&) = delete;

  bool connected() const { return connection_->connected(); }
  const std::string& local_host() const { return connection_->local_host(); }
  // How long the head keeps this job's leases for it to reclaim after the connection is lost (a
  // restart, or a lost connection; 0: it does not, without a journal or a job key).
  std::chrono::milliseconds reclaim_window() const { return reclaim_window_; }

  // Asks for `r` and waits for the answer: the head's refusal, or OK. A grant in the answer is
  // reported to Events::Granted, on the loop thread, before this returns.
  absl::Status Request(const pool::LeaseRequest& r, LeaseListener* listener);
  // Asks for `r` without waiting; `answered` runs on the loop thread with the head's answer (a
  // grant in it reported first, as Request does). Not called when the connection fails first.
  void PostRequest(const pool::LeaseRequest& r, LeaseListener* listener,
                   std::function<void(const absl::Status&)> answered);
  absl::Status Withdraw(const std::string& request_id);
  absl::Status Release(const std::string& lease_id);
  // The same calls without waiting, their answer and any failure ignored.
  void PostWithdraw(const std::string& request_id);
  // `busy_gpu_s`: how long tasks kept the lease busy (PoolClient::ReleaseUsed; negative: unknown).
  void PostRelease(const std::string& lease_id, double busy_gpu_s = -1);
  void PostCheckpointed(const std::string& lease_id, const CheckpointNote& note);
  void PostForgetCheckpoints(const std::string& task_key);
  absl::StatusOr<rpc::DiscoveredPool> DescribeNode(const std::string& name);
  // Session.startWorker: the worker's pid, or the head's (or its agent's) refusal.
  absl::StatusOr<int> StartWorker(const WorkerLaunch& launch);
  // Takes over, for this session, the leases `held` (with their listeners) and `given_back`
  // (with none, to be released), and the requests `waiting`. An error when the call failed.
  absl::StatusOr<Reclaimed> Reclaim(const Holders& held, const std::vector<std::string>& given_back,
                                    const Holders& waiting);
  // Tells the head the job ends (it gives back at once what is left instead of keeping it for a
  // reclaim), waiting at most `timeout`; sent after every call made before it.
  void Leave(std::chrono::milliseconds timeout);

 private:
  explicit PoolLink(Events& events) : events_(events) {}
  // Loop thread, while session_ is there.
  rpc::LeaseListener::Client ListenerFor(LeaseListener* user) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_);
  kj::Promise<absl::Status> RequestOn(const pool::LeaseRequest& r, LeaseListener* listener)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_);
  kj::Promise<absl::Status> WithdrawOn(const std::string& request_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_);
  kj::Promise<absl::Status> ReleaseOn(const std::string& lease_id, double busy_gpu_s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_);
  // A request's answer: its status, and the grant when it carries one.
  absl::Status Answered(const capnp::Response<rpc::Session::RequestResults>& resp, LeaseListener* listener);

  Events& events_;
  // Constant once Dial returns. Declared first: the connection outlives the capabilities below.
  std::unique_ptr<RpcConnection> connection_;
  std::chrono::milliseconds reclaim_window_{0};
  // The connection's loop thread only: every closure sent there (Call, Post, Sync, and Dial's
  // setup) asserts loop_ first. The session is a capability of the connection's loop, so
  // ~PoolLink drops it there before the connection closes; a Post that runs later finds it gone.
  ThreadConfined loop_;
  std::optional<rpc::Session::Client> session_ ABSL_GUARDED_BY(loop_);
  // One capability per job listener, sent with each of its requests: the head then holds one
  // import for it instead of one per request, and does not send a Release message each time a
  // lease ends.
  std::map<LeaseListener*, rpc::LeaseListener::Client> listeners_ ABSL_GUARDED_BY(loop_);
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_CLIENT_POOL_LINK_H_
