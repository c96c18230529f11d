#include "runtime/rpc/rpc_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <future>
#include <utility>

#include <capnp/message.h>
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/async-unix.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/read_ahead_stream.h"

namespace gpupool::runtime {

absl::Status StatusFromKj(const kj::Exception& e, const std::string& context) {
  std::string what = absl::StrCat(context, ": ", e.getDescription().cStr());
  switch (e.getType()) {
    case kj::Exception::Type::DISCONNECTED: return absl::UnavailableError(what);
    case kj::Exception::Type::OVERLOADED: return absl::ResourceExhaustedError(what);
    case kj::Exception::Type::UNIMPLEMENTED: return absl::UnimplementedError(what);
    default: return absl::InternalError(what);
  }
}

absl::Status ParseHostPort(const std::string& text, std::string* host, uint16_t* port) {
  size_t colon = text.rfind(':');
  uint32_t p = 0;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(text.substr(colon + 1), &p) || p == 0 ||
      p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not HOST:PORT (e.g. 127.0.0.1:7070)"));
  }
  *host = text.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  *port = static_cast<uint16_t>(p);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RpcConnection>> RpcConnection::Connect(RpcConnectionOptions options, Setup setup) {
  std::unique_ptr<RpcConnection> c(new RpcConnection(std::move(options)));
  c->posted_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->posted_fd_ < 0) return absl::InternalError("eventfd failed: cannot start an RPC connection");
  std::promise<absl::Status> started;
  std::future<absl::Status> result = started.get_future();
  c->thread_ = std::thread([raw = c.get(), &setup, &started] { raw->Run(setup, started); });
  absl::Status st = result.get();
  if (!st.ok()) {
    c->thread_.join();
    return st;
  }
  return c;
}

void RpcConnection::Run(Setup& setup, std::promise<absl::Status>& started) {
  loop_.AssertOnThread();
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
    auto addr = io.provider->getNetwork().parseAddress(options_.host, options_.port).wait(io.waitScope);
    stream = kj::heap<rpc::ReadAheadStream>(addr->connect().wait(io.waitScope));
  })) {
    started.set_value(absl::UnavailableError(absl::StrCat("cannot reach the pool service at ", options_.host,
                                                          ":", options_.port, ": ", e->getDescription().cStr())));
    return;
  }
  {
    sockaddr_storage local{};
    kj::uint length = sizeof(local);
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { stream->getsockname(reinterpret_cast<sockaddr*>(&local), &length); })) {
      (void)e;  // not a socket: no address to name
    } else {
      char text[INET6_ADDRSTRLEN] = "";
      if (local.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, text, sizeof(text));
      } else if (local.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, text, sizeof(text));
      }
      local_host_ = text;
    }
  }
  // Low latency over throughput: lease calls are small request/response pairs.
  int one = 1;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { stream->setsockopt(IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); })) {
    (void)e;  // not a TCP socket (a test's pipe): nothing to tune
  }
  capnp::ReaderOptions reader;
  reader.traversalLimitInWords = rpc::kMaxMessageWords;
  reader.nestingLimit = 16;
  capnp::TwoPartyVatNetwork network(*stream, capnp::rpc::twoparty::Side::CLIENT, reader);
  auto system = capnp::makeRpcClient(network);
  absl::Status st;
  {
    capnp::MallocMessageBuilder vat;
    auto id = vat.initRoot<capnp::rpc::twoparty::VatId>();
    id.setSide(capnp::rpc::twoparty::Side::SERVER);
    auto head = system.bootstrap(id).castAs<rpc::PoolService>();
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { st = setup(head, io.waitScope); })) {
      st = StatusFromKj(*e, "pool service");
    }
  }
  if (!st.ok()) {
    started.set_value(st);
    return;
  }
  executor_ = kj::getCurrentThreadExecutor().addRef();
  // Post's wake-up: one eventfd, watched by the loop, drained with the queue it guards.
  kj::UnixEventPort::FdObserver posted(io.unixEventPort, posted_fd_, kj::UnixEventPort::FdObserver::OBSERVE_READ);
  std::function<kj::Promise<void>()> pump = [&]() -> kj::Promise<void> {
    return posted.whenBecomesReadable().then([&]() {
      uint64_t n = 0;
      while (read(posted_fd_, &n, sizeof n) > 0) {
      }
      std::vector<std::function<void()>> work;
      {
        MutexLock lock(&posted_mu_);
        work.swap(posted_);
      }
      for (auto& f : work) f();
      return pump();
    });
  };
  kj::Promise<void> pumping = pump().eagerlyEvaluate([](kj::Exception&&) {});
  auto stop = kj::newPromiseAndFulfiller<void>();
  stop_ = kj::mv(stop.fulfiller);
  auto lost = [this](absl::Status why) {
    if (stopping_.load() || disconnected_.exchange(true)) return;
    if (options_.on_disconnected) options_.on_disconnected(why);
  };
  kj::Promise<void> watch = network.onDisconnect()
      .then([lost] { lost(absl::UnavailableError(kConnectionLost)); },
            [lost](kj::Exception&& e) { lost(StatusFromKj(e, kConnectionLost)); })
      .eagerlyEvaluate(nullptr);
  started.set_value(absl::OkStatus());
  stop.promise.wait(io.waitScope);
}

RpcConnection::~RpcConnection() {
  stopping_.store(true);
  if (thread_.joinable()) {
    executor_->executeSync([this] {
      loop_.AssertOnThread();
      stop_->fulfill();
    });
    thread_.join();
  }
  if (posted_fd_ >= 0) close(posted_fd_);
}

void RpcConnection::Post(std::function<void()> f) {
  bool wake;
  {
    MutexLock lock(&posted_mu_);
    wake = posted_.empty();  // otherwise a wake-up is already on its way
    posted_.push_back(std::move(f));
  }
  if (wake) {
    uint64_t one = 1;
    (void)!write(posted_fd_, &one, sizeof one);
  }
}

void RpcConnection::Sync(const std::function<void()>& f) {
  executor_->executeSync([&f] { f(); });
}

}  // namespace gpupool::runtime
