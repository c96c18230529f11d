#include "transport/host_communicator.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace gpupool::transport {
namespace {

// Message header: "GPC1" | u32 source rank | u64 tag. The payload is the message.
constexpr char kMagic[4] = {'G', 'P', 'C', '1'};
constexpr size_t kHeaderBytes = 16;
// Create's handshake (sequence 0); collectives use sequences from 1 on.
constexpr uint64_t kProbeTag = kReservedTags;
constexpr uint64_t kProbeReplyTag = kReservedTags + 1;
constexpr absl::Duration kProbeInterval = absl::Milliseconds(50);

std::string EncodeHeader(int source, uint64_t tag) {
  std::string header(kMagic, sizeof(kMagic));
  uint32_t src = static_cast<uint32_t>(source);
  header.append(reinterpret_cast<const char*>(&src), sizeof(src));
  header.append(reinterpret_cast<const char*>(&tag), sizeof(tag));
  return header;
}

// Waits for a fixed number of completions; keeps the first error.
class Completions {
 public:
  explicit Completions(int expected) : pending_(expected) {}
  void Done(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    if (first_error_.ok() && !status.ok()) first_error_ = status;
    --pending_;
  }
  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(+[](int* n) { return *n == 0; }, &pending_));
    return first_error_;
  }

 private:
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_);
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

struct HostCommunicator::Receive {
  std::pair<int, uint64_t> key;  // (source rank, tag)
  absl::Span<std::byte> dst;
  absl::AnyInvocable<void(absl::StatusOr<size_t>) &&> done;
  uint64_t timer = 0;
};

struct HostCommunicator::Unexpected {
  std::unique_ptr<std::byte[]> bytes;
  size_t size = 0;
  bool arrived = false;  // false while a rendezvous still fills `bytes`
  absl::Status status;
  std::unique_ptr<Receive> waiter;  // a Recv that matched it before it arrived
};

absl::StatusOr<std::unique_ptr<HostCommunicator>> HostCommunicator::Create(
    UcxWorker& worker, int rank, std::vector<std::string> addresses,
    HostCommunicatorOptions options) {
  if (addresses.empty() || rank < 0 || rank >= static_cast<int>(addresses.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " of a communicator of ", addresses.size()));
  }
  if (addresses[rank] != worker.address()) {
    return absl::InvalidArgumentError(
        absl::StrCat("addresses[", rank, "] is not this worker's address"));
  }
  std::unique_ptr<HostCommunicator> comm(new HostCommunicator(worker, rank, options));
  for (size_t r = 0; r < addresses.size(); ++r) {
    absl::StatusOr<PeerId> peer = worker.Connect(addresses[r], absl::StrCat("rank ", r));
    if (!peer.ok()) return peer.status();
    comm->peers_.push_back(*peer);
  }
  HostCommunicator* c = comm.get();
  worker.RunInLoop([c] {
    for (int r = 0; r < c->size(); ++r) c->rank_of_[c->peers_[r]] = r;
    c->failure_listener_ = c->worker_.AddPeerFailureListener(
        [c](PeerId peer, const absl::Status& status) { c->OnPeerFailed(peer, status); });
  });
  worker.SetAmHandler(AmId::kCollective, [c](AmMessage& message) { c->OnMessage(message); });
  if (absl::Status s = comm->Handshake(); !s.ok()) return s;
  return comm;
}

HostCommunicator::HostCommunicator(UcxWorker& worker, int rank, HostCommunicatorOptions options)
    : worker_(worker), rank_(rank), options_(options) {}

HostCommunicator::~HostCommunicator() {
  worker_.ClearAmHandler(AmId::kCollective);
  // Messages still arriving (unexpected rendezvous) call back into this object: wait for them.
  bool arriving = true;
  while (arriving) {
    worker_.RunInLoop([&] {
      Break(absl::CancelledError("the communicator was destroyed"));
      arriving = false;
      for (const auto& [key, queue] : unexpected_) {
        for (const auto& message : queue) arriving |= !message->arrived;
      }
      if (!arriving) worker_.RemovePeerFailureListener(failure_listener_);
    });
    if (arriving) absl::SleepFor(absl::Milliseconds(1));
  }
}

absl::Status HostCommunicator::CheckRank(int r, const char* what) const {
  if (r >= 0 && r < size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " rank ", r, " outside 0..", size() - 1));
}

// A rank whose communicator does not exist yet drops what is sent to it (its worker has no
// handler for it), so each rank probes every other one until it answers: an answer proves the
// peer's handler is installed, and wires the endpoints up both ways on the way.
absl::Status HostCommunicator::Handshake() {
  absl::Notification done;
  absl::Status result;
  worker_.Post([&] {
    unanswered_.assign(size(), true);
    unanswered_[rank_] = false;
    handshake_done_ = [&] {
      result = broken_;
      done.Notify();
    };
    handshake_deadline_ = absl::Now() + options_.timeout;
    Probe();
  });
  done.WaitForNotification();
  return result;
}

void HostCommunicator::Probe() {
  if (!broken_.ok() || std::none_of(unanswered_.begin(), unanswered_.end(), [](bool b) { return b; })) {
    std::exchange(handshake_done_, nullptr)();
    return;
  }
  if (absl::Now() > handshake_deadline_) {
    int silent = static_cast<int>(std::find(unanswered_.begin(), unanswered_.end(), true) -
                                  unanswered_.begin());
    Break(absl::DeadlineExceededError(absl::StrCat(
        "rank ", rank_, ": rank ", silent, " did not join the communicator in ",
        absl::FormatDuration(options_.timeout))));
    std::exchange(handshake_done_, nullptr)();
    return;
  }
  for (int r = 0; r < size(); ++r) {
    if (unanswered_[r]) StartSend(r, kProbeTag, {}, [](absl::Status) {});
  }
  worker_.AddTimer(absl::Now() + kProbeInterval, [this] { Probe(); });
}

absl::Status HostCommunicator::Send(int dst, uint64_t tag, absl::Span<const std::byte> data) {
  if (absl::Status s = CheckRank(dst, "destination"); !s.ok()) return s;
  if (tag >= kReservedTags) return absl::InvalidArgumentError("tag in the reserved range");
  Completions done(1);
  worker_.Post([&] { StartSend(dst, tag, data, [&](absl::Status s) { done.Done(s); }); });
  return done.Wait();
}

absl::StatusOr<size_t> HostCommunicator::Recv(int src, uint64_t tag, absl::Span<std::byte> dst) {
  if (absl::Status s = CheckRank(src, "source"); !s.ok()) return s;
  if (tag >= kReservedTags) return absl::InvalidArgumentError("tag in the reserved range");
  absl::StatusOr<size_t> result;
  absl::Notification done;
  worker_.Post([&] {
    StartRecv(src, tag, dst, [&](absl::StatusOr<size_t> got) {
      result = std::move(got);
      done.Notify();
    });
  });
  done.WaitForNotification();
  return result;
}

absl::Status HostCommunicator::Exchange(int dst, absl::Span<const std::byte> out, int src,
                                        absl::Span<std::byte> in, uint64_t tag) {
  Completions done(2);
  worker_.Post([&] {
    StartSend(dst, tag, out, [&](absl::Status s) { done.Done(s); });
    StartRecv(src, tag, in, [&](absl::StatusOr<size_t> got) {
      if (got.ok() && *got != in.size()) {
        got = absl::InternalError(absl::StrCat("rank ", src, " sent ", *got, " bytes where ",
                                               in.size(), " were expected: the ranks called "
                                               "the collective with different sizes"));
      }
      done.Done(got.status());
    });
  });
  return done.Wait();
}

absl::Status HostCommunicator::Broadcast(int root, absl::Span<std::byte> data) {
  if (absl::Status s = CheckRank(root, "root"); !s.ok()) return s;
  ++sequence_;
  const int n = size();
  const int me = (rank_ - root + n) % n;  // rank relative to the root
  auto real = [&](int relative) { return (relative + root) % n; };
  int mask = 1;
  uint32_t step = 0;
  // Receive once from the parent (the relative rank without its lowest set bit)...
  for (; mask < n; mask <<= 1) {
    if (me & mask) {
      Completions done(1);
      worker_.Post([&] {
        StartRecv(real(me - mask), CollectiveTag(step), data, [&](absl::StatusOr<size_t> got) {
          if (got.ok() && *got != data.size()) {
            got = absl::InternalError("broadcast sizes differ between ranks");
          }
          done.Done(got.status());
        });
      });
      if (absl::Status s = done.Wait(); !s.ok()) return s;
      break;
    }
  }
  // ...then send to each child, largest subtree first.
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (me + mask < n) {
      Completions done(1);
      worker_.Post([&] {
        StartSend(real(me + mask), CollectiveTag(step), data,
                  [&](absl::Status s) { done.Done(s); });
      });
      if (absl::Status s = done.Wait(); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status HostCommunicator::RingAllReduce(absl::Span<std::byte> bytes, size_t element_size,
                                             void (*reduce)(std::byte*, const std::byte*,
                                                            size_t)) {
  ++sequence_;
  const int n = size();
  if (n == 1) return absl::OkStatus();
  const size_t elements = bytes.size() / element_size;
  auto chunk = [&](int c) {
    size_t begin = elements * c / n, end = elements * (c + 1) / n;
    return bytes.subspan(begin * element_size, (end - begin) * element_size);
  };
  const int right = (rank_ + 1) % n, left = (rank_ - 1 + n) % n;
  std::vector<std::byte> incoming(chunk(n - 1).size() + element_size);
  uint32_t step = 0;
  // Reduce-scatter: after n-1 steps this rank holds the reduced chunk (rank+1) % n.
  for (int k = 0; k < n - 1; ++k, ++step) {
    absl::Span<std::byte> mine = chunk((rank_ - k - 1 + 2 * n) % n);
    absl::Span<std::byte> in = absl::MakeSpan(incoming).first(mine.size());
    if (absl::Status s = Exchange(right, chunk((rank_ - k + n) % n), left, in, CollectiveTag(step));
        !s.ok()) {
      return s;
    }
    reduce(mine.data(), in.data(), mine.size() / element_size);
  }
  // All-gather: pass the reduced chunks around the ring.
  for (int k = 0; k < n - 1; ++k, ++step) {
    if (absl::Status s = Exchange(right, chunk((rank_ - k + 1 + n) % n), left,
                                  chunk((rank_ - k + n) % n), CollectiveTag(step));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status HostCommunicator::AllReduce(absl::Span<T> data, ReduceOp op) {
  return RingAllReduce(
      absl::Span<std::byte>(reinterpret_cast<std::byte*>(data.data()), data.size() * sizeof(T)),
      sizeof(T), ReducerFor<T>(op));
}

template absl::Status HostCommunicator::AllReduce<float>(absl::Span<float>, ReduceOp);
template absl::Status HostCommunicator::AllReduce<double>(absl::Span<double>, ReduceOp);
template absl::Status HostCommunicator::AllReduce<int32_t>(absl::Span<int32_t>, ReduceOp);
template absl::Status HostCommunicator::AllReduce<int64_t>(absl::Span<int64_t>, ReduceOp);

// --- Loop thread -------------------------------------------------------------------------------

void HostCommunicator::StartSend(int dst, uint64_t tag, absl::Span<const std::byte> data,
                                 OpDone done) {
  if (!broken_.ok()) {
    std::move(done)(broken_);
    return;
  }
  // A send that outlives the deadline (a wedged receiver) breaks the communicator; resetting
  // the endpoint then cancels the send, which reports it.
  uint64_t timer = worker_.AddTimer(absl::Now() + options_.timeout, [this, dst] {
    absl::Status late = absl::DeadlineExceededError(
        absl::StrCat("rank ", rank_, ": a send to rank ", dst, " took over ",
                     absl::FormatDuration(options_.timeout)));
    Break(late);
    worker_.FailPeer(peers_[dst], late);
  });
  worker_.SendAm(peers_[dst], AmId::kCollective, EncodeHeader(rank_, tag), data.data(),
                 data.size(), /*reply=*/false,
                 [this, timer, done = std::move(done)](absl::Status sent) mutable {
                   worker_.CancelTimer(timer);
                   if (!sent.ok()) Break(sent);
                   std::move(done)(sent.ok() ? sent : broken_);
                 });
}

void HostCommunicator::StartRecv(int src, uint64_t tag, absl::Span<std::byte> dst,
                                 absl::AnyInvocable<void(absl::StatusOr<size_t>) &&> done) {
  if (!broken_.ok()) {
    std::move(done)(broken_);
    return;
  }
  auto receive = std::make_unique<Receive>(Receive{{src, tag}, dst, std::move(done)});
  // An unexpected message already here (or arriving) that no other Recv has claimed.
  auto it = unexpected_.find(receive->key);
  if (it != unexpected_.end()) {
    for (auto& message : it->second) {
      if (message->waiter != nullptr) continue;
      if (message->arrived) {
        DeliverUnexpected(*message, *receive);
        it->second.erase(std::find(it->second.begin(), it->second.end(), message));
        if (it->second.empty()) unexpected_.erase(it);
      } else {
        message->waiter = std::move(receive);
      }
      return;
    }
  }
  Receive* r = receive.get();
  // Also covers a rendezvous into `dst` that stalls: resetting the sender's endpoint cancels it.
  r->timer = worker_.AddTimer(absl::Now() + options_.timeout, [this, src] {
    absl::Status late = absl::DeadlineExceededError(
        absl::StrCat("rank ", rank_, ": nothing complete from rank ", src, " in ",
                     absl::FormatDuration(options_.timeout)));
    Break(late);
    worker_.FailPeer(peers_[src], late);
  });
  receives_[r->key].push_back(std::move(receive));
}

void HostCommunicator::DeliverUnexpected(Unexpected& message, Receive& receive) {
  if (!message.status.ok()) {
    std::move(receive.done)(message.status);
  } else if (message.size > receive.dst.size()) {
    std::move(receive.done)(absl::OutOfRangeError(
        absl::StrCat("message of ", message.size, " bytes from rank ", receive.key.first,
                     " for a buffer of ", receive.dst.size())));
  } else {
    if (message.size > 0) std::memcpy(receive.dst.data(), message.bytes.get(), message.size);
    std::move(receive.done)(message.size);
  }
}

void HostCommunicator::OnMessage(AmMessage& message) {
  absl::string_view header = message.header();
  if (header.size() != kHeaderBytes || std::memcmp(header.data(), kMagic, 4) != 0) return;
  uint32_t src;
  uint64_t tag;
  std::memcpy(&src, header.data() + 4, sizeof(src));
  std::memcpy(&tag, header.data() + 8, sizeof(tag));
  if (src >= static_cast<uint32_t>(size())) return;
  const std::pair<int, uint64_t> key(static_cast<int>(src), tag);
  const size_t size = message.data_size();
  if (tag == kProbeTag) {
    StartSend(key.first, kProbeReplyTag, {}, [](absl::Status) {});
    return;
  }
  if (tag == kProbeReplyTag) {
    if (!unanswered_.empty()) unanswered_[src] = false;
    return;
  }

  auto posted = receives_.find(key);
  if (posted != receives_.end()) {
    std::unique_ptr<Receive> receive = std::move(posted->second.front());
    posted->second.pop_front();
    if (posted->second.empty()) receives_.erase(posted);
    if (size > receive->dst.size() || !message.is_rendezvous()) worker_.CancelTimer(receive->timer);
    if (size > receive->dst.size()) {
      std::move(receive->done)(absl::OutOfRangeError(
          absl::StrCat("message of ", size, " bytes from rank ", src, " for a buffer of ",
                       receive->dst.size())));
      return;
    }
    if (!message.is_rendezvous()) {
      if (size > 0) std::memcpy(receive->dst.data(), message.eager_data().data(), size);
      std::move(receive->done)(size);
      return;
    }
    // Straight into the caller's buffer. A failure of the sender cancels this receive.
    Receive* r = receive.release();
    worker_.ReceiveAmData(message, r->dst.data(), [this, r, size](absl::Status status) {
      std::unique_ptr<Receive> owned(r);
      worker_.CancelTimer(owned->timer);
      if (!status.ok()) Break(status);
      std::move(owned->done)(status.ok() ? absl::StatusOr<size_t>(size) : broken_);
    });
    return;
  }

  // Nobody waits yet: keep the bytes until a Recv asks for them.
  auto unexpected = std::make_unique<Unexpected>();
  // The size comes from the sender: a refusal breaks the communicator, not the process.
  unexpected->bytes.reset(new (std::nothrow) std::byte[size]);
  if (unexpected->bytes == nullptr) {
    Break(absl::ResourceExhaustedError(
        absl::StrCat("rank ", rank_, ": no memory for a message of ", size, " bytes from rank ",
                     src)));
    return;
  }
  unexpected->size = size;
  Unexpected* u = unexpected.get();
  unexpected_[key].push_back(std::move(unexpected));
  if (!message.is_rendezvous()) {
    if (size > 0) std::memcpy(u->bytes.get(), message.eager_data().data(), size);
    u->arrived = true;
    return;
  }
  worker_.ReceiveAmData(message, u->bytes.get(), [this, u, key](absl::Status status) {
    u->arrived = true;
    u->status = status;
    if (!status.ok()) Break(status);
    if (u->waiter == nullptr) return;
    DeliverUnexpected(*u, *u->waiter);
    auto& queue = unexpected_[key];
    queue.erase(std::find_if(queue.begin(), queue.end(),
                             [u](const std::unique_ptr<Unexpected>& m) { return m.get() == u; }));
    if (queue.empty()) unexpected_.erase(key);
  });
}

void HostCommunicator::OnPeerFailed(PeerId peer, const absl::Status& status) {
  auto it = rank_of_.find(peer);
  if (it == rank_of_.end()) return;
  Break(absl::UnavailableError(
      absl::StrCat("rank ", it->second, " of the communicator failed: ", status.message())));
}

void HostCommunicator::Break(absl::Status why) {
  if (!broken_.ok()) return;
  broken_ = std::move(why);
  // Receives waiting for a message fail now; those already receiving fail when their (cancelled)
  // transfer reports back, and Recvs attached to arriving messages when those finish.
  auto waiting = std::move(receives_);
  receives_.clear();
  for (auto& [key, queue] : waiting) {
    for (auto& receive : queue) {
      worker_.CancelTimer(receive->timer);
      std::move(receive->done)(broken_);
    }
  }
}

}  // namespace gpupool::transport
