// File: runtime/service/pool_server_impl.h
//
// The pool server's core (PoolServer::Impl, pool_server.cc): the event loop's thread, start and
// stop, and the wiring of the parts it owns, each in files of its own:
//   - EventPump (event_pump.h): the pool's listener; queues its calls for the loop thread and
//     runs the scheduling cycles the loop asks for;
//   - SessionDirectory (session_directory.h): which job session holds each request and lease;
//   - HeadDurability (head_durability.h): the journal and what is kept for jobs that are away;
//   - AgentRegistry (agent_registry.h): the node agents and their heartbeats;
//   - WorkerJobs (worker_jobs.h): which session speaks for each job's workers, and where they are;
//   - HeadAuth (head_auth.h): the tokens;
//   - JobSession (job_session.h), AgentSession and PoolServiceRpc (pool_service_rpc.h): the RPC
//     objects the connections hold;
//   - HeadReportJson / UsageJson (head_report_json.h): the reports.
// Not for other users.
#ifndef GPUPOOL_RUNTIME_SERVICE_POOL_SERVER_IMPL_H_
#define GPUPOOL_RUNTIME_SERVICE_POOL_SERVER_IMPL_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include <capnp/capability.h>
#include <kj/async-io.h>

#include "absl/status/status.h"
#include "runtime/service/agent_registry.h"
#include "runtime/service/event_pump.h"
#include "runtime/service/head_auth.h"
#include "runtime/service/head_durability.h"
#include "runtime/http/http_server.h"
#include "runtime/service/job_session.h"
#include "runtime/service/pool_server.h"
#include "runtime/service/pool_service.h"
#include "runtime/service/session_directory.h"
#include "runtime/service/worker_jobs.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

// Everything the server's event loop owns. The pool calls the pump's LeaseListener methods on
// its own thread; they only queue. All other members are touched on the loop thread only (and
// on the starting thread before the loop runs), except where noted.
class PoolServer::Impl : private kj::TaskSet::ErrorHandler {
 public:
  Impl(std::unique_ptr<PoolService> pool, PoolServerOptions options);
  // Closes every connection (their sessions end knowing the head is stopping), stops the loop,
  // then stops the pool, then closes the journal.
  ~Impl() noexcept;

  // Opens the journal, then starts the loop's thread and listens; fails when the address may not
  // be used or cannot be bound, or the journal cannot be opened.
  absl::Status Start();
  // After the loop runs: the HTTP endpoint, if the options ask for one.
  absl::Status StartHttp();

  // Any thread: run on the loop thread, wait for it.
  std::string ReportFromAnyThread() {
    std::string out;
    executor_->executeSync([&] { out = Report(); });
    return out;
  }
  size_t AgentsUp() {
    size_t n = 0;
    executor_->executeSync([&] { n = agents_.size(); });
    return n;
  }

  // Constant after Start.
  std::unique_ptr<PoolService> pool_;  // reset (the pool stopped) by the destructor
  PoolServerOptions options_;
  uint16_t port_ = 0;
  std::atomic<uint64_t> accepted_{0};  // any thread
  std::unique_ptr<HttpServer> http_;   // set by Start when asked for; reset first by ~Impl

 private:
  void Run(std::promise<absl::Status>& started);
  kj::Promise<void> AcceptLoop(kj::ConnectionReceiver& listener, kj::TaskSet& tasks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_);
  std::string Report();  // loop thread
  // Samples the pool's history into the journal every history_interval; loop thread.
  kj::Promise<void> SampleHistory(kj::Timer& timer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_);
  // Stops the workers of jobs that did not come back within the reclaim window (WorkerJobs).
  kj::Promise<void> StopUnclaimedWorkers(kj::Timer& timer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_);
  void taskFailed(kj::Exception&& e) override {
    if (e.getType() != kj::Exception::Type::DISCONNECTED) {
      std::fprintf(stderr, "gpupool head: connection task failed: %s\n", e.getDescription().cStr());
    }
  }

  std::thread thread_;
  kj::Own<const kj::Executor> executor_;           // set before Start returns
  // The loop thread's own state says so: ABSL_GUARDED_BY(loop_), and the code that runs there
  // asserts it (loop_.AssertOnThread()) where it starts: Run, and the closures sent by executor_.
  // The parts below are the loop thread's as a whole (each says so at its top).
  ThreadConfined loop_;
  kj::Own<kj::PromiseFulfiller<void>> stop_ ABSL_GUARDED_BY(loop_);  // fulfilled via executor_
  kj::Maybe<capnp::Capability::Client> bootstrap_ ABSL_GUARDED_BY(loop_);

  // The parts, in the order they are made (each may use those above it). They hold references
  // to *pool_, which outlives every use: the loop has stopped before pool_ is reset.
  const HeadAuth auth_;
  SessionDirectory sessions_;
  EventPump pump_;  // the pool's listener: outlives the pool (reset in ~Impl)
  HeadDurability durable_;
  AgentRegistry agents_;
  WorkerJobs workers_;
  const JobSessionDeps session_deps_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_POOL_SERVER_IMPL_H_
