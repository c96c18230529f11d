#include "runtime/service/pool_server.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <thread>
#include <utility>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include "absl/strings/str_cat.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/read_ahead_stream.h"
#include "runtime/service/head_http.h"
#include "runtime/service/head_report_json.h"
#include "runtime/service/history_sampler.h"
#include "runtime/service/pool_server_impl.h"
#include "runtime/service/pool_service_rpc.h"

namespace gpupool::runtime {
namespace {

// One accepted TCP connection with its own two-party RPC system. Messages are read with the
// traversal limit of lease_codec.h, so a peer cannot make the server allocate without bound.
struct Connection {
  Connection(kj::Own<kj::AsyncIoStream> s, capnp::Capability::Client bootstrap,
             capnp::ReaderOptions options)
      : stream(kj::mv(s)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER, options),
        rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

// Each GPU's health as the journal's last event left it: a GPU failed, drained or quarantined
// before a restart stays so after it. GPUs no longer in the pool are skipped.
absl::Status RestoreHealth(HeadJournal& journal, PoolService& pool) {
  absl::StatusOr<std::vector<HealthEventRow>> events = journal.HealthEvents(0, 1e18);
  if (!events.ok()) return events.status();
  std::map<std::pair<std::string, int64_t>, const HealthEventRow*> last;
  for (const HealthEventRow& e : *events) last[{e.node, e.gpu}] = &e;
  for (const auto& [key, e] : last) {
    pool::HealthState state;
    if (!pool::ParseHealthStateName(e->to_state, &state)) continue;  // a newer head's state: start afresh
    (void)pool.RestoreHealth(pool::GpuRef{e->node, static_cast<int>(e->gpu)}, state, e->reasons, e->t_s,
                             e->drained_by, e->drain_reason);
  }
  return absl::OkStatus();
}

// How often the head samples its history, in seconds (what one sample stands for in `usage`).
double HistoryIntervalSeconds(const PoolServerOptions& options) {
  return std::max(0.0, std::chrono::duration<double>(options.history_interval).count());
}

}  // namespace

PoolServer::Impl::Impl(std::unique_ptr<PoolService> pool, PoolServerOptions options)
    : pool_(std::move(pool)),
      options_(std::move(options)),
      auth_(options_.team_tokens, options_.agent_token, options_.operator_token),
      pump_(*pool_, [this](PoolEvent& e) { DeliverPoolEvent(session_deps_, e); }),
      durable_({*pool_, pump_, sessions_}, options_.journal_path, options_.reclaim_window),
      agents_(*pool_, pump_, durable_, options_.heartbeat_timeout),
      session_deps_{*pool_, pump_, sessions_, durable_, auth_, agents_, workers_, HistoryIntervalSeconds(options_)} {}

std::string PoolServer::Impl::Report() {
  return HeadReportJson(HeadView{*pool_, agents_, sessions_, durable_.kept()}, Viewer::Operator());
}

kj::Promise<void> PoolServer::Impl::SampleHistory(kj::Timer& timer) {
  return timer.afterDelay(options_.history_interval.count() * kj::MILLISECONDS).then([this, &timer] {
    loop_.AssertOnThread();
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const double keep_after = now - std::chrono::duration<double>(options_.history_retention).count();
    // Queued into the journal's next batch: nothing here waits for the disk.
    durable_.journal()->RecordHistory(HistoryRowsOf(pool_->Snapshot(), now), keep_after);
    return SampleHistory(timer);
  });
}

kj::Promise<void> PoolServer::Impl::StopUnclaimedWorkers(kj::Timer& timer) {
  return timer.afterDelay(250 * kj::MILLISECONDS).then([this, &timer] {
    loop_.AssertOnThread();
    for (const auto& [job, nodes] : workers_.TakeExpired(std::chrono::steady_clock::now())) {
      std::fprintf(stderr, "gpupool head: job %s did not come back within the reclaim window: its workers are stopped\n",
                   job.c_str());
      for (const std::string& node : nodes) agents_.StopJob(node, job);
    }
    return StopUnclaimedWorkers(timer);
  });
}

kj::Promise<void> PoolServer::Impl::AcceptLoop(kj::ConnectionReceiver& listener, kj::TaskSet& tasks) {
  return listener.accept().then([this, &listener, &tasks](kj::Own<kj::AsyncIoStream>&& stream) {
    loop_.AssertOnThread();
    accepted_.fetch_add(1);
    int one = 1;
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { stream->setsockopt(IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); })) {
      (void)e;
    }
    capnp::ReaderOptions options;
    options.traversalLimitInWords = rpc::kMaxMessageWords;
    options.nestingLimit = 16;
    auto c = kj::heap<Connection>(kj::heap<rpc::ReadAheadStream>(kj::mv(stream)), KJ_ASSERT_NONNULL(bootstrap_), options);
    kj::Promise<void> done = c->network.onDisconnect();
    tasks.add(done.attach(kj::mv(c)));
    return AcceptLoop(listener, tasks);
  });
}

void PoolServer::Impl::Run(std::promise<absl::Status>& started) {
  loop_.AssertOnThread();
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::ConnectionReceiver> listener;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
    auto addr = io.provider->getNetwork().parseAddress(options_.address, options_.port).wait(io.waitScope);
    listener = addr->listen();
  })) {
    started.set_value(absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options_.address, ":", options_.port, ": ", e->getDescription().cStr())));
    return;
  }
  port_ = static_cast<uint16_t>(listener->getPort());
  executor_ = kj::getCurrentThreadExecutor().addRef();
  pool_->OwnerSchedules();
  auto stop = kj::newPromiseAndFulfiller<void>();
  stop_ = kj::mv(stop.fulfiller);
  bootstrap_ = capnp::Capability::Client(kj::heap<PoolServiceRpc>(session_deps_, agents_));
  {
    kj::TaskSet tasks(*this);
    tasks.add(AcceptLoop(*listener, tasks));
    tasks.add(pump_.Run());
    tasks.add(agents_.WatchHeartbeats(io.provider->getTimer()));
    if (durable_.journal() != nullptr) {
      tasks.add(durable_.GiveBackExpired(io.provider->getTimer()));
      tasks.add(StopUnclaimedWorkers(io.provider->getTimer()));
    }
    if (durable_.journal() != nullptr && options_.history_interval.count() > 0) {
      tasks.add(SampleHistory(io.provider->getTimer()));
    }
    started.set_value(absl::OkStatus());
    stop.promise.wait(io.waitScope);
  }  // connections close here; their sessions give back what they held
  bootstrap_ = nullptr;
  agents_.Clear();
  pump_.Close();
}

absl::Status PoolServer::Impl::Start() {
  bool loopback = false;
  for (const char* ok : {"127.0.0.1", "localhost", "::1"}) loopback |= options_.address == ok;
  if (!loopback && !options_.allow_network) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the pool server listens on loopback unless told it may use the network; got '", options_.address,
        "' (gpupool head --insecure-network, or --gpupool-head-listen under mpirun: tokens travel unencrypted)"));
  }
  if (absl::Status st = durable_.Open(); !st.ok()) return st;
  if (HeadJournal* journal = durable_.journal(); journal != nullptr) {
    if (absl::Status st = RestoreHealth(*journal, *pool_); !st.ok()) return st;
    // Every health transition, with its reason and who made it; queued, never waited for.
    pool_->SetHealthObserver(
        [journal](const pool::GpuRef& gpu, const pool::HealthTransition& t, const pool::GpuHealthMachine& after) {
          journal->RecordHealthEvent(HealthEventRow{.t_s = t.at_s, .node = gpu.node, .gpu = gpu.index,
                                                    .from_state = std::string(pool::HealthStateName(t.from)),
                                                    .to_state = std::string(pool::HealthStateName(t.to)),
                                                    .reason = t.reason, .actor = t.actor, .reasons = after.reasons(),
                                                    .drained_by = after.drained_by(),
                                                    .drain_reason = after.drain_reason()});
        });
  }
  std::promise<absl::Status> started;
  std::future<absl::Status> result = started.get_future();
  thread_ = std::thread([this, &started] { Run(started); });
  absl::Status st = result.get();
  if (!st.ok()) {
    thread_.join();
    return st;
  }
  return StartHttp();  // on failure the destructor stops the loop
}

absl::Status PoolServer::Impl::StartHttp() {
  if (!options_.http) return absl::OkStatus();
  HeadHttpDeps deps{.auth = auth_, .pool = *pool_, .journal = durable_.journal(),
                    .report = [this](const Viewer& viewer) {
                      // The sessions and agents are the loop thread's: the report is made there.
                      std::string out;
                      executor_->executeSync([&] {
                        loop_.AssertOnThread();
                        out = HeadReportJson(HeadView{*pool_, agents_, sessions_, durable_.kept()}, viewer);
                      });
                      return out;
                    },
                    .history_interval_s = HistoryIntervalSeconds(options_)};
  absl::StatusOr<std::unique_ptr<HttpServer>> http = HttpServer::Start(
      HttpServerOptions{.address = options_.http_address, .port = options_.http_port,
                        .allow_network = options_.allow_network},
      [deps](const HttpRequest& request) { return HandleHeadHttp(deps, request); });
  if (!http.ok()) return http.status();
  http_ = *std::move(http);
  return absl::OkStatus();
}

PoolServer::Impl::~Impl() noexcept {
  http_.reset();  // its handler reaches into the loop: it stops first
  if (thread_.joinable()) {
    executor_->executeSync([this] {
      loop_.AssertOnThread();
      sessions_.set_stopping();  // the sessions closing now keep their jobs' leases (see ~JobSession)
      stop_->fulfill();
    });
    thread_.join();
  }
  pool_.reset();  // stops the pool's thread: no listener call reaches pump_ afterwards
  durable_.Close();  // commits what is queued
}

absl::StatusOr<std::unique_ptr<PoolServer>> PoolServer::Start(std::unique_ptr<PoolService> pool,
                                                              const PoolServerOptions& options) {
  if (pool == nullptr) return absl::InvalidArgumentError("no pool to serve");
  auto impl = std::make_unique<Impl>(std::move(pool), options);
  absl::Status st = impl->Start();
  if (!st.ok()) return st;
  return std::unique_ptr<PoolServer>(new PoolServer(std::move(impl)));
}

PoolServer::PoolServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PoolServer::~PoolServer() = default;
uint16_t PoolServer::port() const { return impl_->port_; }
uint16_t PoolServer::http_port() const { return impl_->http_ ? impl_->http_->port() : 0; }
PoolService& PoolServer::pool() { return *impl_->pool_; }
uint64_t PoolServer::connections_accepted() const { return impl_->accepted_.load(); }
std::string PoolServer::Report() { return impl_->ReportFromAnyThread(); }
size_t PoolServer::agents_connected() { return impl_->AgentsUp(); }

}  // namespace gpupool::runtime
